package mcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/internal/tracing"
	"github.com/probing-mcp/probing-mcp/internal/tracing/otlptest"
)

// traceJob is a whole job of two real node daemons (each on its own
// loopback address, signed with a token, over an empty node of its own)
// and an MCP server whose scope is that job.
type traceJob struct {
	ports map[int]string // daemon port → its host name
}

func startTraceJob(t *testing.T) (*traceJob, Config) {
	t.Helper()
	const tok = "trace-token"
	tj := &traceJob{ports: map[int]string{}}
	var nodes []cluster.Node
	for i, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		ln, err := net.Listen("tcp", ip+":0")
		if err != nil {
			t.Skipf("cannot listen on %s (a loopback alias this system lacks?): %v", ip, err)
		}
		src := &node.Local{Agents: agent.Options{DataDir: t.TempDir(), CtrlRoot: t.TempDir()}, Version: "test"}
		src.Self = cluster.Node{Host: fmt.Sprintf("node%d", i), Addr: ln.Addr().String(), NodeRank: i, Kind: cluster.KindDaemon, Source: "peers"}
		srv := &http.Server{Handler: node.Handler(node.Config{Source: src, Token: tok, Version: "test"})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		nodes = append(nodes, src.Self)
		tj.ports[ln.Addr().(*net.TCPAddr).Port] = src.Self.Host
	}
	members := func(context.Context) ([]cluster.Node, []string, error) {
		return append([]cluster.Node(nil), nodes...), nil, nil
	}
	job := fanout.NewJob(members, fanout.NewClient(tok, 8), fanout.Options{Concurrency: 8, PeerTimeout: 30 * time.Second, Deadline: 60 * time.Second})
	env := map[string]string{"PROBING_DATA_DIR": filepath.Join(t.TempDir(), "data"), "PROBING_MCP_HISTORY": "off"}
	logger := slog.New(slog.DiscardHandler)
	cfg, err := ConfigFromEnv(func(k string) string { return env[k] }, "test", new(slog.LevelVar), logger)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Env.Cluster = job
	return tj, cfg
}

