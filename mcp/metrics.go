package mcp

// Request-level metrics: every MCP request mcp-go dispatches is measured
// from its before-hook to its success or error hook
// (probing_mcp_server_operation_duration_seconds), with the sessions and
// the requests in flight. The hooks are added to whatever hooks the server
// already has, so other instrumentation can sit beside them.

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// withMetrics is the server option that installs the hooks.
func withMetrics() server.ServerOption {
	return func(s *server.MCPServer) {
		h := s.GetHooks()
		if h == nil {
			h = &server.Hooks{}
			server.WithHooks(h)(s)
		}
		m := &opMeter{s: s, started: map[any]time.Time{}}
		h.AddBeforeAny(m.before)
		h.AddOnSuccess(m.success)
		h.AddOnError(m.failure)
		h.AddOnRegisterSession(func(context.Context, server.ClientSession) { metrics.SessionStarted() })
		h.AddOnUnregisterSession(func(context.Context, server.ClientSession) { metrics.SessionEnded() })
	}
}

// maxTracked bounds the requests whose start is remembered: a request
// whose end hook never runs (a panic outside a tool handler) must not
// grow the map for ever. Past it a request is measured as taking 0 s.
const maxTracked = 1 << 16

// opMeter pairs each request's before-hook with its end. mcp-go hands
// both the same message, a pointer to the decoded request, which is the
// key: request ids repeat across clients of a stateless HTTP server.
type opMeter struct {
	s       *server.MCPServer
	mu      sync.Mutex
	started map[any]time.Time
	known   sync.Map // tool names the server was found to have
}

// key is message when it is a pointer (comparable, and unique while the
// request runs), else nil: such a request is not tracked.
func key(message any) any {
	if message == nil || reflect.TypeOf(message).Kind() != reflect.Pointer {
		return nil
	}
	return message
}

func (m *opMeter) before(_ context.Context, _ any, _ mcplib.MCPMethod, message any) {
	k := key(message)
	if k == nil {
		return
	}
	m.mu.Lock()
	if len(m.started) < maxTracked {
		m.started[k] = time.Now()
		metrics.RequestStarted()
	}
	m.mu.Unlock()
}

// took is how long the request of message ran (0 when it was never
// started: mcp-go reports an unparsable request's error with no before-hook).
func (m *opMeter) took(message any) time.Duration {
	k := key(message)
	if k == nil {
		return 0
	}
	m.mu.Lock()
	start, ok := m.started[k]
	if ok {
		delete(m.started, k)
	}
	m.mu.Unlock()
	if !ok {
		return 0
	}
	metrics.RequestDone()
	return time.Since(start)
}

func (m *opMeter) success(ctx context.Context, _ any, method mcplib.MCPMethod, message, result any) {
	d := m.took(message)
	errType := ""
	if r, ok := result.(*mcplib.CallToolResult); ok && r != nil && r.IsError {
		errType = "tool_error"
	}
	metrics.ObserveOperation(string(method), m.tool(message), errType, transportOf(ctx), d)
}

func (m *opMeter) failure(ctx context.Context, _ any, method mcplib.MCPMethod, message any, err error) {
	d := m.took(message)
	metrics.ObserveOperation(string(method), m.tool(message), metrics.ErrorType(err), transportOf(ctx), d)
}

// tool is the gen_ai_tool_name label: a tools/call's tool when the server
// has it, "unknown" for any other name (a client could otherwise mint a
// label value per call), "" for other methods.
func (m *opMeter) tool(message any) string {
	req, ok := message.(*mcplib.CallToolRequest)
	if !ok || req == nil || req.Params.Name == "" {
		return ""
	}
	name := req.Params.Name
	if _, ok := m.known.Load(name); ok {
		return name
	}
	if m.s.GetTool(name) == nil { // GetTool copies the tool: asked once a name
		return "unknown"
	}
	m.known.Store(name, struct{}{}) // bounded by the tools the server has
	return name
}

// transportOf is the network_transport label, from the caller the transport
// recorded: "pipe" for stdio, "tcp" for HTTP, "" in process (tests).
func transportOf(ctx context.Context) string {
	c := CallerFrom(ctx)
	switch {
	case strings.HasPrefix(c, "stdio:"):
		return "pipe"
	case strings.HasPrefix(c, "http:"):
		return "tcp"
	}
	return ""
}
