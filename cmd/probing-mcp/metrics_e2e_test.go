package main

// End-to-end: a real Prometheus (Debian's prometheus package) scrapes a
// running `serve --http` (a whole-job coordinator) and a `probing-mcp node`
// daemon, both with a token, and the test reads the operation-duration
// histogram back through Prometheus' HTTP API after a real tools/call.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const promInstall = "apt-get install -y prometheus (Debian/Ubuntu; .ci/run does it on CI)"

// logWatch collects a process's stderr and hands over the first match of re.
type logWatch struct {
	mu    sync.Mutex
	buf   strings.Builder
	re    *regexp.Regexp
	found chan string
	sent  bool
}

func newLogWatch(re string) *logWatch {
	return &logWatch{re: regexp.MustCompile(re), found: make(chan string, 1)}
}

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.sent {
		if m := w.re.FindStringSubmatch(w.buf.String()); m != nil {
			w.sent = true
			w.found <- m[1]
		}
	}
	return len(p), nil
}

func (w *logWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startLogged starts cmd and waits until its stderr matches the watch's
// pattern, returning the first group; the process is stopped (SIGTERM)
// when the test ends.
func startLogged(t *testing.T, ctx context.Context, cmd *exec.Cmd, w *logWatch) string {
	t.Helper()
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("%s's log:\n%s", filepath.Base(cmd.Path), w.String())
		}
	})
	select {
	case v := <-w.found:
		return v
	case <-exited:
		t.Fatalf("%s exited before it was ready:\n%s", cmd.Args, w.String())
	case <-ctx.Done():
		t.Fatalf("%s was not ready before the test's deadline:\n%s", cmd.Args, w.String())
	}
	return ""
}

// freePort is a loopback port free a moment ago (Prometheus' web server
// takes no port 0 it would report); a clash shows as Prometheus failing to
// start, and is retried.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// promQuery asks Prometheus for an instant vector.
func promQuery(ctx context.Context, base, q string) ([]struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 4<<20)).Decode(&out); err != nil {
		return nil, err
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, out.Error)
	}
	return out.Data.Result, nil
}

// waitSeries polls Prometheus until q returns a series (bounded by ctx).
func waitSeries(t *testing.T, ctx context.Context, base, q string) []struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
} {
	t.Helper()
	var last error
	for {
		got, err := promQuery(ctx, base, q)
		if err == nil && len(got) > 0 {
			return got
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("Prometheus never returned %s before the test's deadline (last error: %v)", q, last)
		case <-time.After(200 * time.Millisecond): // a poll interval, not a margin
		}
	}
}

func TestPrometheusScrapesServeAndNode(t *testing.T) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("no prometheus binary on PATH; install it: " + promInstall)
	}
	bin := buildBinary(t)
	deadline := time.Now().Add(4 * time.Minute)
	if d, ok := t.Deadline(); ok && d.Before(deadline) {
		deadline = d.Add(-10 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	const token = "e2e-metrics-token"
	dir := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "PROBING_AUTH_TOKEN=" + token,
		"PROBING_DATA_DIR=" + filepath.Join(dir, "data"), "PROBING_CTRL_ROOT=" + filepath.Join(dir, "ctrl"),
		"PROBING_ALLOWED_FILE_DIRS=" + filepath.Join(dir, "dumps"), "PROBING_MCP_HISTORY=off", "PROBING_GPU=off"}

	// The node daemon, then a coordinator whose scope is that node.
	nodeCmd := exec.Command(bin, "node", "--http", "127.0.0.1:0", "--no-register", "--idle-exit", "0")
	nodeCmd.Env = append(env, "PROBING_DATA_DIR="+filepath.Join(dir, "node-data"))
	nodeAddr := startLogged(t, ctx, nodeCmd, newLogWatch(`msg="node daemon serving" addr=(\S+)`))
	serveCmd := exec.Command(bin, "serve", "--http", "127.0.0.1:0", "--peers", nodeAddr)
	serveCmd.Env = env
	serveAddr := startLogged(t, ctx, serveCmd, newLogWatch(`msg="MCP HTTP server listening" addr=(\S+)`))

	// An idle server shows no operation histogram (families register on
	// first use); the token is required as on /mcp.
	req, _ := http.NewRequest(http.MethodGet, "http://"+serveAddr+"/metrics", nil)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/metrics without the token: %v %v, want 401", res.StatusCode, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	idle, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || strings.Contains(string(idle), "probing_mcp_server_operation_duration_seconds") {
		t.Fatalf("an idle server's /metrics: %d, has the operation histogram: %v", res.StatusCode, strings.Contains(string(idle), "probing_mcp_server_operation"))
	}

	// Prometheus, scraping both every second: the server with the bearer
	// token, the daemon unsigned (as its /health).
	cfgPath := filepath.Join(dir, "prometheus.yml")
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: serve
    authorization:
      type: Bearer
      credentials: %q
    static_configs:
      - targets: [%q]
  - job_name: node
    static_configs:
      - targets: [%q]
