// Package logjson is the one log handler every component of probing-mcp
// logs through (serve, node, the GPU watcher, the CLI): slog's text lines by
// default, or JSON lines with PROBING_LOGGING_JSONL on (as NVIDIA Dynamo's
// DYN_LOGGING_JSONL), for a log pipeline to parse. Either way a record
// logged with a context that holds an OpenTelemetry span carries its
// trace_id and span_id, so logs and traces join.
package logjson

import (
	"context"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/probing-mcp/probing-mcp/internal/envswitch"
)

// Env is the switch: 1/true/on/yes for JSON lines.
const Env = "PROBING_LOGGING_JSONL"

// FromEnv reads Env; a value that is neither on nor off is an error that
// names it (a typo must not quietly mean text).
func FromEnv(getenv func(string) string) (bool, error) {
	return envswitch.Parse(Env, getenv(Env))
}

// New is the handler: JSON lines when jsonl, else text, on w.
func New(w io.Writer, opts *slog.HandlerOptions, jsonl bool) slog.Handler {
	if jsonl {
		return spanHandler{slog.NewJSONHandler(w, opts)}
	}
	return spanHandler{slog.NewTextHandler(w, opts)}
}

// NewFromEnv is New with the format Env asks for.
func NewFromEnv(getenv func(string) string, w io.Writer, opts *slog.HandlerOptions) (slog.Handler, error) {
	jsonl, err := FromEnv(getenv)
	if err != nil {
		return nil, err
	}
	return New(w, opts, jsonl), nil
}

// spanHandler adds the active span's ids. They land where the record's
// attributes do: inside a group opened with WithGroup (nothing here opens
// one, so they are top-level keys).
type spanHandler struct{ slog.Handler }

func (h spanHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		// A copy: the caller's record may be handed to other handlers.
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h spanHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return spanHandler{h.Handler.WithAttrs(as)}
}

func (h spanHandler) WithGroup(name string) slog.Handler {
	return spanHandler{h.Handler.WithGroup(name)}
}
