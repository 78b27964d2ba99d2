package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Trace context crosses two borders: an MCP client's request (its
// params._meta.traceparent, by the MCP conventions) and the coordinator's
// call to a node daemon (a traceparent HTTP header, W3C Trace Context).
// Both are untrusted text: only a version-00 traceparent of exactly its
// 55 characters is read (the library then checks every digit and refuses
// all-zero ids), a tracestate over 512 bytes is dropped, and anything
// malformed is ignored with a debug line, never an error. The node
// daemons are sent the traceparent alone: a client's tracestate is its
// vendors' and stays on the coordinator.

// Header names and _meta keys.
const (
	TraceparentKey = "traceparent"
	TracestateKey  = "tracestate"
)

const (
	traceparentLen = 55  // "00-" 32 hex "-" 16 hex "-" 2 hex
	maxTracestate  = 512 // W3C: vendors propagate at least 512; more is refused here
)

var w3c = propagation.TraceContext{}

// parentOnly is a carrier that takes the traceparent alone.
type parentOnly struct{ tp string }

func (c *parentOnly) Get(string) string { return "" }
func (c *parentOnly) Set(k, v string) {
	if k == TraceparentKey {
		c.tp = v
	}
}
func (c *parentOnly) Keys() []string { return nil }

// Traceparent is ctx's span as a traceparent value ("" without one).
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	var c parentOnly
	w3c.Inject(ctx, &c)
	return c.tp
}

// InjectHTTP sets the traceparent header of a request to a node daemon
// when ctx holds a span (nothing while tracing is off). The daemon's
// signature does not cover it, and it carries nothing secret: ids only.
func InjectHTTP(ctx context.Context, h http.Header) {
	if cur.Load() == nil {
		return
	}
	if tp := Traceparent(ctx); tp != "" {
		h.Set(TraceparentKey, tp)
	}
}

// ExtractHTTP is ctx with the remote parent a request's traceparent
// header names; ctx itself when it names none, names it twice, or is
// malformed. The tracestate header is not read (the coordinator sends
// none).
func ExtractHTTP(ctx context.Context, h http.Header) context.Context {
	if cur.Load() == nil {
		return ctx
	}
	vs := h.Values(TraceparentKey)
	switch len(vs) {
	case 0:
		return ctx
	case 1:
		return remoteParent(ctx, vs[0], "", "HTTP header")
	}
	logger().Debug("traceparent header ignored: sent more than once", "count", len(vs))
	return ctx
}

// ExtractMeta is ctx with the remote parent an MCP request's _meta names
// (its traceparent and tracestate fields); ctx itself when they are
// absent, not strings, or malformed.
func ExtractMeta(ctx context.Context, meta map[string]any) context.Context {
	if cur.Load() == nil || meta == nil {
		return ctx
	}
	raw, ok := meta[TraceparentKey]
	if !ok {
		return ctx
	}
	tp, ok := raw.(string)
	if !ok {
		logger().Debug("_meta.traceparent ignored: not a string", "type", typeName(raw))
		return ctx
	}
	ts, _ := meta[TracestateKey].(string)
	return remoteParent(ctx, tp, ts, "_meta")
}

// remoteParent checks tp (and ts) strictly and returns ctx with the
// remote span context they name, or ctx when they name none.
func remoteParent(ctx context.Context, tp, ts, from string) context.Context {
	if len(tp) != traceparentLen || tp[:3] != "00-" {
		logger().Debug("malformed traceparent ignored: want 00-<32 hex>-<16 hex>-<2 hex>", "from", from, "value", quoteClip(tp))
		return ctx
	}
	if len(ts) > maxTracestate {
		logger().Debug("tracestate ignored: over 512 bytes", "from", from, "bytes", len(ts))
		ts = ""
	}
	if ts != "" {
		if _, err := trace.ParseTraceState(ts); err != nil {
			logger().Debug("malformed tracestate ignored", "from", from, "err", clip(err.Error(), 200))
			ts = ""
		}
	}
	carrier := propagation.MapCarrier{TraceparentKey: tp}
	if ts != "" {
		carrier[TracestateKey] = ts
	}
	out := w3c.Extract(ctx, carrier)
	if out == ctx { // the library returns ctx itself for what it refuses
		logger().Debug("malformed traceparent ignored: bad digits, flags or an all-zero id", "from", from, "value", quoteClip(tp))
		return ctx
	}
	return out
}

// quoteClip is untrusted text fit for a log line: short, quoted.
func quoteClip(s string) string {
	return clip(s, 80)
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return "other"
}
