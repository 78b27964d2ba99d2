package tracing

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// A span must never wait for its export: the batch processor queues
// ended spans (bounded) and exports them from its own goroutine. It drops
// what does not fit without a word, so the spans are counted here: every
// span handed to it is pending until its batch's export returns, and one
// that would take the pending count past the queue's size is dropped
// here, counted, before the processor sees it. The processor's queue then
// never fills (it holds at most the pending spans), so the count is every
// loss: refused spans, failed exports, and spans still pending at
// shutdown.

// dropCounter counts the spans in flight and the spans lost.
type dropCounter struct {
	max     int64
	pending atomic.Int64
	dropped atomic.Int64
	closed  atomic.Bool // after shutdown: a late export's spans were counted already
	logger  *slog.Logger

	mu      sync.Mutex
	lastLog time.Time
	logged  int64 // dropped when last logged
}

// logEvery bounds the warnings about lost spans: a collector that stays
// down would otherwise log once a batch.
const logEvery = 30 * time.Second

// lost counts n lost spans and says so, at most once every logEvery.
func (d *dropCounter) lost(n int, why string, err error) {
	total := d.dropped.Add(int64(n))
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.lastLog.IsZero() && time.Since(d.lastLog) < logEvery {
		return
	}
	d.lastLog = time.Now()
	args := []any{"why", why, "dropped_since_last_warning", total - d.logged, "dropped_total", total}
	if err != nil {
		args = append(args, "err", clip(err.Error(), maxDesc))
	}
	d.logged = total
	d.logger.Warn("trace spans dropped (the answers are not delayed; check the OTLP collector)", args...)
}

// countingProcessor admits a span into the batch processor only while
// fewer than max are pending.
type countingProcessor struct {
	sdktrace.SpanProcessor
	d *dropCounter
}

func (p *countingProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return // the batch processor drops these itself, uncounted by design
	}
	if p.d.pending.Add(1) > p.d.max {
		p.d.pending.Add(-1)
		p.d.lost(1, "the export queue is full: the collector is down or slower than the spans come", nil)
		return
	}
	p.SpanProcessor.OnEnd(s)
}

// Shutdown flushes what it can within ctx; spans still pending then are
// lost, and counted.
func (p *countingProcessor) Shutdown(ctx context.Context) error {
	err := p.SpanProcessor.Shutdown(ctx)
	p.d.close(err)
	return err
}

// close counts the spans still pending as lost, once: called when the
// processor is shut down, and after the provider's shutdown (which skips
// the processor when its context has already ended).
func (d *dropCounter) close(err error) {
	if !d.closed.CompareAndSwap(false, true) {
		return
	}
	if n := d.pending.Swap(0); n > 0 {
		d.lost(int(n), "not exported before shutdown", err)
	}
}

// countingExporter ends the pending state of each batch it exports, and
// counts a failed batch's spans as lost.
type countingExporter struct {
	sdktrace.SpanExporter
	d *dropCounter
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if e.d.closed.Load() {
		return err
	}
	e.d.pending.Add(-int64(len(spans)))
	if err != nil {
		e.d.lost(len(spans), "the export failed", err)
	}
	return err
}
