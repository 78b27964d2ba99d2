package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// httpFixture is a real MCP server behind ServeHTTPListener on 127.0.0.1:0.
type httpFixture struct {
	base string // http://127.0.0.1:port, without the base path
	logs *httpSyncBuffer

	entered     chan struct{} // the "block" tool signals here once it holds a slot
	release     chan struct{} // closed to let "block" calls return
	releaseOnce sync.Once
}

func (f *httpFixture) releaseBlocked() { f.releaseOnce.Do(func() { close(f.release) }) }

// httpSyncBuffer collects log output written by server goroutines; t.Log
// cannot be used there, since they may outlive the test.
type httpSyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *httpSyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *httpSyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func startHTTPFixture(t *testing.T, cfg HTTPConfig) *httpFixture {
	t.Helper()
	f := &httpFixture{
		logs:    &httpSyncBuffer{},
		entered: make(chan struct{}, 16),
		release: make(chan struct{}),
	}
	text := mcplib.NewToolResultText
	s := server.NewMCPServer("probing-mcp-test", "0.0.1", server.WithToolCapabilities(false))
	s.AddTool(mcplib.NewTool("whoami"), func(ctx context.Context, _ mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
		return text(CallerFrom(ctx)), nil
	})
	s.AddTool(mcplib.NewTool("block"), func(ctx context.Context, _ mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
		f.entered <- struct{}{}
		select {
		case <-f.release:
		case <-ctx.Done():
		}
		return text("released"), nil
	})
	s.AddTool(mcplib.NewTool("sleep"), func(ctx context.Context, _ mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
		select {
		case <-time.After(time.Minute):
		case <-ctx.Done():
		}
		return text("woke"), nil
	})
	s.AddTool(mcplib.NewTool("progress"), func(ctx context.Context, _ mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
		err := server.ServerFromContext(ctx).SendNotificationToClient(ctx, "notifications/progress",
			map[string]any{"progressToken": "p1", "progress": 1, "total": 2})
		if err != nil {
			return nil, err
		}
		return text("done"), nil
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.base = "http://" + ln.Addr().String()
	logger := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeHTTPListener(ctx, ln, s, cfg, logger) }()
	t.Cleanup(func() {
		f.releaseBlocked()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeHTTPListener returned %v after cancel, want nil", err)
		}
	})
	return f
}

func newHTTPTestClient(ctx context.Context, url string, opts ...transport.StreamableHTTPCOption) (*client.Client, error) {
	c, err := client.NewStreamableHttpClient(url, opts...)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	var req mcplib.InitializeRequest
	req.Params.ProtocolVersion = mcplib.LATEST_PROTOCOL_VERSION
	req.Params.ClientInfo = mcplib.Implementation{Name: "http-test", Version: "0"}
	if _, err := c.Initialize(ctx, req); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// httpCallerVia connects with mcp-go's client and returns what "whoami" saw
// as its caller.
func httpCallerVia(t *testing.T, url string, opts ...transport.StreamableHTTPCOption) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := newHTTPTestClient(ctx, url, opts...)
	if err != nil {
		t.Fatalf("initialize via %s: %v", url, err)
	}
	defer func() { _ = c.Close() }()
	return httpCallTool(ctx, t, c, "whoami")
}

func httpCallTool(ctx context.Context, t *testing.T, c *client.Client, name string) string {
	t.Helper()
	var req mcplib.CallToolRequest
	req.Params.Name = name
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("call %s: unexpected result %+v", name, res)
	}
	tc, ok := res.Content[0].(mcplib.TextContent)
	if !ok {
		t.Fatalf("call %s: content %T, want text", name, res.Content[0])
	}
	return tc.Text
}

func httpHeaderOpt(k, v string) transport.StreamableHTTPCOption {
	return transport.WithHTTPHeaders(map[string]string{k: v})
}

func httpBasicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

type httpResult struct {
	status int
	header http.Header
	body   []byte
}

