package flightrecorder

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"github.com/probing-mcp/probing-mcp/internal/tracing"
)

// AnalyzeContext is Analyze that stops with ctx's error once ctx is done.
// It checks between groups and inside the matching loops, and waits for
// the work it started, so nothing runs on (or holds memory) after it
// returns. Past the memory ceiling (Limits.MaxMemory) it stops with a
// MemoryCeilingError. Traced, the analysis is a span with the number of
// dumps and the verdict.
func AnalyzeContext(ctx context.Context, dumps []*Dump, opt Options) (*Report, error) {
	if !tracing.Enabled() {
		return analyzeContext(ctx, dumps, opt)
	}
	ctx, span := tracing.Start(ctx, "flightrecorder.analyze", attribute.Int("probing.fr.dumps", len(dumps)))
	r, err := analyzeContext(ctx, dumps, opt)
	if r != nil {
		span.SetAttributes(attribute.String("probing.fr.verdict", r.Verdict))
	}
	tracing.End(span, err)
	return r, err
}
