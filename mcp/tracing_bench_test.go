package mcp

import (
	"context"
	"encoding/json"
	"testing"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/probing-mcp/probing-mcp/internal/tracing"
)

// BenchmarkToolCallTracing is one tools/call through mcp-go's whole
// request path (parse, hooks, middlewares, a trivial tool): without the
// tracing hooks at all, with them and tracing off (the default), and
// with tracing on (spans batched to an exporter that drops them). The
// first two must not differ measurably (docs/BENCHMARKS.md).
func BenchmarkToolCallTracing(b *testing.B) {
	tool := mcplib.NewTool("echo", mcplib.WithDescription("echo"), mcplib.WithString("x"))
	echo := func(ctx context.Context, req mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
		return mcplib.NewToolResultText("ok"), nil
	}
	newServer := func(traced bool) *server.MCPServer {
		opts := []server.ServerOption{server.WithToolCapabilities(false), server.WithRecovery()}
		if traced {
			opts = append(opts, traceRequests())
		}
		s := server.NewMCPServer("bench", "0", opts...)
		s.AddTool(tool, echo)
		return s
	}
	msg := json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"x":"y"}}}`)
	ctx := WithCaller(context.Background(), "stdio:ppid=1")
	run := func(b *testing.B, s *server.MCPServer) {
		b.ReportAllocs()
		for b.Loop() {
			if res := s.HandleMessage(ctx, msg); res == nil {
				b.Fatal("no answer")
			}
		}
	}
	b.Run("no-hooks", func(b *testing.B) { run(b, newServer(false)) })
	b.Run("off", func(b *testing.B) {
		if tracing.Enabled() {
			b.Fatal("tracing is on")
		}
		run(b, newServer(true))
	})
	b.Run("on", func(b *testing.B) {
		stop := tracing.Use(tracetest.NewNoopExporter(), tracing.Options{}, false)
		defer stop(context.Background())
		run(b, newServer(true))
	})
}
