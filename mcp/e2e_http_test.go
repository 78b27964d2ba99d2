package mcp_test

// End-to-end tests over Streamable HTTP (see e2e_test.go for the harness).

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// e2eHTTPServer is "probing-mcp serve --http ADDR", running until the test ends.
type e2eHTTPServer struct {
	url  string // http://127.0.0.1:PORT/mcp
	base string // http://127.0.0.1:PORT
	logs *e2eLogSink
}

// e2eLogSink collects the server's stderr and reports the URL it logs once
// it listens.
type e2eLogSink struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	listen chan [2]string // addr, url
	sent   bool
}

// The line ServeHTTPListener logs, e.g.
// msg="MCP HTTP server listening" addr=127.0.0.1:41234 url=http://127.0.0.1:41234/mcp auth=false
var e2eListenRE = regexp.MustCompile(`msg="MCP HTTP server listening" .*\baddr=("(?:[^"\\]|\\.)*"|\S+) .*\burl=("(?:[^"\\]|\\.)*"|\S+)`)

func (s *e2eLogSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	if !s.sent {
		for line := range strings.Lines(s.buf.String()) {
			if m := e2eListenRE.FindStringSubmatch(line); m != nil && strings.HasSuffix(line, "\n") {
				s.sent = true
				s.listen <- [2]string{unquoteLogValue(m[1]), unquoteLogValue(m[2])}
				break
			}
		}
	}
	return len(p), nil
}

func (s *e2eLogSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func unquoteLogValue(v string) string {
	if u, err := strconv.Unquote(v); err == nil {
		return u
	}
	return v
}

func (h *e2eHarness) startHTTP(t *testing.T, env []string) *e2eHTTPServer {
	t.Helper()
	cmd := exec.Command(h.bin, "serve", "--http", "127.0.0.1:0")
	cmd.Env = env
	cmd.Dir = h.root
	logs := &e2eLogSink{listen: make(chan [2]string, 1)}
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			// The server must shut down cleanly on SIGTERM.
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
				if waitErr != nil {
					t.Errorf("server exit after SIGTERM: %v", waitErr)
				}
			case <-time.After(e2eStopTimeout):
				_ = cmd.Process.Kill()
				<-exited
				t.Errorf("server still running %v after SIGTERM; killed", e2eStopTimeout)
			}
		}
		if stdout.Len() > 0 {
			t.Errorf("HTTP server wrote to stdout: %.500q", stdout.String())
		}
		if t.Failed() {
			t.Logf("server logs:\n%s", lastLines(logs.String(), 60))
		}
	})
	select {
	case al := <-logs.listen:
		addr, url := al[0], al[1]
		if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") || url != "http://"+addr+"/mcp" {
			t.Fatalf("listening line gives addr=%s url=%s, want a bound 127.0.0.1 port and http://ADDR/mcp", addr, url)
		}
		return &e2eHTTPServer{url: url, base: "http://" + addr, logs: logs}
	case <-exited:
		stopped = true
		t.Fatalf("server exited before listening: %v\n%s", waitErr, logs.String())
	case <-time.After(e2eStartTimeout):
		t.Fatalf("server did not log its address within %v:\n%s", e2eStartTimeout, logs.String())
	}
	return nil
}

var e2eHTTPClient = &http.Client{Timeout: 10 * time.Second}

func httpDo(t *testing.T, method, url, authorization string, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	resp, err := e2eHTTPClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func checkHealth(t *testing.T, srv *e2eHTTPServer) {
	t.Helper()
	resp, body := httpDo(t, http.MethodGet, srv.base+"/health", "", "")
	var health struct{ Status string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &health) != nil || health.Status != "ok" {
		t.Errorf("GET /health without credentials: %d %s, want 200 {\"status\":\"ok\"}", resp.StatusCode, body)
	}
}

func checkNoHTTPFailures(t *testing.T, out *e2eOut) {
	t.Helper()
	if len(out.HTTPStatuses) == 0 {
		t.Error("client recorded no HTTP responses")
	}
	for _, s := range out.HTTPStatuses {
		if s >= 400 {
			t.Errorf("HTTP statuses %v include a failure", out.HTTPStatuses)
			break
		}
	}
}

func TestE2EHTTPNoAuth(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	srv := h.startHTTP(t, h.serverEnv(t, "PROBING_ALLOWED_FILE_DIRS="+h.fr("")))
	checkHealth(t, srv)

	out := h.http(t, srv.url, "http-list",
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}})...)
	out.mustOK(t)
	checkNoHTTPFailures(t, out)
	checkAnalyzeTool(t, out)
	if out.tool("set_config") != nil {
		t.Errorf("set_config is listed although writes are off")
	}
	if !strings.Contains(out.Instructions, "analyze_flight_recorder") {
		t.Errorf("instructions do not mention analyze_flight_recorder:\n%s", out.Instructions)
	}
	checkMissingRank(t, out.call(t, 0))

	out = h.http(t, srv.url, "http-call",
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("healthy")}})...)
	out.mustOK(t)
	checkHealthy(t, out.call(t, 0))
}

