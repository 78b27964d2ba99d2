package mcp

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// family gathers the registry's family name (nil when not registered).
func family(t *testing.T, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := metrics.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

// series is the metric of family name with exactly labels, or nil.
func series(t *testing.T, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mf := family(t, name)
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}

const opFamily = "probing_mcp_server_operation_duration_seconds"

// opCount is how many operations with these labels were observed.
func opCount(t *testing.T, method, tool, errType, transport string) uint64 {
	t.Helper()
	m := series(t, opFamily, map[string]string{"mcp_method_name": method, "gen_ai_tool_name": tool,
		"error_type": errType, "network_transport": transport})
	return m.GetHistogram().GetSampleCount()
}

// serveReal serves mcp.New's server over HTTP on 127.0.0.1:0.
func serveReal(t *testing.T, cfg HTTPConfig) string {
	t.Helper()
	s, _ := testServer(t, false, t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeHTTPListener(ctx, ln, s, cfg, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeHTTPListener: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func toolCall(name, args string) io.Reader {
	return strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + name + `","arguments":` + args + `}}`)
}

func TestOperationMetricsOverHTTP(t *testing.T) {
	base := serveReal(t, HTTPConfig{})
	type op struct{ method, tool, errType string }
	cases := []struct {
		body io.Reader
		want op
	}{
		{toolCall("list_processes", "{}"), op{"tools/call", "list_processes", ""}},
		// A refused query is a result with isError.
		{toolCall("query", `{"sql":"DELETE FROM x"}`), op{"tools/call", "query", "tool_error"}},
		// An unknown tool is a JSON-RPC error; its name is not a label.
		{toolCall("no_such_tool_"+strings.Repeat("x", 50), "{}"), op{"tools/call", "unknown", "*errors.errorString"}},
		{strings.NewReader(`{"jsonrpc":"2.0","id":8,"method":"tools/list"}`), op{"tools/list", "", ""}},
	}
	for _, c := range cases {
		before := opCount(t, c.want.method, c.want.tool, c.want.errType, "tcp")
		got := httpDo(t, http.MethodPost, base+"/mcp", c.body, httpPostHeaders...)
		if got.status != http.StatusOK {
			t.Fatalf("%+v: HTTP %d %s", c.want, got.status, got.body)
		}
		if after := opCount(t, c.want.method, c.want.tool, c.want.errType, "tcp"); after != before+1 {
			t.Errorf("%+v over tcp: count %d -> %d, want one more", c.want, before, after)
		}
	}
	for _, m := range family(t, opFamily).GetMetric() {
		for _, l := range m.GetLabel() {
			if strings.Contains(l.GetValue(), "no_such_tool") {
				t.Errorf("a client's tool name became a label: %s=%q", l.GetName(), l.GetValue())
			}
		}
	}
	if g := family(t, "probing_mcp_server_requests_in_flight"); g == nil || g.GetMetric()[0].GetGauge().GetValue() != 0 {
		t.Errorf("requests in flight after every answer: %v, want 0", g)
	}
}

func TestOperationMetricsOverStdio(t *testing.T) {
	s, _ := testServer(t, false, t.TempDir())
	startedBefore := family(t, "probing_mcp_server_sessions_started_total").GetMetric()
	var sb float64
	if len(startedBefore) > 0 {
		sb = startedBefore[0].GetCounter().GetValue()
	}
	before := opCount(t, "tools/call", "list_processes", "", "pipe")
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_processes","arguments":{}}}`,
	}, "\n") + "\n"
	var out bytes.Buffer
	if err := serveStdio(context.Background(), s, slog.New(slog.DiscardHandler), strings.NewReader(in), &out, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"id":2`) {
		t.Fatalf("no answer to the tool call:\n%s", out.String())
	}
	if after := opCount(t, "tools/call", "list_processes", "", "pipe"); after != before+1 {
		t.Errorf("list_processes over pipe: count %d -> %d, want one more", before, after)
	}
	if n := family(t, "probing_mcp_server_sessions_started_total").GetMetric()[0].GetCounter().GetValue(); n < sb+1 {
		t.Errorf("sessions started %v -> %v, want the stdio session counted", sb, n)
	}
}

// parseExposition fails the test unless body is the text format.
func parseExposition(t *testing.T, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%.500s", err, body)
	}
	return mfs
}

func TestMetricsAuthIsMCPs(t *testing.T) {
	base := serveReal(t, HTTPConfig{AuthToken: "s3cret", BasePath: "/probing"})
	// Without credentials /metrics is refused as /mcp is: 401 and the
	// same envelope and challenge.
	gotM := httpDo(t, http.MethodGet, base+"/probing/metrics", nil)
	gotMCP := httpDo(t, http.MethodPost, base+"/probing/mcp", toolCall("list_processes", "{}"), httpPostHeaders...)
	wantHTTPError(t, gotM, http.StatusUnauthorized, "UNAUTHORIZED", false)
	wantHTTPError(t, gotMCP, http.StatusUnauthorized, "UNAUTHORIZED", false)
	if string(gotM.body) != string(gotMCP.body) || gotM.header.Get("WWW-Authenticate") != gotMCP.header.Get("WWW-Authenticate") {
		t.Errorf("/metrics refused as %s, /mcp as %s", gotM.body, gotMCP.body)
	}
	wantHTTPError(t, httpDo(t, http.MethodGet, base+"/probing/metrics", nil, "Authorization: Bearer wrong"), http.StatusUnauthorized, "UNAUTHORIZED", false)
	for _, cred := range []string{"Authorization: Bearer s3cret", "X-Probing-Token: s3cret", "Authorization: " + httpBasicAuth("admin", "s3cret")} {
		got := httpDo(t, http.MethodGet, base+"/probing/metrics", nil, cred)
		if got.status != http.StatusOK {
			t.Fatalf("GET /metrics with %s: %d %s", cred, got.status, got.body)
		}
		if mfs := parseExposition(t, got.body); mfs["process_cpu_seconds_total"] == nil {
			t.Errorf("/metrics lacks the process collector")
		}
	}
	wantHTTPError(t, httpDo(t, http.MethodPost, base+"/probing/metrics", nil, "Authorization: Bearer s3cret"),
		http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", false)
	// Health and liveness stay open to probes.
	for _, p := range []string{"/probing/health", "/probing/live"} {
		if got := httpDo(t, http.MethodGet, base+p, nil); got.status != http.StatusOK {
			t.Errorf("GET %s without credentials: %d", p, got.status)
		}
	}
}

func TestHealthAndLivePathsConfigurable(t *testing.T) {
	env := map[string]string{"PROBING_SYSTEM_HEALTH_PATH": "/healthz", "PROBING_SYSTEM_LIVE_PATH": "/k8s/livez"}
	cfg, err := HTTPConfigFromEnv("127.0.0.1:0", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Version = "v9"
	base := serveReal(t, cfg)
	for p, want := range map[string]string{"/healthz": `"status":"ok"`, "/k8s/livez": `"status":"alive"`} {
		got := httpDo(t, http.MethodGet, base+p, nil)
		if got.status != http.StatusOK || !strings.Contains(string(got.body), want) {
			t.Errorf("GET %s: %d %s, want 200 with %s", p, got.status, got.body, want)
		}
	}
	for _, p := range []string{"/health", "/live"} {
		wantHTTPError(t, httpDo(t, http.MethodGet, base+p, nil), http.StatusNotFound, "NOT_FOUND", false)
	}
	env["PROBING_SYSTEM_LIVE_PATH"] = "/mcp"
	if _, err := HTTPConfigFromEnv("127.0.0.1:0", func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "PROBING_SYSTEM_LIVE_PATH") {
		t.Errorf("a live path of /mcp: %v, want an error naming the variable", err)
	}
}

// systemGet asks h as if from remote, naming host.
func systemGet(h http.Handler, path, remote, host string, headers ...string) *http.Response {
	req, _ := http.NewRequest(http.MethodGet, "http://"+host+path, nil)
	req.RemoteAddr = remote
	req.Host = host
	for _, kv := range headers {
		k, v, _ := strings.Cut(kv, ": ")
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func TestSystemHandlerRules(t *testing.T) {
	paths := metrics.Paths{Health: "/health", Live: "/live"}
	withToken := SystemHandler(metrics.System{Token: "s3cret", Paths: paths}, "v1", nil)
	noToken := SystemHandler(metrics.System{Paths: paths}, "v1", nil)
	for _, c := range []struct {
		name               string
		h                  http.Handler
		path, remote, host string
		header             string
		want               int
	}{
		{"local scrape, token set", withToken, "/metrics", "127.0.0.1:5000", "127.0.0.1:9464", "", 200},
		{"local scrape, no token", noToken, "/metrics", "[::1]:5000", "localhost:9464", "", 200},
		{"remote scrape without the token", withToken, "/metrics", "10.1.2.3:5000", "node7:9464", "", 401},
		{"remote scrape, wrong token", withToken, "/metrics", "10.1.2.3:5000", "node7:9464", "Authorization: Bearer nope", 401},
		{"remote scrape with the bearer token", withToken, "/metrics", "10.1.2.3:5000", "node7:9464", "Authorization: Bearer s3cret", 200},
		{"loopback peer naming another host (a rebound page)", withToken, "/metrics", "127.0.0.1:5000", "evil.example:9464", "", 401},
		{"remote health probe", withToken, "/health", "10.1.2.3:5000", "node7:9464", "", 200},
		{"remote live probe", withToken, "/live", "10.1.2.3:5000", "node7:9464", "", 200},
		{"no token: off loopback", noToken, "/metrics", "10.1.2.3:5000", "127.0.0.1:9464", "", 401},
		{"no token: a foreign Host", noToken, "/health", "127.0.0.1:5000", "evil.example:9464", "", 403},
		{"unknown path", withToken, "/mcp", "127.0.0.1:5000", "127.0.0.1:9464", "", 404},
	} {
		var hs []string
		if c.header != "" {
			hs = append(hs, c.header)
		}
		resp := systemGet(c.h, c.path, c.remote, c.host, hs...)
		if resp.StatusCode != c.want {
			b, _ := io.ReadAll(resp.Body)
			t.Errorf("%s: %d %s, want %d", c.name, resp.StatusCode, b, c.want)
		}
	}
}

// nonLoopbackIP is an address of this host off loopback, or "".
func nonLoopbackIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil && !ipn.IP.IsLinkLocalUnicast() {
			return ipn.IP.String()
		}
	}
	return ""
}

func TestServeSystem(t *testing.T) {
	paths := metrics.Paths{Health: "/health", Live: "/live"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A hand-made System off loopback without a token is refused before
	// any port opens.
	if _, err := ServeSystem(ctx, metrics.System{Addr: "0.0.0.0:0", Paths: paths}, "v", nil); err == nil ||
		!strings.Contains(err.Error(), "PROBING_AUTH_TOKEN") {
		t.Errorf("0.0.0.0 without a token: %v, want a refusal naming PROBING_AUTH_TOKEN", err)
	}
	// Unset: nothing served, the channel closed.
	done, err := ServeSystem(ctx, metrics.System{Paths: paths}, "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, open := <-done; open {
		t.Error("an unset system port reported a result")
	}

	// From the configuration: loopback without the token. A peer off
	// loopback cannot even connect.
	sys, err := metrics.SystemFromEnv(func(k string) string {
		return map[string]string{metrics.EnvSystemPort: "0"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs httpSyncBuffer
	done, err = ServeSystem(ctx, sys, "v", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	addr := listenedAt(t, &logs)
	got := httpDo(t, http.MethodGet, "http://"+addr+"/metrics", nil)
	if got.status != http.StatusOK {
		t.Fatalf("GET /metrics on loopback: %d %s", got.status, got.body)
	}
	parseExposition(t, got.body)
	if ip := nonLoopbackIP(); ip != "" {
		_, port, _ := net.SplitHostPort(addr)
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, port), 5*time.Second); err == nil {
			c.Close()
			t.Errorf("the token-less system port accepted a connection at %s", net.JoinHostPort(ip, port))
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("after cancel: %v", err)
	}
}

// TestServeSystemWithTokenOffLoopback: with the token the port is open on
// every interface, and a peer off loopback needs the token for /metrics.
func TestServeSystemWithTokenOffLoopback(t *testing.T) {
	ip := nonLoopbackIP()
	if ip == "" {
		t.Skip("this host has no IPv4 address off loopback to connect from")
	}
	sys, err := metrics.SystemFromEnv(func(k string) string {
		return map[string]string{metrics.EnvSystemPort: "0", "PROBING_AUTH_TOKEN": "s3cret"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs httpSyncBuffer
	if _, err := ServeSystem(ctx, sys, "v", slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(listenedAt(t, &logs))
	url := "http://" + net.JoinHostPort(ip, port)
	wantHTTPError(t, httpDo(t, http.MethodGet, url+"/metrics", nil), http.StatusUnauthorized, "UNAUTHORIZED", false)
	if got := httpDo(t, http.MethodGet, url+"/metrics", nil, "Authorization: Bearer s3cret"); got.status != http.StatusOK {
		t.Errorf("with the token: %d %s", got.status, got.body)
	}
	if got := httpDo(t, http.MethodGet, url+"/health", nil); got.status != http.StatusOK {
		t.Errorf("health off loopback: %d %s", got.status, got.body)
	}
}

// listenedAt is the address the system port logged.
func listenedAt(t *testing.T, logs *httpSyncBuffer) string {
	t.Helper()
	for _, f := range strings.Fields(logs.String()) {
		if a, ok := strings.CutPrefix(f, "addr="); ok {
			return a
		}
	}
	t.Fatalf("no addr= in the log: %s", logs.String())
	return ""
}

// benchServer is a server with one trivial tool, instrumented or not.
func benchServer(instrumented bool) *server.MCPServer {
	opts := []server.ServerOption{server.WithToolCapabilities(false)}
	if instrumented {
		opts = append(opts, withMetrics())
	}
	s := server.NewMCPServer("bench", "0", opts...)
	s.AddTool(mcplib.NewTool("echo"), func(context.Context, mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
		return mcplib.NewToolResultText("ok"), nil
	})
	return s
}

// BenchmarkToolCall is one tools/call through mcp-go's dispatch, with and
// without the metrics hooks: their cost is the difference.
func BenchmarkToolCall(b *testing.B) {
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	for _, on := range []bool{false, true} {
		name := "metrics=off"
		if on {
			name = "metrics=on"
		}
		b.Run(name, func(b *testing.B) {
			s := benchServer(on)
			ctx := WithCaller(context.Background(), "http:bench")
			for b.Loop() {
				if r := s.HandleMessage(ctx, msg); r == nil {
					b.Fatal("no answer")
				}
			}
		})
	}
}

// BenchmarkMetricsHooks is what withMetrics adds to one tools/call alone:
// its before-hook and its success hook.
func BenchmarkMetricsHooks(b *testing.B) {
	s := benchServer(true)
	m := &opMeter{s: s, started: map[any]time.Time{}}
	ctx := WithCaller(context.Background(), "http:bench")
	req := &mcplib.CallToolRequest{}
	req.Params.Name = "echo"
	res := mcplib.NewToolResultText("ok")
	for b.Loop() {
		m.before(ctx, 1, mcplib.MethodToolsCall, req)
		m.success(ctx, 1, mcplib.MethodToolsCall, req, res)
	}
}
