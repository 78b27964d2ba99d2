package sqlengine

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/probing-mcp/probing-mcp/internal/tracing"
)

// Query runs one read-only statement and returns at most limit rows
// (clamped to 1..MaxLimit), with the total row count. Traced, it is a
// CLIENT span by the database conventions (db.system.name sqlite, the
// statement's first keyword as db.operation.name); the statement's text
// only with PROBING_MCP_TRACE_ARGS, as it is the caller's argument.
func (e *Engine) Query(ctx context.Context, sqlText string, limit int) (*Result, error) {
	if !tracing.Enabled() {
		return e.query(ctx, sqlText, limit)
	}
	ctx, span := startQuery(ctx, sqlText)
	r, err := e.query(ctx, sqlText, limit)
	if r != nil {
		span.SetAttributes(attribute.Int("db.response.returned_rows", r.RowCount))
	}
	endQuery(span, err)
	return r, err
}

// QueryRows runs one read-only statement like Query (same guard, memory
// cap, timeout and query slots) but returns up to maxRows rows (clamped to
// 1..MaxScanRows) as plain values, for a caller that computes over them
// (the cluster's federated query). Truncated says rows were left out.
// Traced like Query.
func (e *Engine) QueryRows(ctx context.Context, sqlText string, maxRows int) (*Rows, error) {
	if !tracing.Enabled() {
		return e.queryRows(ctx, sqlText, maxRows)
	}
	ctx, span := startQuery(ctx, sqlText)
	r, err := e.queryRows(ctx, sqlText, maxRows)
	if r != nil {
		span.SetAttributes(attribute.Int("db.response.returned_rows", len(r.Rows)))
	}
	endQuery(span, err)
	return r, err
}

func startQuery(ctx context.Context, sqlText string) (context.Context, trace.Span) {
	op := operation(sqlText)
	attrs := []attribute.KeyValue{attribute.String("db.system.name", "sqlite"), attribute.String("db.operation.name", op)}
	if tracing.RecordArgs() {
		q := sqlText
		if len(q) > 4096 {
			q = q[:4096]
		}
		attrs = append(attrs, attribute.String("db.query.text", q))
	}
	return tracing.StartKind(ctx, op, trace.SpanKindClient, attrs...)
}

// endQuery ends a query's span; a refused or failed query's error.type
// is its kind (sql, timeout, memory, ...).
func endQuery(span trace.Span, err error) {
	if err != nil {
		kind := "_OTHER"
		if qe, ok := err.(*Error); ok {
			kind = qe.Kind
		}
		desc := kind // an error may quote the statement: the text only when arguments may be recorded
		if tracing.RecordArgs() {
			desc = err.Error()
		}
		tracing.Fail(span, kind, desc)
	}
	span.End()
}

// operation is the statement's first keyword, upper case, when it is one
// a read-only statement starts with; "sqlite" otherwise (the span's name
// stays one of a few).
func operation(sqlText string) string {
	s := strings.TrimLeft(sqlText, " \t\r\n(")
	end := strings.IndexFunc(s, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') })
	if end < 0 {
		end = len(s)
	}
	switch w := strings.ToUpper(s[:end]); w {
	case "SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA":
		return w
	}
	return "sqlite"
}