func TestE2EHTTPAuth(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	const token = "s3cret"
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	srv := h.startHTTP(t, h.serverEnv(t, "PROBING_AUTH_TOKEN="+token, "PROBING_ALLOWED_FILE_DIRS="+h.fr(""),
		"PROBING_MCP_ALLOW_WRITE=1", "PROBING_MCP_AUDIT_LOG="+audit))
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	debug := map[string]string{"key": "mcp.loglevel", "value": "debug"}
	info := map[string]string{"key": "probing.mcp.loglevel", "value": "info"}

	t.Run("health_is_public", func(t *testing.T) { checkHealth(t, srv) })
	t.Run("raw_401", func(t *testing.T) {
		init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"0"}}}`
		resp, body := httpDo(t, http.MethodPost, srv.url, "", init)
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic realm=") {
			t.Errorf("POST /mcp without credentials: %d, WWW-Authenticate %q, want 401 and a Basic challenge; body %s",
				resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
		}
		if resp, body = httpDo(t, http.MethodPost, srv.url, "Bearer "+token, init); resp.StatusCode != http.StatusOK {
			t.Errorf("POST /mcp with the bearer token: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("clients", func(t *testing.T) {
		t.Run("bearer", func(t *testing.T) {
			t.Parallel()
			out := h.http(t, srv.url, "http-list", slices.Concat([]string{"--header", "Authorization: Bearer " + token},
				e2eArgs("set_config", debug),
				e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}}))...)
			out.mustOK(t)
			checkNoHTTPFailures(t, out)
			checkSetConfigListed(t, out)
			if c := out.call(t, 0); c.Error != nil || c.IsError {
				t.Errorf("set_config over HTTP: %s %s", c.Error, c.Text)
			}
			checkMissingRank(t, out.call(t, 1))
		})
		t.Run("basic", func(t *testing.T) {
			t.Parallel()
			out := h.http(t, srv.url, "http-call", slices.Concat([]string{"--header", "Authorization: " + basic("admin", token)},
				e2eArgs("set_config", info),
				e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("healthy")}}))...)
			out.mustOK(t)
			checkNoHTTPFailures(t, out)
			if c := out.call(t, 0); c.Error != nil || c.IsError {
				t.Errorf("set_config over HTTP: %s %s", c.Error, c.Text)
			}
			checkHealthy(t, out.call(t, 1))
		})
		for name, header := range map[string]string{
			"no_credentials": "",
			"wrong_bearer":   "Authorization: Bearer s3cret-not",
			"wrong_user":     "Authorization: " + basic("root", token),
			"wrong_password": "Authorization: " + basic("admin", "guess"),
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				args := e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}})
				if header != "" {
					args = append([]string{"--header", header}, args...)
				}
				out := h.http(t, srv.url, "http-call", args...)
				if out.Error == nil {
					t.Fatalf("the session succeeded; calls:%s", out.summary())
				}
				if len(out.Calls) > 0 {
					t.Errorf("a tool was called:%s", out.summary())
				}
				if !slices.Contains(out.HTTPStatuses, http.StatusUnauthorized) || slices.ContainsFunc(out.HTTPStatuses, func(s int) bool { return s < 300 }) {
					t.Errorf("HTTP statuses %v, want 401 and no success", out.HTTPStatuses)
				}
			})
		}
	})

	// Both authenticated clients called set_config: two audited calls, each
	// naming how its caller authenticated.
	recs := readAudit(t, audit)
	if len(recs) != 4 {
		t.Fatalf("%d audit lines, want 4 (two calls): %+v", len(recs), recs)
	}
	byID := map[string][]e2eAuditRecord{}
	for _, r := range recs {
		byID[r.ID] = append(byID[r.ID], r)
	}
	for _, pair := range byID {
		switch {
		case len(pair) != 2:
			t.Errorf("audit id %s has %d lines", pair[0].ID, len(pair))
		case strings.HasPrefix(pair[0].Caller, "http:bearer@127.0.0.1:"):
			checkAuditPair(t, pair, debug, "http:bearer@127.0.0.1:", "ok")
		case strings.HasPrefix(pair[0].Caller, "http:basic:admin@127.0.0.1:"):
			checkAuditPair(t, pair, info, "http:basic:admin@127.0.0.1:", "ok")
		default:
			t.Errorf("audit caller %q is neither the bearer nor the basic client", pair[0].Caller)
		}
	}
}

// Without a token the server must refuse to listen beyond loopback.
func TestE2EHTTPRefusesPublicBindWithoutToken(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		ctx, cancel := context.WithTimeout(context.Background(), e2eStartTimeout)
		cmd := exec.CommandContext(ctx, h.bin, "serve", "--http", addr)
		cmd.Env = h.serverEnv(t)
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Errorf("serve --http %s without a token is still running after %v (it listens?)\n%s", addr, e2eStartTimeout, out)
			continue
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Errorf("serve --http %s without a token: err %v, want a non-zero exit\n%s", addr, err, out)
		}
		if !strings.Contains(string(out), "PROBING_AUTH_TOKEN") {
			t.Errorf("serve --http %s: the refusal does not mention PROBING_AUTH_TOKEN:\n%s", addr, out)
		}
		if strings.Contains(string(out), "listening") {
			t.Errorf("serve --http %s: listened before refusing:\n%s", addr, out)
		}
	}
}