// stdioCalls serves lines over the real stdio transport and returns the
// answers, within a deadline: an answer held up by the trace export would
// be missing, not late.
func stdioCalls(t *testing.T, cfg Config, lines ...string) string {
	t.Helper()
	s, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := serveStdio(ctx, s, slog.New(slog.DiscardHandler), strings.NewReader(strings.Join(lines, "\n")+"\n"), &out, time.Minute); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

const (
	clientTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan   = "00f067aa0ba902b7"
	initialize   = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`
	initialized  = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	stacksCall   = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_stacks","arguments":{},"_meta":{"traceparent":"00-` + clientTrace + `-` + clientSpan + `-01","tracestate":"client=1"}}}`
	badParent    = `{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"list_cluster_nodes","arguments":{},"_meta":{"traceparent":"00-zzzz-yyyy-01"}}}`
	toolError    = `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"list_cluster_nodes","arguments":{"status":"no_such_status"}}}`
	unknownTool  = `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`
	argsTraceKey = "gen_ai.tool.call.arguments"
)

// TestTraceWholeJobCall: one whole-job get_stacks through the MCP server
// (real stdio transport) and two real node daemons is one trace at a real
// OTLP receiver, over each protocol: the MCP request's SERVER span, named
// and attributed by the MCP conventions, is the child of the client's
// _meta.traceparent; the evidence span, the coordinator's call to each
// daemon (CLIENT) and each daemon's handling (SERVER, a child of that
// call through the traceparent header the signed request carries) hang
// under it. A malformed traceparent is ignored, an isError answer is
// tool_error, an unknown tool its JSON-RPC code, and no argument is
// recorded.
func TestTraceWholeJobCall(t *testing.T) {
	r := otlptest.Start(t)
	for _, proto := range []string{tracing.ProtocolGRPC, tracing.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(proto, "/", "_"), func(t *testing.T) {
			tj, cfg := startTraceJob(t)
			r.Env(t, proto)
			stop, err := tracing.Setup(context.Background(), tracing.Options{Role: "server"})
			if err != nil {
				t.Fatal(err)
			}
			out := stdioCalls(t, cfg, initialize, initialized, stacksCall, badParent, toolError, unknownTool)
			if err := stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{`"id":2`, `"id":"three"`, `"id":4`, `"id":5`} {
				if !strings.Contains(out, id) {
					t.Fatalf("no answer for %s:\n%s", id, out)
				}
			}
			via := map[string]string{tracing.ProtocolGRPC: "grpc", tracing.ProtocolHTTP: "http"}[proto]
			var spans []otlptest.Span // this protocol's: the client's trace id is the same in both
			for _, s := range otlptest.Of(r.Spans(), clientTrace) {
				if s.Via == via {
					spans = append(spans, s)
				}
			}
			req := checkRequestSpan(t, spans, "tools/call get_stacks", "2", via)
			if req.ParentID != clientSpan {
				t.Errorf("the request's parent is %q, want the client's %s", req.ParentID, clientSpan)
			}
			byID := map[string]otlptest.Span{}
			for _, s := range spans {
				byID[s.SpanID] = s
			}
			under := func(s otlptest.Span, anc string) bool { // is anc an ancestor of s?
				for p := s.ParentID; p != ""; p = byID[p].ParentID {
					if p == anc {
						return true
					}
				}
				return false
			}
			ev := otlptest.Named(spans, "evidence.stacks")
			if ev == nil || ev.ParentID != req.SpanID || ev.Attrs["probing.scope"] != "job" || ev.Attrs["probing.nodes.answered"] != "2" {
				t.Fatalf("evidence span %+v under %s; spans %s", ev, req.SpanID, otlptest.Names(spans))
			}
			daemons := map[string]bool{}
			for _, s := range spans {
				if s.Name != "POST /v1/stacks" || s.Kind != tracepb.Span_SPAN_KIND_SERVER {
					continue
				}
				call, ok := byID[s.ParentID]
				if !ok || call.Kind != tracepb.Span_SPAN_KIND_CLIENT || call.Name != "POST /v1/stacks" || !under(call, ev.SpanID) {
					t.Errorf("a daemon's span %+v is not the child of the coordinator's call under the evidence span (its parent %+v)", s, call)
					continue
				}
				port, _ := strconv.Atoi(s.Attrs["server.port"])
				host := tj.ports[port]
				if host == "" || call.Attrs["server.port"] != s.Attrs["server.port"] || call.Attrs["probing.node.host"] != host || s.Attrs["http.response.status_code"] != "200" {
					t.Errorf("daemon span %v, call %v: the call and the daemon disagree", s.Attrs, call.Attrs)
				}
				daemons[host] = true
			}
			if len(daemons) != 2 {
				t.Fatalf("spans from daemons %v, want both; spans %s", daemons, otlptest.Names(spans))
			}

			all := r.Spans()
			bad := checkRequestSpan(t, all, "tools/call list_cluster_nodes", "three", via)
			if bad.ParentID != "" || bad.TraceID == clientTrace || bad.Error {
				t.Errorf("a malformed traceparent: %+v", bad)
			}
			te := checkRequestSpan(t, all, "tools/call list_cluster_nodes", "4", via)
			if !te.Error || te.Attrs["error.type"] != "tool_error" || strings.Contains(te.StatusMsg, "no_such_status") {
				t.Errorf("an isError answer: %+v", te)
			}
			un := checkRequestSpan(t, all, "tools/call no_such_tool", "5", via)
			if !un.Error || un.Attrs["error.type"] != "-32602" || un.Attrs["rpc.response.status_code"] != "-32602" {
				t.Errorf("an unknown tool: %+v", un)
			}
			if in := findRequest(all, "initialize", "1", via); in == nil || in.Attrs["mcp.protocol.version"] != "2025-06-18" {
				t.Errorf("initialize: %+v", in)
			}
		})
	}
}

