package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
	"github.com/probing-mcp/probing-mcp/internal/tracing"
)

// traceFlushTime bounds the flush at exit: a collector that is down must
// not hold the process.
const traceFlushTime = 5 * time.Second

// startTracing starts OpenTelemetry tracing when OTEL_EXPORT_ENABLED says
// so (internal/tracing); the returned stop flushes within traceFlushTime.
func startTracing(role string, logger *slog.Logger) (stop func(), err error) {
	shutdown, err := tracing.Setup(context.Background(), tracing.Options{Version: versionString(), Role: role, Logger: logger})
	if err != nil {
		return func() {}, err
	}
	if tracing.Enabled() {
		metrics.TraceDrops(tracing.Dropped) // probing_mcp_trace_spans_dropped_total
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), traceFlushTime)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			logger.Warn("traces not all flushed at exit", "err", err)
		}
	}, nil
}
