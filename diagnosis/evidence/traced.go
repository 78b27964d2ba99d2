package evidence

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/tracing"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// Traced is s with a span around each of its calls ("evidence.stacks",
// ...: the evidence sources of a tool call, each a child of the MCP
// request's span), naming the scope (node or job) and, for the whole
// job, how many nodes answered. While tracing is off it is s itself.
func Traced(s Scope) Scope {
	if !tracing.Enabled() || s == nil {
		return s
	}
	kind := "job"
	if _, ok := s.(*Node); ok {
		kind = "node"
	}
	return &tracedScope{s: s, kind: attribute.String("probing.scope", kind)}
}

type tracedScope struct {
	s    Scope
	kind attribute.KeyValue
}

func (t *tracedScope) start(ctx context.Context, name string) (context.Context, trace.Span) {
	return tracing.Start(ctx, name, t.kind)
}

// end ends span with the coverage of a whole-job answer.
func end(span trace.Span, cov *Coverage, err error) {
	if cov != nil && cov.Asked > 0 {
		span.SetAttributes(attribute.Int("probing.nodes.asked", cov.Asked), attribute.Int("probing.nodes.answered", cov.Answered))
	}
	tracing.End(span, err)
}

func (t *tracedScope) Stacks(ctx context.Context, sel Selection) (*StacksAnswer, error) {
	ctx, span := t.start(ctx, "evidence.stacks")
	a, err := t.s.Stacks(ctx, sel)
	var cov *Coverage
	if a != nil {
		cov = a.Coverage
		span.SetAttributes(attribute.Int("probing.processes", len(a.Processes)))
	}
	end(span, cov, err)
	return a, err
}

func (t *tracedScope) FlightRecorder(ctx context.Context, sel Selection, onlyActive bool) (*FRAnswer, error) {
	ctx, span := t.start(ctx, "evidence.flight_recorder")
	a, err := t.s.FlightRecorder(ctx, sel, onlyActive)
	var cov *Coverage
	if a != nil {
		cov = a.Coverage
		span.SetAttributes(attribute.Int("probing.fr.dumps", len(a.Dumps)))
	}
	end(span, cov, err)
	return a, err
}

// Pulse is not traced: the watcher reads one every second, and a trace
// per tick would bury the ones that matter (its captures are traced).
func (t *tracedScope) Pulse(ctx context.Context) (*Bundle, *Coverage, error) {
	return t.s.Pulse(ctx)
}

func (t *tracedScope) Evidence(ctx context.Context, commPerRank int) (*Bundle, *Coverage, error) {
	ctx, span := t.start(ctx, "evidence.bundle")
	b, cov, err := t.s.Evidence(ctx, commPerRank)
	if b != nil {
		span.SetAttributes(attribute.Int("probing.ranks", len(b.Ranks)), attribute.Int("probing.problems", len(b.Problems)))
	}
	end(span, cov, err)
	return b, cov, err
}

func (t *tracedScope) Samples(ctx context.Context, n int, gap time.Duration) map[int][]*stacks.Thread {
	ctx, span := t.start(ctx, "evidence.samples")
	defer span.End()
	return t.s.Samples(ctx, n, gap)
}

func (t *tracedScope) GPU(ctx context.Context) ([]gpu.Report, *Coverage, error) {
	ctx, span := t.start(ctx, "evidence.gpu")
	r, cov, err := t.s.GPU(ctx)
	end(span, cov, err)
	return r, cov, err
}

func (t *tracedScope) Query(ctx context.Context, sql string, limit int) (*sqlengine.Result, error) {
	ctx, span := t.start(ctx, "evidence.query")
	r, err := t.s.Query(ctx, sql, limit)
	end(span, nil, err)
	return r, err
}

func (t *tracedScope) Peers(ctx context.Context) (int, error) {
	ctx, span := t.start(ctx, "evidence.peers")
	n, err := t.s.Peers(ctx)
	end(span, nil, err)
	return n, err
}
