package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/probing-mcp/probing-mcp/internal/tracing/otlptest"
)

// TestTraceAcrossProcesses: the real binary, three processes: two
// `probing-mcp node` daemons (one exporting over gRPC, the other over
// http/protobuf) and `probing-mcp serve --peers` over stdio. One
// whole-job get_stacks, sent with a client's traceparent, is one trace at
// the OTLP receiver: the server's request span under the client's, and
// each daemon's handling (its own process, its own resource) under the
// server's call to it. The processes flush at exit (stdin closed, then
// SIGTERM).
func TestTraceAcrossProcesses(t *testing.T) {
	bin := buildBinary(t)
	r := otlptest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // an overall bound, not a measure
	defer cancel()
	base := func(protocol, endpoint string) []string {
		return append(os.Environ(), "PROBING_AUTH_TOKEN=trace-tok", "PROBING_MCP_HISTORY=off", "PROBING_GPU=0",
			"PROBING_DATA_DIR="+t.TempDir(), "PROBING_CTRL_ROOT="+t.TempDir(), "OTEL_EXPORT_ENABLED=true",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="+protocol, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="+endpoint,
			"OTEL_SERVICE_NAME=", "OTEL_BSP_SCHEDULE_DELAY=100")
	}
	served := regexp.MustCompile(`msg="node daemon serving" addr=(\S+)`)
	var addrs []string
	var daemons []*exec.Cmd
	for i, d := range []struct{ ip, proto, endpoint string }{
		{"127.0.0.2", "grpc", r.GRPCEndpoint},
		{"127.0.0.3", "http/protobuf", r.HTTPEndpoint},
	} {
		cmd := exec.CommandContext(ctx, bin, "node", "--http", d.ip+":0", "--no-register", "--idle-exit", "0")
		cmd.Env = append(base(d.proto, d.endpoint), "PROBING_NODE_HOST=tracenode"+string(rune('0'+i)))
		errOut, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		daemons = append(daemons, cmd)
		defer cmd.Process.Kill()
		found := make(chan string, 2)
		go func() {
			sc := bufio.NewScanner(errOut)
			var said []string
			for sc.Scan() {
				if m := served.FindStringSubmatch(sc.Text()); m != nil {
					found <- m[1]
				}
				said = append(said, sc.Text())
			}
			found <- "exited: " + strings.Join(said, "\n")
		}()
		select {
		case a := <-found:
			if strings.HasPrefix(a, "exited: ") {
				if strings.Contains(a, "cannot assign requested address") {
					t.Skipf("cannot listen on %s (a loopback alias this system lacks?)", d.ip)
				}
				t.Fatalf("node daemon %d: %s", i, a)
			}
			addrs = append(addrs, a)
		case <-ctx.Done():
			t.Fatal("a node daemon did not start")
		}
	}
	const traceID, parent = "5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"
	srv := exec.CommandContext(ctx, bin, "serve", "--peers", strings.Join(addrs, ","))
	srv.Env = base("http/protobuf", r.HTTPEndpoint)
	srv.Stdin = strings.NewReader(strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_stacks","arguments":{},"_meta":{"traceparent":"00-` + traceID + `-` + parent + `-01"}}}`,
	}, "\n") + "\n")
	var out, errOut strings.Builder
	srv.Stdout, srv.Stderr = &out, &errOut
	if err := srv.Run(); err != nil {
		t.Fatalf("serve: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), `"id":2`) {
		t.Fatalf("no answer to the call:\n%s\n%s", out.String(), errOut.String())
	}
	for _, d := range daemons {
		d.Process.Signal(syscall.SIGTERM)
		d.Wait() // exits after flushing its spans
	}
	spans := otlptest.Of(r.Spans(), traceID)
	req := otlptest.Named(spans, "tools/call get_stacks")
	if req == nil || req.ParentID != parent || req.Resource["probing.role"] != "server" || req.Attrs["network.transport"] != "pipe" {
		t.Fatalf("request span %+v; spans %s", req, otlptest.Names(spans))
	}
	byID := map[string]otlptest.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	pids := map[string]string{} // daemon pid → how its spans came
	for _, s := range spans {
		if s.Name != "POST /v1/stacks" || s.Kind != tracepb.Span_SPAN_KIND_SERVER {
			continue
		}
		call := byID[s.ParentID]
		if call.Kind != tracepb.Span_SPAN_KIND_CLIENT || call.Resource["process.pid"] != req.Resource["process.pid"] || s.Resource["probing.role"] != "node" {
			t.Errorf("daemon span %+v: its parent %+v is not the server's call", s, call)
		}
		pids[s.Resource["process.pid"]] = s.Via
	}
	if len(pids) != 2 || !hasVia(pids, "grpc") || !hasVia(pids, "http") {
		t.Fatalf("daemon spans from %v, want both daemons, one over each protocol; spans %s", pids, otlptest.Names(spans))
	}
}

func hasVia(m map[string]string, via string) bool {
	for _, v := range m {
		if v == via {
			return true
		}
	}
	return false
}

// TestNodeServesWithABadTraceSetting: a node daemon, often started by a
// rank's agent with the job's environment, serves with a tracing setting
// it cannot use, and says so; serve refuses it at start.
func TestNodeServesWithABadTraceSetting(t *testing.T) {
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // an overall bound
	defer cancel()
	env := append(os.Environ(), "PROBING_DATA_DIR="+t.TempDir(), "PROBING_CTRL_ROOT="+t.TempDir(), "PROBING_GPU=0",
		"PROBING_AUTH_TOKEN=", "OTEL_EXPORT_ENABLED=true", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json")
	cmd := exec.CommandContext(ctx, bin, "node", "--http", "127.0.0.1:0", "--no-register", "--idle-exit", "0")
	cmd.Env = env
	errOut, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(errOut)
	warned, served := false, false
	for sc.Scan() {
		warned = warned || strings.Contains(sc.Text(), "serving without traces") && strings.Contains(sc.Text(), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if strings.Contains(sc.Text(), `msg="node daemon serving"`) {
			served = true
			break
		}
	}
	if !warned || !served {
		t.Fatal("the daemon did not serve, or did not say why it has no traces")
	}
	srv := exec.CommandContext(ctx, bin, "serve")
	srv.Env = env
	out, err := srv.CombinedOutput()
	if code := srv.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
		t.Errorf("serve: exit %d %v: %s", code, err, out)
	}
}
