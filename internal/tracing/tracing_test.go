package tracing_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/probing-mcp/probing-mcp/internal/tracing"
	"github.com/probing-mcp/probing-mcp/internal/tracing/otlptest"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestConfigFromEnv: off unless OTEL_EXPORT_ENABLED is true (the SDK's
// kill switch wins), grpc unless a protocol variable says otherwise (the
// traces one first), and every value that cannot be meant is refused
// naming its variable, a header's value (a token) never echoed.
func TestConfigFromEnv(t *testing.T) {
	c, err := tracing.ConfigFromEnv(env(nil))
	if err != nil || c.Enabled || c.Protocol != tracing.ProtocolGRPC || c.RecordArgs {
		t.Fatalf("unset: %+v %v", c, err)
	}
	c, err = tracing.ConfigFromEnv(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}))
	if err != nil || c.Enabled || c.Endpoint != "http://c:4317" {
		t.Fatalf("an endpoint alone does not switch it on: %+v %v", c, err)
	}
	c, err = tracing.ConfigFromEnv(env(map[string]string{"OTEL_EXPORT_ENABLED": "true", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "PROBING_MCP_TRACE_ARGS": "1",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://t:4318/v1/traces"}))
	if err != nil || !c.Enabled || c.Protocol != tracing.ProtocolHTTP || !c.RecordArgs || c.Endpoint != "https://t:4318/v1/traces" {
		t.Fatalf("on: %+v %v", c, err)
	}
	c, err = tracing.ConfigFromEnv(env(map[string]string{"OTEL_EXPORT_ENABLED": "true", "OTEL_SDK_DISABLED": "true"}))
	if err != nil || c.Enabled {
		t.Fatalf("OTEL_SDK_DISABLED: %+v %v", c, err)
	}
	for _, bad := range []struct{ k, v, want string }{
		{"OTEL_EXPORT_ENABLED", "maybe", "OTEL_EXPORT_ENABLED=\"maybe\""},
		{"PROBING_MCP_TRACE_ARGS", "2", "PROBING_MCP_TRACE_ARGS"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "udp", "want grpc or http/protobuf"},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json", "JSON is not supported"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317", "want the collector's URL"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://c/", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{"OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer s3cret,junk", "entry 2 is not key=value"},
	} {
		_, err := tracing.ConfigFromEnv(env(map[string]string{bad.k: bad.v}))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s=%s: %v, want %q", bad.k, bad.v, err, bad.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("a header's value is echoed: %v", err)
		}
	}
}

// TestOffIsFree: with tracing off nothing is recorded, Start hands back
// the caller's own context, and nothing is injected or extracted; an
// endpoint set without the gate is said once at start.
func TestOffIsFree(t *testing.T) {
	t.Setenv("OTEL_EXPORT_ENABLED", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	var logs bytes.Buffer
	stop, err := tracing.Setup(context.Background(), tracing.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer stop(context.Background())
	if tracing.Enabled() {
		t.Fatal("enabled without OTEL_EXPORT_ENABLED")
	}
	if !strings.Contains(logs.String(), "OTEL_EXPORT_ENABLED is not true") {
		t.Errorf("no word about the gate: %s", logs.String())
	}
	ctx := context.Background()
	got, span := tracing.Start(ctx, "x")
	if got != ctx || span.IsRecording() {
		t.Fatal("Start off made a span")
	}
	tracing.End(span, errors.New("boom"))
	h := http.Header{}
	tracing.InjectHTTP(ctx, h)
	h.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if len(h) != 1 || tracing.ExtractHTTP(ctx, h) != ctx {
		t.Fatal("propagation while off")
	}
	if a, b := tracing.IDs(ctx); a != "" || b != "" {
		t.Fatal("ids while off")
	}
}

// TestDefaultEndpoint: on without an endpoint, the exporter goes to the
// specification's plain-text localhost endpoint of its protocol (the Go
// exporters would try TLS), and says where at start.
func TestDefaultEndpoint(t *testing.T) {
	for proto, want := range map[string]string{"grpc": "endpoint=http://localhost:4317", "http/protobuf": "endpoint=http://localhost:4318/v1/traces"} {
		t.Setenv("OTEL_EXPORT_ENABLED", "true")
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
		var logs bytes.Buffer
		stop, err := tracing.Setup(context.Background(), tracing.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if !tracing.Enabled() || !strings.Contains(logs.String(), want) {
			t.Errorf("%s: %s", proto, logs.String())
		}
		stop(context.Background())
	}
}

// memory installs an in-memory exporter behind the same processor; stop
// flushes it.
func memory(t *testing.T) (*tracetest.InMemoryExporter, func()) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	stop := tracing.Use(keep{exp}, tracing.Options{Role: "test"}, false)
	t.Cleanup(func() { stop(context.Background()) })
	return exp, func() { stop(context.Background()) }
}

// keep is the in-memory exporter less its Shutdown, which forgets.
type keep struct{ *tracetest.InMemoryExporter }

func (keep) Shutdown(context.Context) error { return nil }

// TestPropagationIsStrict: the traceparent the coordinator sends is read
// back by the daemon as the parent; everything malformed is ignored
// (never an error), the tracestate bounded, and only the traceparent is
// ever sent.
func TestPropagationIsStrict(t *testing.T) {
	memory(t)
	ctx, span := tracing.Start(context.Background(), "client")
	defer span.End()
	h := http.Header{}
	tracing.InjectHTTP(ctx, h)
	if len(h) != 1 || len(h.Get("traceparent")) != 55 {
		t.Fatalf("injected %v", h)
	}
	in := tracing.ExtractHTTP(context.Background(), h)
	sc := trace.SpanContextFromContext(in)
	if !sc.IsRemote() || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("extracted %+v, want the client's span", sc)
	}
	good := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, bad := range []string{
		"", "garbage", "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01", // upper case
		"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", // another version
		"00-00000000000000000000000000000000-b7ad6b7169203331-01", // all-zero trace id
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", // all-zero span id
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333g-01",
		strings.Repeat("0", 1<<20),
	} {
		h := http.Header{"Traceparent": {bad}}
		if got := tracing.ExtractHTTP(context.Background(), h); trace.SpanContextFromContext(got).IsValid() {
			t.Errorf("%.60q was taken as a parent", bad)
		}
		if got := tracing.ExtractMeta(context.Background(), map[string]any{"traceparent": bad}); trace.SpanContextFromContext(got).IsValid() {
			t.Errorf("_meta %.60q was taken as a parent", bad)
		}
	}
	if got := tracing.ExtractHTTP(context.Background(), http.Header{"Traceparent": {good, good}}); trace.SpanContextFromContext(got).IsValid() {
		t.Error("a twice-sent traceparent was taken")
	}
	if got := tracing.ExtractMeta(context.Background(), map[string]any{"traceparent": 42.0}); trace.SpanContextFromContext(got).IsValid() {
		t.Error("a number was taken")
	}
	got := trace.SpanContextFromContext(tracing.ExtractMeta(context.Background(), map[string]any{"traceparent": good, "tracestate": "vendor=x"}))
	if got.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || got.TraceState().Get("vendor") != "x" {
		t.Errorf("_meta: %+v", got)
	}
	got = trace.SpanContextFromContext(tracing.ExtractMeta(context.Background(), map[string]any{"traceparent": good, "tracestate": "v=" + strings.Repeat("x", 600)}))
	if !got.IsValid() || got.TraceState().Len() != 0 {
		t.Errorf("an oversized tracestate was kept, or cost the parent: %+v", got)
	}
	// A client's tracestate stays here: the daemons get the parent only.
	h = http.Header{}
	tracing.InjectHTTP(trace.ContextWithSpanContext(context.Background(), got.WithTraceState(must(trace.ParseTraceState("v=secret")))), h)
	if h.Get("tracestate") != "" || h.Get("traceparent") == "" {
		t.Errorf("injected %v", h)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestEndAndIDs: a failed span has status Error, error.type and the
// error's text (clipped); IDs name the span a log line belongs to.
func TestEndAndIDs(t *testing.T) {
	exp, flush := memory(t)
	ctx, span := tracing.Start(context.Background(), "work")
	tid, sid := tracing.IDs(ctx)
	if tid != span.SpanContext().TraceID().String() || sid != span.SpanContext().SpanID().String() || len(tid) != 32 || len(sid) != 16 {
		t.Fatalf("IDs %s %s", tid, sid)
	}
	_, child := tracing.StartKind(ctx, "child", trace.SpanKindClient)
	tracing.End(child, errors.New(strings.Repeat("é", 1000)))
	tracing.End(span, nil)
	flush()
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	c, p := spans[0], spans[1]
	if c.Name != "child" || c.Parent.SpanID() != p.SpanContext.SpanID() || c.SpanKind != trace.SpanKindClient {
		t.Fatalf("child %+v", c)
	}
	if c.Status.Code.String() != "Error" || len(c.Status.Description) > 520 || !strings.HasSuffix(c.Status.Description, "é…") {
		t.Errorf("status %+v", c.Status)
	}
	if p.Status.Code.String() != "Unset" {
		t.Errorf("a span that did not fail: %+v", p.Status)
	}
}

// TestExportBothProtocols: spans reach a real OTLP receiver over gRPC and
// over http/protobuf, with the resource's service name and a child's
// parent link.
func TestExportBothProtocols(t *testing.T) {
	r := otlptest.Start(t)
	for _, proto := range []string{"grpc", "http/protobuf"} {
		r.Env(t, proto)
		t.Setenv("OTEL_SERVICE_NAME", "")
		stop, err := tracing.Setup(context.Background(), tracing.Options{Version: "v-test", Role: "server"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, parent := tracing.Start(context.Background(), "parent "+proto)
		_, child := tracing.Start(ctx, "child "+proto)
		tracing.End(child, errors.New("child failed"))
		parent.End()
		if err := stop(context.Background()); err != nil { // flushes
			t.Fatalf("%s: shutdown: %v", proto, err)
		}
		if tracing.Enabled() {
			t.Fatal("still on after shutdown")
		}
		spans := r.Spans()
		p, c := otlptest.Named(spans, "parent "+proto), otlptest.Named(spans, "child "+proto)
		if p == nil || c == nil {
			t.Fatalf("%s: received %s", proto, otlptest.Names(spans))
		}
		want := map[string]string{"grpc": "grpc", "http/protobuf": "http"}[proto]
		if p.Via != want || c.ParentID != p.SpanID || c.TraceID != p.TraceID || p.ParentID != "" {
			t.Errorf("%s: parent %+v child %+v", proto, p, c)
		}
		if !c.Error || c.Attrs["error.type"] != "_OTHER" || c.StatusMsg != "child failed" {
			t.Errorf("%s: the failed child: %+v", proto, c)
		}
		if p.Resource["service.name"] != "probing-mcp" || p.Resource["service.version"] != "v-test" || p.Resource["probing.role"] != "server" {
			t.Errorf("%s: resource %v", proto, p.Resource)
		}
	}
	// OTEL_SERVICE_NAME names the service.
	r.Env(t, "grpc")
	t.Setenv("OTEL_SERVICE_NAME", "trainer-debug")
	stop, err := tracing.Setup(context.Background(), tracing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, s := tracing.Start(context.Background(), "named")
	s.End()
	stop(context.Background())
	if n := otlptest.Named(r.Spans(), "named"); n == nil || n.Resource["service.name"] != "trainer-debug" {
		t.Errorf("OTEL_SERVICE_NAME: %+v", n)
	}
}

// TestStuckCollectorNeverBlocks: a collector that accepts and never
// answers costs a span nothing: Start and End return (were they to wait,
// this test would hang, not pass), the spans past the queue are dropped,
// counted and logged, and every span is either received or counted, none
// twice. Shutdown gives up when its context does.
func TestStuckCollectorNeverBlocks(t *testing.T) {
	r := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", r.GRPCEndpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "600000") // no export gives up while held: the count stays exact
	install := func(logs *bytes.Buffer) func(context.Context) error {
		exp, err := otlptracegrpc.New(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return tracing.Use(exp, tracing.Options{QueueSize: 8, BatchTimeout: time.Millisecond, ExportTimeout: 10 * time.Minute,
			Logger: slog.New(slog.NewTextHandler(logs, nil))}, false)
	}
	r.Hold()
	var logs bytes.Buffer
	stop := install(&logs)
	const n = 200
	for i := 0; i < n; i++ {
		_, s := tracing.Start(context.Background(), "span")
		s.End()
	}
	if tracing.Dropped() < n-8 {
		t.Fatalf("dropped %d of %d with a queue of 8 and the collector stuck", tracing.Dropped(), n)
	}
	if !strings.Contains(logs.String(), "trace spans dropped") {
		t.Errorf("the drops were not logged: %s", logs.String())
	}
	r.Release()
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, s := range r.Spans() {
		if s.Name == "span" {
			got++
		}
	}
	if got+int(tracing.Dropped()) != n || got == 0 {
		t.Errorf("received %d + dropped %d != %d", got, tracing.Dropped(), n)
	}

	// Shutdown with the collector stuck returns when its context ends,
	// and counts what it could not send.
	r.Hold()
	logs.Reset()
	stop = install(&logs)
	_, s := tracing.Start(context.Background(), "unsent")
	s.End()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := stop(ctx); err == nil {
		t.Error("shutdown with a stuck collector and no time left reported no error")
	}
	if tracing.Dropped() != 1 || !strings.Contains(logs.String(), "dropped_total=1") {
		t.Errorf("dropped %d; log %s", tracing.Dropped(), logs.String())
	}
	r.Release()
}

// BenchmarkStart is one span started and ended, tracing off (what every
// traced call site pays by default) and on (batched to an exporter that
// drops them).
func BenchmarkStart(b *testing.B) {
	ctx := context.Background()
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, s := tracing.Start(ctx, "x")
			tracing.End(s, nil)
		}
	})
	b.Run("on", func(b *testing.B) {
		stop := tracing.Use(tracetest.NewNoopExporter(), tracing.Options{}, false)
		defer stop(context.Background())
		b.ReportAllocs()
		for b.Loop() {
			_, s := tracing.Start(ctx, "x")
			tracing.End(s, nil)
		}
	})
}