// httpDo sends one plain request; each header is "Name: value", and
// "Host: x" sets the Host header.
func httpDo(t *testing.T, method, url string, body io.Reader, headers ...string) httpResult {
	t.Helper()
	got, err := httpTry(method, url, body, headers...)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// httpTry is httpDo for goroutines other than the test's, which must not
// call t.Fatal.
func httpTry(method, url string, body io.Reader, headers ...string) (httpResult, error) {
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return httpResult{}, err
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	return httpSendErr(req)
}

func httpSend(t *testing.T, req *http.Request) httpResult {
	t.Helper()
	got, err := httpSendErr(req)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func httpSendErr(req *http.Request) (httpResult, error) {
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return httpResult{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpResult{}, fmt.Errorf("%s %s: read body: %w", req.Method, req.URL, err)
	}
	return httpResult{resp.StatusCode, resp.Header, body}, nil
}

// httpToolCallBody is a legacy-protocol tools/call: no initialize or headers
// needed on a stateless server, which keeps the plain-HTTP tests short.
func httpToolCallBody(name string) io.Reader {
	return strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + name + `","arguments":{}}}`)
}

var httpPostHeaders = []string{"Content-Type: application/json", "Accept: application/json, text/event-stream"}

// wantHTTPError checks status, JSON content type and the error envelope.
func wantHTTPError(t *testing.T, got httpResult, status int, code string, retryable bool) httpErrorDetail {
	t.Helper()
	if got.status != status {
		t.Fatalf("status %d, want %d; body %s", got.status, status, got.body)
	}
	if ct := got.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var env httpErrorEnvelope
	dec := json.NewDecoder(bytes.NewReader(got.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		t.Fatalf("body %s is not an error envelope: %v", got.body, err)
	}
	if env.Error.Code != code || env.Error.Retryable != retryable || env.Error.Message == "" {
		t.Errorf("envelope %+v, want code %s retryable %v and a message", env.Error, code, retryable)
	}
	return env.Error
}

const httpUnauthorizedBody = `{"error":{"code":"UNAUTHORIZED","message":"Authentication is required for this resource",` +
	`"retryable":false,"action":"provide a Bearer token, Basic credentials, or X-Probing-Token"}}`

func TestHTTPAuthAccepted(t *testing.T) {
	const token = "s3cret-token"
	cases := []struct {
		name     string
		env      map[string]string
		header   transport.StreamableHTTPCOption
		wantFrom string
	}{
		{"bearer", nil, httpHeaderOpt("Authorization", "Bearer "+token), "http:bearer@127.0.0.1:"},
		{"bearer scheme is case-insensitive", nil, httpHeaderOpt("Authorization", "bearer "+token), "http:bearer@127.0.0.1:"},
		{"basic default user", nil, httpHeaderOpt("Authorization", httpBasicAuth("admin", token)), "http:basic:admin@127.0.0.1:"},
		{"basic configured user", map[string]string{"PROBING_AUTH_USERNAME": "ops"},
			httpHeaderOpt("Authorization", httpBasicAuth("ops", token)), "http:basic:ops@127.0.0.1:"},
		{"x-probing-token", nil, httpHeaderOpt("X-Probing-Token", token), "http:x-probing-token@127.0.0.1:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"PROBING_AUTH_TOKEN": " " + token + "\n"} // trimmed
			maps.Copy(env, tc.env)
			cfg, err := HTTPConfigFromEnv("127.0.0.1:0", func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			f := startHTTPFixture(t, cfg)
			if got := httpCallerVia(t, f.base+"/mcp", tc.header); !strings.HasPrefix(got, tc.wantFrom) {
				t.Errorf("caller %q, want prefix %q", got, tc.wantFrom)
			}
		})
	}
}

func TestHTTPAuthRejected(t *testing.T) {
	const token = "s3cret-token"
	f := startHTTPFixture(t, HTTPConfig{AuthToken: token, AuthUsername: "ops"})
	cases := []struct{ name, header string }{
		{"no credentials", ""},
		{"wrong bearer", "Authorization: Bearer wrong"},
		{"bearer prefix of token", "Authorization: Bearer s3cret"},
		{"basic default user when another is configured", "Authorization: " + httpBasicAuth("admin", token)},
		{"basic unknown user", "Authorization: " + httpBasicAuth("root", token)},
		{"basic wrong password", "Authorization: " + httpBasicAuth("ops", "wrong")},
		{"wrong x-probing-token", "X-Probing-Token: wrong"},
		{"token without a scheme", "Authorization: " + token},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			headers := append([]string{}, httpPostHeaders...)
			if tc.header != "" {
				headers = append(headers, tc.header)
			}
			got := httpDo(t, http.MethodPost, f.base+"/mcp", httpToolCallBody("whoami"), headers...)
			wantHTTPError(t, got, http.StatusUnauthorized, "UNAUTHORIZED", false)
			if body := strings.TrimSpace(string(got.body)); body != httpUnauthorizedBody {
				t.Errorf("body\n%s\nwant\n%s", body, httpUnauthorizedBody)
			}
			if wa := got.header.Get("WWW-Authenticate"); wa != `Basic realm="Probe Server"` {
				t.Errorf("WWW-Authenticate %q", wa)
			}
		})
	}

	// mcp-go's own client sees the 401 as an authorization error.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := newHTTPTestClient(ctx, f.base+"/mcp", httpHeaderOpt("Authorization", "Bearer wrong"))
	if authErr := (*transport.AuthorizationRequiredError)(nil); !errors.As(err, &authErr) {
		t.Errorf("client error %v, want AuthorizationRequiredError", err)
	}
}