`, token, serveAddr, nodeAddr)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var promBase string
	for try := 0; promBase == "" && try < 3; try++ {
		web := freePort(t)
		pcmd := exec.Command(prom, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("tsdb%d", try)),
			"--web.listen-address="+web, "--log.level=info")
		pcmd.Env = env
		w := newLogWatch(`(Server is ready to receive web requests)`)
		pcmd.Stderr = w
		if err := pcmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = pcmd.Wait(); close(exited) }()
		stop := func() {
			_ = pcmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(20 * time.Second):
				_ = pcmd.Process.Kill()
				<-exited
			}
		}
		select {
		case <-w.found:
			promBase = "http://" + web
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("prometheus's log:\n%s", w.String())
				}
			})
		case <-exited:
			t.Logf("prometheus exited at start (try %d):\n%s", try+1, w.String()) // its port was taken
		case <-ctx.Done():
			stop()
			t.Fatalf("prometheus was not ready before the test's deadline:\n%s", w.String())
		}
	}
	if promBase == "" {
		t.Fatal("prometheus did not start in three tries")
	}

	// Real tool calls over HTTP: list_processes, and list_cluster_nodes,
	// which asks the node daemon.
	for _, tool := range []string{"list_processes", "list_cluster_nodes"} {
		call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":{}}}`
		creq, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+serveAddr+"/mcp", strings.NewReader(call))
		creq.Header.Set("Content-Type", "application/json")
		creq.Header.Set("Accept", "application/json, text/event-stream")
		creq.Header.Set("Authorization", "Bearer "+token)
		cres, err := http.DefaultClient.Do(creq)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(cres.Body)
		cres.Body.Close()
		if cres.StatusCode != 200 || !strings.Contains(string(body), `"result"`) || strings.Contains(string(body), `"isError":true`) {
			t.Fatalf("tools/call %s: %d %s", tool, cres.StatusCode, body)
		}
	}

	// Read it back through Prometheus.
	q := `probing_mcp_server_operation_duration_seconds_count{job="serve",mcp_method_name="tools/call",gen_ai_tool_name="list_processes",network_transport="tcp",error_type=""} >= 1`
	got := waitSeries(t, ctx, promBase, q)
	t.Logf("%s: %v", q, got[0].Value)
	buckets := waitSeries(t, ctx, promBase, `probing_mcp_server_operation_duration_seconds_bucket{job="serve",gen_ai_tool_name="list_processes"}`)
	var les []string
	for _, b := range buckets {
		les = append(les, b.Metric["le"])
	}
	for _, le := range []string{"0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1", "2", "5", "10", "30", "60", "120", "300", "+Inf"} {
		if !strings.Contains(" "+strings.Join(les, " ")+" ", " "+le+" ") && !strings.Contains(" "+strings.Join(les, " ")+" ", " "+le+".0 ") {
			t.Errorf("bucket le=%s missing: %v", le, les)
		}
	}
	if len(les) != 15 {
		t.Errorf("%d buckets %v, want semconv's 14 and +Inf", len(les), les)
	}
	// The coordinator asked the daemon, and both targets are up.
	waitSeries(t, ctx, promBase, fmt.Sprintf(`probing_mcp_fanout_calls_total{job="serve",node=%q} >= 1`, nodeAddr))
	waitSeries(t, ctx, promBase, `up{job="node"} == 1`)
	waitSeries(t, ctx, promBase, `process_start_time_seconds{job="node"}`)
}

// TestSystemVariablesRefusedAtStart: a bad PROBING_SYSTEM_* value stops
// serve and node at start (exit 2) with the variable and the fix.
func TestSystemVariablesRefusedAtStart(t *testing.T) {
	t.Setenv("PROBING_DATA_DIR", t.TempDir())
	t.Setenv("PROBING_MCP_HISTORY", "off")
	t.Setenv("PROBING_GPU", "off")
	t.Setenv("PROBING_AUTH_TOKEN", "")
	for _, c := range []struct{ cmd, name, value, want string }{
		{"serve", "PROBING_SYSTEM_PORT", "metrics", "0 to 65535"},
		{"serve", "PROBING_SYSTEM_PORT", "0.0.0.0:9464", "set PROBING_AUTH_TOKEN"},
		{"serve", "PROBING_SYSTEM_HEALTH_PATH", "healthz", "absolute URL path"},
		{"node", "PROBING_SYSTEM_LIVE_PATH", "/metrics", "served already"},
		{"node", "PROBING_SYSTEM_HEALTH_PATH", "/live", "different paths"},
	} {
		t.Run(c.cmd+"/"+c.name+"="+c.value, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			args := []string{c.cmd}
			if c.cmd == "node" {
				args = append(args, "--http", "127.0.0.1:0", "--no-register")
			}
			code, _, errOut := runCLI(args...)
			if code != 2 || !strings.Contains(errOut, c.name) || !strings.Contains(errOut, c.want) {
				t.Errorf("exit %d %q, want 2 naming %s and %q", code, errOut, c.name, c.want)
			}
		})
	}
}