// findRequest is the request span of method name with JSON-RPC id, sent
// over via.
func findRequest(spans []otlptest.Span, name, id, via string) *otlptest.Span {
	for i, s := range spans {
		if s.Name == name && s.Attrs["jsonrpc.request.id"] == id && s.Via == via {
			return &spans[i]
		}
	}
	return nil
}

// checkRequestSpan finds a tools/call span and checks the conventions'
// attributes of a stdio request.
func checkRequestSpan(t *testing.T, spans []otlptest.Span, name, id, via string) otlptest.Span {
	t.Helper()
	s := findRequest(spans, name, id, via)
	if s == nil {
		t.Fatalf("no span %q with jsonrpc.request.id %s; spans %s", name, id, otlptest.Names(spans))
	}
	tool := strings.TrimPrefix(name, "tools/call ")
	want := map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": tool, "gen_ai.operation.name": "execute_tool",
		"network.transport": "pipe", "mcp.protocol.version": "2025-06-18", "mcp.session.id": "stdio"}
	for k, v := range want {
		if s.Attrs[k] != v {
			t.Errorf("%s: %s=%q, want %q", name, k, s.Attrs[k], v)
		}
	}
	if s.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("%s: kind %v", name, s.Kind)
	}
	if _, ok := s.Attrs[argsTraceKey]; ok {
		t.Errorf("%s: arguments recorded without PROBING_MCP_TRACE_ARGS", name)
	}
	return *s
}

// TestTraceStuckCollectorDoesNotDelay: a collector that accepts and never
// answers does not hold up a whole-job call: every answer comes within the
// call's deadline (stdioCalls), the spans that do not fit are counted, and
// shutdown is bounded by its context.
func TestTraceStuckCollectorDoesNotDelay(t *testing.T) {
	r := otlptest.Start(t)
	r.Hold()
	_, cfg := startTraceJob(t)
	r.Env(t, tracing.ProtocolGRPC)
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "2")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "1")
	stop, err := tracing.Setup(context.Background(), tracing.Options{Role: "server"})
	if err != nil {
		t.Fatal(err)
	}
	out := stdioCalls(t, cfg, initialize, initialized, stacksCall, badParent)
	for _, id := range []string{`"id":2`, `"id":"three"`} {
		if !strings.Contains(out, id) {
			t.Fatalf("no answer for %s with the collector stuck:\n%s", id, out)
		}
	}
	if tracing.Dropped() == 0 {
		t.Error("a queue of 2 held every span of a whole-job call")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stop(ctx) // returns: its context is done
}

// TestTraceHTTPAndArgs: over Streamable HTTP the request span says tcp and
// the protocol version of the Mcp-Protocol-Version header; with
// PROBING_MCP_TRACE_ARGS the arguments are recorded.
func TestTraceHTTPAndArgs(t *testing.T) {
	r := otlptest.Start(t)
	r.Env(t, tracing.ProtocolHTTP)
	t.Setenv("PROBING_MCP_TRACE_ARGS", "1")
	stop, err := tracing.Setup(context.Background(), tracing.Options{Role: "server"})
	if err != nil {
		t.Fatal(err)
	}
	defer stop(context.Background())
	s, _ := testServer(t, false, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeHTTPListener(ctx, ln, s, HTTPConfig{Timeout: time.Minute}, nil) }()
	defer func() { cancel(); <-done }()
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_config","arguments":{"key":"PROBING_X"}}}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(b), `"id":7`) {
		t.Fatalf("HTTP %d: %s", res.StatusCode, b)
	}
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	sp := findRequest(r.Spans(), "tools/call get_config", "7", "http")
	if sp == nil {
		t.Fatalf("no span: %s", otlptest.Names(r.Spans()))
	}
	if sp.Attrs["network.transport"] != "tcp" || sp.Attrs["mcp.protocol.version"] != "2025-06-18" || sp.Attrs[argsTraceKey] != `{"key":"PROBING_X"}` {
		t.Errorf("HTTP span: %v", sp.Attrs)
	}
}
