// Package tracing is OpenTelemetry tracing for the server, the coordinator
// and the node daemons: set up from the standard OTEL_* variables (Setup;
// nothing is exported unless OTEL_EXPORT_ENABLED is true), spans started
// with Start and ended with End, and the trace context carried to the node
// daemons in a traceparent header and taken from a client's
// params._meta.traceparent (propagate.go).
//
// Off (the default) every helper returns at once on one atomic load: no
// span, no context value, no allocation, so an untraced tool call costs
// what it did before (docs/BENCHMARKS.md).
package tracing

import (
	"context"
	"log/slog"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// scope is the instrumentation scope every span of ours is created in.
const scope = "github.com/probing-mcp/probing-mcp"

// state is what Setup (or Use) installed; nil while tracing is off.
type state struct {
	tracer     trace.Tracer
	recordArgs bool
	logger     *slog.Logger
}

var cur atomic.Pointer[state]

// lastDrops is the newest setup's drop counter, kept after its shutdown
// (which counts what it could not flush).
var lastDrops atomic.Pointer[dropCounter]

// noSpan is what Start returns while tracing is off.
var noSpan trace.Span = noop.Span{} // boxed once: returning noop.Span{} would allocate each time

// Enabled is whether spans are being recorded.
func Enabled() bool { return cur.Load() != nil }

// RecordArgs is whether tool arguments may be recorded on spans
// (PROBING_MCP_TRACE_ARGS; off by default: arguments may hold paths, SQL
// or code a collector's readers should not see).
func RecordArgs() bool {
	s := cur.Load()
	return s != nil && s.recordArgs
}

// Start begins an internal span, a child of ctx's span (or of a remote
// parent ctx carries). Off, it returns ctx itself and a no-op span.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return StartKind(ctx, name, trace.SpanKindInternal, attrs...)
}

// StartKind is Start with a span kind (server, client).
func StartKind(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	s := cur.Load()
	if s == nil {
		return ctx, noSpan
	}
	return s.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// SetAttributes adds attributes to ctx's span (nothing while off).
func SetAttributes(ctx context.Context, attrs ...attribute.KeyValue) {
	if cur.Load() == nil {
		return
	}
	trace.SpanFromContext(ctx).SetAttributes(attrs...)
}

// End ends span, first marking it failed when err is not nil: status
// Error with err's text, and error.type (the error's kind when it names
// one, else "_OTHER", as the semantic conventions say).
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		Fail(span, ErrorType(err), err.Error())
	}
	span.End()
}

// Fail marks span failed with error.type kind and a description.
func Fail(span trace.Span, kind, desc string) {
	if !span.IsRecording() {
		return
	}
	if kind == "" {
		kind = "_OTHER"
	}
	span.SetAttributes(attribute.String("error.type", kind))
	span.SetStatus(codes.Error, clip(desc, maxDesc))
}

// kinded is an error that names its kind (evidence.PeerError's Kind,
// agent.Error's): the span's error.type.
type kinded interface{ ErrorKind() string }

// ErrorType is err's error.type: its kind when it says one, else _OTHER.
func ErrorType(err error) string {
	if k, ok := err.(kinded); ok && k.ErrorKind() != "" {
		return k.ErrorKind()
	}
	return "_OTHER"
}

// maxDesc bounds a status description: an error's text may quote a
// node's or a job's words.
const maxDesc = 512

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary.
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// IDs are ctx's trace and span ids in hex ("" when ctx holds no span):
// what a log record names to be found in the trace.
func IDs(ctx context.Context) (traceID, spanID string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}

// Dropped is how many spans were lost since the last Setup: refused
// because the export queue was full (a collector down or slow), whose
// export failed, or still unsent when shutdown's time ran out. Zero when
// tracing was never on.
func Dropped() int64 {
	d := lastDrops.Load()
	if d == nil {
		return 0
	}
	return d.dropped.Load()
}

func logger() *slog.Logger {
	if s := cur.Load(); s != nil && s.logger != nil {
		return s.logger
	}
	return slog.New(slog.DiscardHandler)
}
