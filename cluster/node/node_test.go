package node_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/internal/hmacauth"
)

func newServer(t *testing.T, token string) *httptest.Server {
	src := &node.Local{Self: cluster.Node{Host: "n0", Addr: "127.0.0.1:1"}, Agents: agent.Options{DataDir: t.TempDir(), CtrlRoot: t.TempDir()}}
	s := httptest.NewServer(node.Handler(node.Config{Source: src, Token: token}))
	t.Cleanup(s.Close)
	return s
}

// signed is the Authorization a coordinator holding token sends.
const signed = "signed"

func do(t *testing.T, method, url, auth, body string, hdr map[string]string) (int, string) {
	code, b, _ := doSigned(t, method, url, auth, body, hdr)
	return code, b
}

// doSigned sends one request; auth "signed" signs it with "tok", and then
// the answer's signature is checked (its error returned).
func doSigned(t *testing.T, method, url, auth, body string, hdr map[string]string) (int, string, error) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	var nonce string
	if auth == signed {
		auth, nonce = hmacauth.NewKey("tok").Sign(method, req.URL.RequestURI(), req.URL.Host, []byte(body), time.Now())
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := res.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var verr error
	if nonce != "" {
		verr = hmacauth.NewKey("tok").VerifyResponse(nonce, res.StatusCode, []byte(b.String()), res.Header.Get(hmacauth.ResponseHeader))
	}
	return res.StatusCode, b.String(), verr
}

// TestAuthAndBadRequests: a signature made with the token guards every
// path but /health (the token itself is refused: it is never sent), every
// answer to a signed request is signed, and bad requests are 4xx answers
// that name the fix.
func TestAuthAndBadRequests(t *testing.T) {
	s := newServer(t, "tok")
	if code, _ := do(t, "GET", s.URL+node.PathHealth, "", "", nil); code != 200 {
		t.Errorf("health without a token: %d", code)
	}
	other, _ := hmacauth.NewKey("tok2").Sign("GET", node.PathInfo, strings.TrimPrefix(s.URL, "http://"), nil, time.Now())
	for _, auth := range []string{"", "Bearer wrong", "Basic dG9r", "Bearer tok", "X-Probing-Token tok", other} {
		code, body := do(t, "GET", s.URL+node.PathInfo, auth, "", nil)
		if code != 401 || !strings.Contains(body, "PROBING_AUTH_TOKEN") || strings.Contains(body, "tok\"") {
			t.Errorf("auth %q: %d %s", auth, code, body)
		}
	}
	code, body, err := doSigned(t, "GET", s.URL+node.PathInfo, signed, "", nil)
	if code != 200 || !strings.Contains(body, `"host":"n0"`) || err != nil {
		t.Errorf("info: %d %s %v", code, body, err)
	}
	if code, _, err := doSigned(t, "GET", s.URL+node.PathHealth, signed, "", nil); code != 200 || err != nil {
		t.Errorf("signed health: %d %v", code, err)
	}
	// Sent to one address, relayed to this daemon by another: refused.
	relay, _ := hmacauth.NewKey("tok").Sign("GET", node.PathInfo, "10.1.2.3:9781", nil, time.Now())
	if code, body := do(t, "GET", s.URL+node.PathInfo, relay, "", nil); code != 403 || !strings.Contains(body, "relayed") {
		t.Errorf("relay: %d %s", code, body)
	}
	cases := []struct{ method, path, body, hdr string }{
		{"POST", node.PathStacks, `{"ranks":"0","extra":1}`, ""},
		{"POST", node.PathStacks, `{"ranks":`, ""},
		{"POST", node.PathStacks, `{"ranks":"x-y"}`, ""},
		{"POST", node.PathStacks, `{}`, "abc"},
		{"POST", node.PathStacks, `{}`, "-5"},
		{"GET", "/v1/nope", "", ""},
		{"POST", node.PathStacks, `{"ranks":"` + strings.Repeat("1,", 600000) + `1"}`, ""},
	}
	for _, c := range cases {
		h := map[string]string{}
		if c.hdr != "" {
			h[node.TimeoutHeader] = c.hdr
		}
		code, body, err := doSigned(t, c.method, s.URL+c.path, signed, c.body, h)
		if code < 400 || code >= 500 || !strings.Contains(body, `"error"`) || (err != nil && code != 413) {
			t.Errorf("%s %s %.40q %q: %d %.200s", c.method, c.path, c.body, c.hdr, code, body)
		}
	}
}

// TestTimeoutHeaderBoundsTheAnswer: a node that cannot finish within the
// caller's time answers 504 in time instead of hanging.
func TestTimeoutHeaderBoundsTheAnswer(t *testing.T) {
	src := &slowSource{}
	s := httptest.NewServer(node.Handler(node.Config{Source: src}))
	defer s.Close()
	code, body := do(t, "POST", s.URL+node.PathStacks, "", `{}`, map[string]string{node.TimeoutHeader: "300"})
	if code != http.StatusGatewayTimeout || !strings.Contains(body, "caller's") {
		t.Fatalf("%d %s", code, body)
	}
}

type slowSource struct{ node.Local }

func (s *slowSource) Stacks(ctx context.Context, _ node.StacksRequest) (*node.StacksReply, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestLockAndIdleExit: one daemon per data dir; a node without a live
// agent for the idle time stops the daemon.
func TestLockAndIdleExit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "probing-mcp", "node.lock")
	f, err := node.Lock(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.Lock(p); !errors.Is(err, node.ErrRunning) {
		t.Fatalf("second lock: %v", err)
	}
	f.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- node.Run(context.Background(), node.DaemonOptions{Handler: http.NotFoundHandler(), Listener: ln,
			IdleExit: time.Millisecond, Poll: 5 * time.Millisecond, Alive: func(context.Context) bool { asked.Add(1); return false }})
	}()
	select {
	case err := <-done:
		if err != nil || asked.Load() == 0 {
			t.Fatalf("run: %v, asked %d", err, asked.Load())
		}
	case <-time.After(time.Minute):
		t.Fatal("the idle daemon did not exit")
	}
}

// TestGPURoute: POST /v1/gpu answers the node's GPU report with its host
// (no sampler and no engine here: not_sampled, with why); the 404 names
// the route.
func TestGPURoute(t *testing.T) {
	s := newServer(t, "")
	code, body := do(t, "POST", s.URL+node.PathGPU, "", `{}`, nil)
	if code != 200 || !strings.Contains(body, `"host":"n0"`) || !strings.Contains(body, `"state":"not_sampled"`) || !strings.Contains(body, "no data dir") {
		t.Fatalf("%d %s", code, body)
	}
	if code, body := do(t, "POST", s.URL+node.PathGPU, "", `{"ranks":"0"}`, nil); code != 400 || !strings.Contains(body, "ranks") {
		t.Errorf("unknown field: %d %s", code, body)
	}
	if code, body := do(t, "GET", s.URL+"/v1/nothing", "", "", nil); code != 404 || !strings.Contains(body, "/v1/gpu") {
		t.Errorf("404: %d %s", code, body)
	}
}
