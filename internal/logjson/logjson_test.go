package logjson

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// spanCtx is a context holding a real SDK span (recorded in memory).
func spanCtx(t *testing.T) (context.Context, string, string) {
	t.Helper()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("logjson-test").Start(context.Background(), "op")
	t.Cleanup(func() { span.End() })
	sc := span.SpanContext()
	return ctx, sc.TraceID().String(), sc.SpanID().String()
}

func TestJSONLinesCarryTheActiveSpan(t *testing.T) {
	ctx, traceID, spanID := spanCtx(t)
	var buf bytes.Buffer
	logger := slog.New(New(&buf, nil, true)).With("component", "test")
	logger.InfoContext(ctx, "in a span", "n", 1)
	logger.Info("no context")
	logger.WarnContext(context.Background(), "context without a span")

	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	var recs []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line (%v): %q", err, l)
		}
		recs = append(recs, m)
	}
	if recs[0]["trace_id"] != traceID || recs[0]["span_id"] != spanID {
		t.Errorf("in a span: trace_id %v span_id %v, want %s %s", recs[0]["trace_id"], recs[0]["span_id"], traceID, spanID)
	}
	if recs[0]["msg"] != "in a span" || recs[0]["level"] != "INFO" || recs[0]["component"] != "test" || recs[0]["n"] != float64(1) {
		t.Errorf("record lost its fields: %v", recs[0])
	}
	for _, m := range recs[1:] {
		if _, ok := m["trace_id"]; ok {
			t.Errorf("trace_id without a span: %v", m)
		}
	}
}

// The text handler stays the default and gets the ids too.
func TestTextLinesCarryTheActiveSpan(t *testing.T) {
	ctx, traceID, spanID := spanCtx(t)
	var buf bytes.Buffer
	slog.New(New(&buf, nil, false)).InfoContext(ctx, "hello")
	line := buf.String()
	if strings.HasPrefix(line, "{") || !strings.Contains(line, `msg=hello`) ||
		!strings.Contains(line, "trace_id="+traceID) || !strings.Contains(line, "span_id="+spanID) {
		t.Errorf("text line %q: want msg=hello trace_id=%s span_id=%s", line, traceID, spanID)
	}
}

func TestFromEnv(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "off": false, "1": true, "TRUE": true, "yes": true} {
		got, err := FromEnv(func(string) string { return v })
		if err != nil || got != want {
			t.Errorf("%s=%q: %v %v, want %v", Env, v, got, err, want)
		}
	}
	_, err := FromEnv(func(string) string { return "json" })
	if err == nil || !strings.Contains(err.Error(), Env+`="json"`) || !strings.Contains(err.Error(), "1, true, on or yes") {
		t.Errorf("a typo: %v, want an error naming %s and the values", err, Env)
	}
	var buf bytes.Buffer
	h, err := NewFromEnv(func(string) string { return "on" }, &buf, &slog.HandlerOptions{Level: slog.LevelWarn})
	if err != nil {
		t.Fatal(err)
	}
	l := slog.New(h)
	l.Info("below the level")
	l.Warn("kept")
	if s := buf.String(); strings.Contains(s, "below") || !json.Valid([]byte(strings.TrimSpace(s))) {
		t.Errorf("NewFromEnv: level or format lost: %q", s)
	}
}