func TestHTTPAuthRealm(t *testing.T) {
	cfg, err := HTTPConfigFromEnv("127.0.0.1:0", func(k string) string {
		return map[string]string{"PROBING_AUTH_TOKEN": "t", "PROBING_AUTH_REALM": "Training Job"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	f := startHTTPFixture(t, cfg)
	got := httpDo(t, http.MethodGet, f.base+"/nowhere", nil)
	wantHTTPError(t, got, http.StatusUnauthorized, "UNAUTHORIZED", false)
	if wa := got.header.Get("WWW-Authenticate"); wa != `Basic realm="Training Job"` {
		t.Errorf("WWW-Authenticate %q", wa)
	}
}

func TestHTTPNoTokenIsOpenOnLoopback(t *testing.T) {
	f := startHTTPFixture(t, HTTPConfig{})
	if got := httpCallerVia(t, f.base+"/mcp"); !strings.HasPrefix(got, "http:anonymous@127.0.0.1:") {
		t.Errorf("caller %q, want http:anonymous@127.0.0.1:...", got)
	}
	// Credentials are ignored rather than rejected when auth is off.
	if got := httpCallerVia(t, f.base+"/mcp", httpHeaderOpt("Authorization", "Bearer whatever")); !strings.HasPrefix(got, "http:anonymous@") {
		t.Errorf("caller %q, want anonymous", got)
	}
}

func TestHTTPRoutesAndBasePath(t *testing.T) {
	const token = "t0k"
	cfg, err := HTTPConfigFromEnv("127.0.0.1:0", func(k string) string {
		return map[string]string{"PROBING_AUTH_TOKEN": token, "PROBING_BASE_PATH": "probing/"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Version = "1.2.3"
	f := startHTTPFixture(t, cfg)

	// Public, no credentials needed.
	got := httpDo(t, http.MethodGet, f.base+"/probing/health", nil)
	if got.status != http.StatusOK || strings.TrimSpace(string(got.body)) != `{"status":"ok","version":"1.2.3"}` {
		t.Errorf("health: %d %s", got.status, got.body)
	}
	got = httpDo(t, http.MethodGet, f.base+"/probing/live", nil)
	if got.status != http.StatusOK || strings.TrimSpace(string(got.body)) != `{"status":"alive"}` {
		t.Errorf("live: %d %s", got.status, got.body)
	}
	if got.header.Get("Content-Type") != "application/json" {
		t.Errorf("live Content-Type %q", got.header.Get("Content-Type"))
	}
	wantHTTPError(t, httpDo(t, http.MethodPost, f.base+"/probing/health", nil), http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", false)

	// MCP lives under the base path, and only there.
	bearer := "Authorization: Bearer " + token
	if caller := httpCallerVia(t, f.base+"/probing/mcp", httpHeaderOpt("Authorization", "Bearer "+token)); !strings.HasPrefix(caller, "http:bearer@") {
		t.Errorf("caller %q", caller)
	}
	for _, p := range []string{"/mcp", "/health", "/live", "/probing/mcp/", "/probing/other", "/"} {
		got := httpDo(t, http.MethodPost, f.base+p, httpToolCallBody("whoami"), append(httpPostHeaders, bearer)...)
		wantHTTPError(t, got, http.StatusNotFound, "NOT_FOUND", false)
	}
	// Anything not public needs credentials, even a path that does not exist.
	wantHTTPError(t, httpDo(t, http.MethodGet, f.base+"/health", nil), http.StatusUnauthorized, "UNAUTHORIZED", false)
	wantHTTPError(t, httpDo(t, http.MethodPut, f.base+"/probing/mcp", nil, bearer), http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", false)
}

func TestHTTPBodyLimit(t *testing.T) {
	const token = "t0k"
	f := startHTTPFixture(t, HTTPConfig{AuthToken: token, MaxRequestBytes: 1024})
	big := bytes.Repeat([]byte("x"), 2048)

	// A declared length over the limit is refused before anything else,
	// credentials included.
	got := httpDo(t, http.MethodPost, f.base+"/mcp", bytes.NewReader(big), httpPostHeaders...)
	if e := wantHTTPError(t, got, http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE", false); e.Message != "request body exceeds 1024 bytes" {
		t.Errorf("message %q", e.Message)
	}

	// A chunked body has no declared length: it is cut off while being read.
	req, err := http.NewRequest(http.MethodPost, f.base+"/mcp", io.MultiReader(bytes.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1 // unknown: sent chunked
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	wantHTTPError(t, httpSend(t, req), http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE", false)

	// A body within the limit still works, chunked or not.
	req, err = http.NewRequest(http.MethodPost, f.base+"/mcp", io.MultiReader(httpToolCallBody("whoami")))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	if got := httpSend(t, req); got.status != http.StatusOK || !bytes.Contains(got.body, []byte("http:bearer@")) {
		t.Errorf("small chunked body: %d %s", got.status, got.body)
	}
}

func TestHTTPInFlightLimit(t *testing.T) {
	f := startHTTPFixture(t, HTTPConfig{MaxInFlight: 2})

	// Hold both slots with tool calls that block until released. No other
	// request has been made yet, so no earlier request can still be
	// releasing its slot.
	var wg sync.WaitGroup
	results := make(chan httpResult, 2)
	failed := make(chan error, 2)
	for range 2 {
		wg.Go(func() {
			got, err := httpTry(http.MethodPost, f.base+"/mcp", httpToolCallBody("block"), httpPostHeaders...)
			if err != nil {
				failed <- err
			}
			results <- got
		})
	}
	for range 2 {
		select {
		case <-f.entered:
		case err := <-failed:
			t.Fatalf("blocking call failed before holding a slot: %v", err)
		}
	}

	got := httpDo(t, http.MethodGet, f.base+"/health", nil)
	e := wantHTTPError(t, got, http.StatusServiceUnavailable, "SERVICE_UNAVAILABLE", true)
	if e.Message != "server request concurrency limit reached" {
		t.Errorf("message %q", e.Message)
	}
	if got.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}

	f.releaseBlocked()
	wg.Wait()
	close(results)
	for r := range results {
		if r.status != http.StatusOK || !bytes.Contains(r.body, []byte("released")) {
			t.Errorf("blocked call: %d %s", r.status, r.body)
		}
	}

	// The slots come back once the handlers have returned, which may be a
	// moment after their clients got the responses.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got := httpDo(t, http.MethodGet, f.base+"/health", nil); got.status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("slots were not released")
		}
	}
}

func TestHTTPDeadline(t *testing.T) {
	f := startHTTPFixture(t, HTTPConfig{Timeout: time.Second})
	got := httpDo(t, http.MethodPost, f.base+"/mcp", httpToolCallBody("sleep"), httpPostHeaders...)
	e := wantHTTPError(t, got, http.StatusGatewayTimeout, "GATEWAY_TIMEOUT", true)
	if e.Message != "request exceeded 1s deadline" {
		t.Errorf("message %q", e.Message)
	}
	// The server is fine afterwards.
	if got := httpDo(t, http.MethodGet, f.base+"/live", nil); got.status != http.StatusOK {
		t.Errorf("live after a 504: %d %s", got.status, got.body)
	}
}

// The deadline writer on its own, with plain handlers: the 504 replaces a
// response not yet started, leaves a started one alone, and the handler's
// late writes and headers never reach the client.
func TestHTTPDeadlineWriter(t *testing.T) {
	lateWrite := make(chan error, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("stream") != "" {
			_, _ = io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		w.Header().Set("X-Handler", "set before the deadline")
		<-r.Context().Done()
		_, err := io.WriteString(w, "late")
		lateWrite <- err
	})
	ts := httptest.NewServer(NewHTTPHandler(mux, HTTPConfig{Timeout: 100 * time.Millisecond}, nil))
	defer ts.Close()
	// The streaming handler must get its first write in before the deadline;
	// a roomier one keeps that true on a loaded machine.
	roomy := httptest.NewServer(NewHTTPHandler(mux, HTTPConfig{Timeout: time.Second}, nil))
	defer roomy.Close()

	got := httpDo(t, http.MethodPost, ts.URL+"/mcp", strings.NewReader("{}"))
	if e := wantHTTPError(t, got, http.StatusGatewayTimeout, "GATEWAY_TIMEOUT", true); e.Message != "request exceeded 0.1s deadline" {
		t.Errorf("message %q", e.Message)
	}
	if got.header.Get("X-Handler") != "" {
		t.Error("the 504 carries a header the handler set")
	}
	if err := <-lateWrite; !errors.Is(err, http.ErrHandlerTimeout) {
		t.Errorf("late write: %v, want http.ErrHandlerTimeout", err)
	}

	got = httpDo(t, http.MethodPost, roomy.URL+"/mcp?stream=1", strings.NewReader("{}"))
	if got.status != http.StatusOK || string(got.body) != "partial" {
		t.Errorf("started response: %d %q, want 200 partial", got.status, got.body)
	}
}

func TestNewHTTPHandlerBasePath(t *testing.T) {
	h := NewHTTPHandler(http.NotFoundHandler(), HTTPConfig{BasePath: "probing/"}, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/probing/live", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("hand-built base path not normalised: %d %s", rec.Code, rec.Body)
	}
	defer func() {
		if recover() == nil {
			t.Error("NewHTTPHandler accepted an invalid base path")
		}
	}()
	NewHTTPHandler(http.NotFoundHandler(), HTTPConfig{BasePath: "/a b"}, nil)
}

// The deadline middleware wraps the ResponseWriter; mcp-go must still see a
// Flusher, or it answers plain JSON and drops notifications instead of
// streaming them. The text/event-stream content type is the proof: mcp-go
// only upgrades when it can stream. Whether the progress event itself makes
// it is up to a race inside mcp-go v1.2.1 (its forwarder goroutine can take
// a notification off the channel and then drop it because the tool already
// returned), so the test does not insist on it.
func TestHTTPResponsesStillStream(t *testing.T) {
	f := startHTTPFixture(t, HTTPConfig{})
	got := httpDo(t, http.MethodPost, f.base+"/mcp", httpToolCallBody("progress"), httpPostHeaders...)
	if got.status != http.StatusOK || got.header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("progress: %d %q %s", got.status, got.header.Get("Content-Type"), got.body)
	}
	if !bytes.Contains(got.body, []byte(`"text":"done"`)) {
		t.Errorf("progress body %s", got.body)
	}
}

func TestHTTPOriginAndHost(t *testing.T) {
	t.Run("no token", func(t *testing.T) {
		f := startHTTPFixture(t, HTTPConfig{AllowedOrigins: []string{"https://UI.example.com:443/"}})
		port := strings.TrimPrefix(f.base, "http://127.0.0.1")
		cases := []struct {
			headers []string
			status  int
		}{
			{nil, http.StatusOK},
			{[]string{"Origin: " + f.base}, http.StatusOK},
			{[]string{"Origin: http://localhost:3000"}, http.StatusOK},
			{[]string{"Origin: https://[::1]"}, http.StatusOK},
			{[]string{"Origin: https://ui.example.com"}, http.StatusOK},
			{[]string{"Host: localhost" + port}, http.StatusOK},
			{[]string{"Origin: http://evil.example"}, http.StatusForbidden},
			{[]string{"Origin: null"}, http.StatusForbidden},
			{[]string{"Origin: http://ui.example.com"}, http.StatusForbidden}, // scheme differs
			// DNS rebinding: the attacker's name resolved to 127.0.0.1, so
			// the request looks same-origin; only the Host gives it away.
			{[]string{"Host: evil.example" + port, "Origin: http://evil.example" + port}, http.StatusForbidden},
			{[]string{"Host: evil.example" + port}, http.StatusForbidden},
			// The host of an allowed origin may be used, e.g. by a proxy.
			{[]string{"Host: ui.example.com", "Origin: https://ui.example.com"}, http.StatusOK},
		}
		for _, tc := range cases {
			got := httpDo(t, http.MethodGet, f.base+"/health", nil, tc.headers...)
			if tc.status == http.StatusOK && got.status != http.StatusOK {
				t.Errorf("%q: %d %s, want 200", tc.headers, got.status, got.body)
			}
			if tc.status == http.StatusForbidden {
				wantHTTPError(t, got, http.StatusForbidden, "FORBIDDEN", false)
			}
		}
	})

	t.Run("token", func(t *testing.T) {
		const token = "t0k"
		f := startHTTPFixture(t, HTTPConfig{AuthToken: token})
		port := strings.TrimPrefix(f.base, "http://127.0.0.1")
		host := "probe-node.example" + port

		// A server with a token may be reached by any name, even over a
		// loopback connection (a hostname mapped to 127.0.1.1, a proxy on
		// the same host): mcp-go's own localhost check would refuse this.
		caller := httpCallerVia(t, f.base+"/mcp",
			httpHeaderOpt("Authorization", "Bearer "+token), transport.WithStreamableHTTPHost(host))
		if !strings.HasPrefix(caller, "http:bearer@") {
			t.Errorf("caller %q", caller)
		}
		// Same origin as that name is fine; another origin is not, even
		// with the token.
		got := httpDo(t, http.MethodGet, f.base+"/health", nil, "Host: "+host, "Origin: https://"+host)
		if got.status != http.StatusOK {
			t.Errorf("same origin: %d %s", got.status, got.body)
		}
		got = httpDo(t, http.MethodPost, f.base+"/mcp", httpToolCallBody("whoami"),
			append(httpPostHeaders, "Host: "+host, "Origin: http://other.example"+port, "Authorization: Bearer "+token)...)
		wantHTTPError(t, got, http.StatusForbidden, "FORBIDDEN", false)
	})
}

func TestServeHTTPListenerLogsAndRefuses(t *testing.T) {
	f := startHTTPFixture(t, HTTPConfig{})
	addr := strings.TrimPrefix(f.base, "http://")
	// The line is logged before serving starts, so once a request has been
	// answered it must be there.
	httpDo(t, http.MethodGet, f.base+"/live", nil)
	if logs := f.logs.String(); !strings.Contains(logs, "addr="+addr) {
		t.Errorf("logs do not name the bound address %s:\n%s", addr, logs)
	}

	ln := &httpFakeListener{addr: &net.TCPAddr{IP: net.IPv4zero, Port: 8080}}
	s := server.NewMCPServer("t", "0")
	err := ServeHTTPListener(context.Background(), ln, s, HTTPConfig{}, nil)
	if err == nil || !strings.Contains(err.Error(), "PROBING_AUTH_TOKEN") {
		t.Errorf("wildcard listener without token: %v, want a refusal naming PROBING_AUTH_TOKEN", err)
	}
	if !ln.closed {
		t.Error("refused listener was not closed")
	}
	if err := ServeHTTP(context.Background(), s, HTTPConfig{Addr: ":0"}, nil); err == nil {
		t.Error("ServeHTTP on :0 without token: want an error")
	}
	if err := ServeHTTP(context.Background(), s, HTTPConfig{Addr: "127.0.0.1:0", BasePath: "/a?b"}, nil); err == nil {
		t.Error("ServeHTTP with an invalid base path: want an error")
	}
}

type httpFakeListener struct {
	addr   net.Addr
	closed bool
}

func (l *httpFakeListener) Accept() (net.Conn, error) { return nil, errors.New("fake") }
func (l *httpFakeListener) Close() error              { l.closed = true; return nil }
func (l *httpFakeListener) Addr() net.Addr            { return l.addr }

func TestCheckListenAddr(t *testing.T) {
	cases := []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:8080", "", true},
		{"127.1.2.3:0", "", true},
		{"localhost:8080", "", true},
		{"LocalHost:8080", "", true},
		{"[::1]:8080", "", true},
		{"[::ffff:127.0.0.1]:8080", "", true},
		{":8080", "", false},
		{"0.0.0.0:8080", "", false},
		{"[::]:8080", "", false},
		{"10.0.0.5:8080", "", false},
		{"node1:8080", "", false},
		{"localhost.evil.example:8080", "", false},
		{"0.0.0.0:8080", "tok", true},
		{":8080", "tok", true},
		{"node1:8080", "tok", true},
		{"127.0.0.1", "", false}, // no port
		{"nonsense", "tok", false},
	}
	for _, tc := range cases {
		err := CheckListenAddr(tc.addr, tc.token)
		if (err == nil) != tc.ok {
			t.Errorf("CheckListenAddr(%q, %q) = %v, want ok=%v", tc.addr, tc.token, err, tc.ok)
		}
	}
	err := CheckListenAddr("0.0.0.0:9000", "")
	if err == nil || !strings.Contains(err.Error(), "PROBING_AUTH_TOKEN") || !strings.Contains(err.Error(), "127.0.0.1:9000") {
		t.Errorf("message %v should name PROBING_AUTH_TOKEN and 127.0.0.1:9000", err)
	}
}

func TestHTTPConfigFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	cfg, err := HTTPConfigFromEnv("127.0.0.1:8080", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := HTTPConfig{Addr: "127.0.0.1:8080", AuthUsername: "admin", AuthRealm: "Probe Server",
		MaxRequestBytes: 4 << 20, Timeout: 30 * time.Second, MaxInFlight: 128}
	if cfg.Addr != want.Addr || cfg.BasePath != "" || cfg.AuthToken != "" || cfg.AuthUsername != want.AuthUsername ||
		cfg.AuthRealm != want.AuthRealm || cfg.MaxRequestBytes != want.MaxRequestBytes || cfg.Timeout != want.Timeout ||
		cfg.MaxInFlight != want.MaxInFlight || cfg.AllowedOrigins != nil {
		t.Errorf("defaults %+v, want %+v", cfg, want)
	}

	cfg, err = HTTPConfigFromEnv("x", env(map[string]string{
		"PROBING_BASE_PATH":           "/a//b/",
		"PROBING_AUTH_TOKEN":          "  tok \n",
		"PROBING_AUTH_USERNAME":       "ops",
		"PROBING_AUTH_REALM":          "R",
		"PROBING_MAX_REQUEST_SIZE":    "8MiB",
		"PROBING_SERVER_TIMEOUT_SECS": "5",
		"PROBING_MAX_CONNECTIONS":     "7",
		"PROBING_ALLOWED_ORIGINS":     "https://A.example, http://b.example:8080/ ,",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BasePath != "/a/b" || cfg.AuthToken != "tok" || cfg.AuthUsername != "ops" || cfg.AuthRealm != "R" ||
		cfg.MaxRequestBytes != 8<<20 || cfg.Timeout != 5*time.Second || cfg.MaxInFlight != 7 ||
		strings.Join(cfg.AllowedOrigins, " ") != "https://a.example http://b.example:8080" {
		t.Errorf("parsed %+v", cfg)
	}

	for _, tc := range []struct{ in, want string }{{"", ""}, {"/", ""}, {"probing", "/probing"}, {"/probing/", "/probing"}, {"/a/../b", "/b"}} {
		cfg, err := HTTPConfigFromEnv("x", env(map[string]string{"PROBING_BASE_PATH": tc.in}))
		if err != nil || cfg.BasePath != tc.want {
			t.Errorf("PROBING_BASE_PATH=%q: %q, %v; want %q", tc.in, cfg.BasePath, err, tc.want)
		}
	}
	for in, want := range map[string]int64{"1": 1, "4194304": 4 << 20, "512KB": 512e3, "512kib": 512 << 10,
		"8MB": 8e6, "8 MiB": 8 << 20, "8M": 8 << 20, "1G": 1 << 30, "100b": 100} {
		cfg, err := HTTPConfigFromEnv("x", env(map[string]string{"PROBING_MAX_REQUEST_SIZE": in}))
		if err != nil || cfg.MaxRequestBytes != want {
			t.Errorf("PROBING_MAX_REQUEST_SIZE=%q: %d, %v; want %d", in, cfg.MaxRequestBytes, err, want)
		}
	}

	bad := []struct{ name, value, want string }{
		{"PROBING_BASE_PATH", "/my path", "URL path prefix"},
		{"PROBING_BASE_PATH", "/p?x=1", "URL path prefix"},
		{"PROBING_BASE_PATH", "/p#frag", "URL path prefix"},
		{"PROBING_BASE_PATH", "/{id}", "URL path prefix"},
		{"PROBING_MAX_REQUEST_SIZE", "abc", "positive number of bytes"},
		{"PROBING_MAX_REQUEST_SIZE", "0", "positive number of bytes"},
		{"PROBING_MAX_REQUEST_SIZE", "-5", "positive number of bytes"},
		{"PROBING_MAX_REQUEST_SIZE", "8XB", "positive number of bytes"},
		{"PROBING_MAX_REQUEST_SIZE", "1.5MB", "positive number of bytes"},
		{"PROBING_MAX_REQUEST_SIZE", "99999999999999999999", "positive number of bytes"},
		{"PROBING_MAX_REQUEST_SIZE", "9999999999999GiB", "positive number of bytes"},
		{"PROBING_SERVER_TIMEOUT_SECS", "abc", "positive integer number of seconds"},
		{"PROBING_SERVER_TIMEOUT_SECS", "0", "positive integer number of seconds"},
		{"PROBING_SERVER_TIMEOUT_SECS", "1.5", "positive integer number of seconds"},
		{"PROBING_SERVER_TIMEOUT_SECS", "99999999999", "positive integer number of seconds"},
		{"PROBING_MAX_CONNECTIONS", "-1", "positive integer"},
		{"PROBING_MAX_CONNECTIONS", "many", "positive integer"},
		{"PROBING_ALLOWED_ORIGINS", "example.com", "origins like"},
		{"PROBING_ALLOWED_ORIGINS", "https://ok.example,ftp://x", "origins like"},
		{"PROBING_ALLOWED_ORIGINS", "https://x.example/path", "origins like"},
	}
	for _, tc := range bad {
		_, err := HTTPConfigFromEnv("x", env(map[string]string{tc.name: tc.value}))
		if err == nil {
			t.Errorf("%s=%q: no error", tc.name, tc.value)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, tc.name+"=") || !strings.Contains(msg, tc.value) || !strings.Contains(msg, tc.want) {
			t.Errorf("%s=%q: error %q should name the variable, the value and %q", tc.name, tc.value, msg, tc.want)
		}
	}
	// The whole message, as an operator sees it.
	_, err = HTTPConfigFromEnv("x", env(map[string]string{"PROBING_SERVER_TIMEOUT_SECS": "abc"}))
	if err == nil || err.Error() != `PROBING_SERVER_TIMEOUT_SECS="abc": want a positive integer number of seconds` {
		t.Errorf("error %v", err)
	}
}
