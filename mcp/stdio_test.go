package mcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/tools"
)

// TestStdioAnswersEverythingBeforeEOF: piped one-shot use (requests, then
// EOF) must get every answer; mcp-go alone drops queued tool calls now and
// then when stdin closes.
func TestStdioAnswersEverythingBeforeEOF(t *testing.T) {
	slow := mcplib.NewTool("slow", mcplib.WithDescription("sleeps"), mcplib.WithString("x"))
	hints := func(t *mcplib.Tool) {
		yes, no := true, false
		t.Annotations.ReadOnlyHint, t.Annotations.DestructiveHint, t.Annotations.IdempotentHint, t.Annotations.OpenWorldHint = &yes, &no, &yes, &no
	}
	hints(&slow)
	sleep := func(ctx context.Context, req mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
		time.Sleep(30 * time.Millisecond)
		return mcplib.NewToolResultText("done"), nil
	}
	s, _ := testServer(t, false, "", tools.Def{ServerTool: server.ServerTool{Tool: slow, Handler: sleep}})
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	lines := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"analyze_flight_recorder","arguments":{"paths":[]}}}`,
		`{"jsonrpc":"2.0","id":"three","method":"tools/list"}`,
	}
	ids := []string{`"id":1`, `"id":2`, `"id":"three"`}
	for i := 10; i < 22; i++ { // more slow calls than mcp-go has workers: some wait in its queue
		lines = append(lines, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow","arguments":{}}}`, i))
		ids = append(ids, fmt.Sprintf(`"id":%d`, i))
	}
	input := strings.Join(lines, "\n") + "\n"
	for i := 0; i < 5; i++ {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := serveStdio(ctx, s, logger, strings.NewReader(input), &out, 10*time.Second)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		got := out.String()
		for _, id := range ids {
			if !strings.Contains(got, id) {
				t.Fatalf("run %d: no answer for %s:\n%s", i, id, got)
			}
		}
	}
}
