package mcp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/tools"
)

// httpRawTimeout bounds a whole raw exchange. It is no timing assertion: a
// refusal comes back at once, and an exchange that needs this long is one
// the server answers only when the client sends the body it never will.
const httpRawTimeout = 30 * time.Second

// httpRawPromisedBody sends a request head that promises a body (Content-
// Length) and never sends the body, as a slow or hostile client does. A
// length under 256 KiB is the one that hangs net/http's own drain. It
// returns the response, and whether the server then closed the connection
// (it must: the unread body makes the connection unusable).
func httpRawPromisedBody(t *testing.T, base, method, path string, length int, headers ...string) (*http.Response, []byte, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }() // also frees a server goroutine that would wait for the body
	_ = conn.SetDeadline(time.Now().Add(httpRawTimeout))
	head := method + " " + path + " HTTP/1.1\r\nHost: " + strings.TrimPrefix(base, "http://") + "\r\n" +
		"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
		"Content-Length: " + strconv.Itoa(length) + "\r\n"
	for _, h := range headers {
		head += h + "\r\n"
	}
	if _, err := io.WriteString(conn, head+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s %s with a promised body that never comes: no response (%v)", method, path, err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: read the response body: %v", method, path, err)
	}
	// After the response, the server must hang up rather than wait for
	// the body: the next read sees EOF (or a reset), not the deadline.
	_, err = br.ReadByte()
	var ne net.Error
	closed := err != nil && !(errors.As(err, &ne) && ne.Timeout())
	return resp, body, closed
}

func wantRawRefusal(t *testing.T, resp *http.Response, body []byte, closed bool, status int) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, status, body)
	}
	if !resp.Close {
		t.Errorf("refusal of a request whose body was not read has no Connection: close (headers %v)", resp.Header)
	}
	if !closed {
		t.Error("the server kept the connection open after refusing a request whose body it did not read")
	}
}

// TestHTTPRefusalsDoNotWaitForTheBody: every refusal answers a client that
// promised a body and never sent it, and then closes the connection. The
// deadline is an hour away, so an answer only "within the deadline" would
// not do: net/http itself tries to read up to 256 KiB of an unread body
// before it writes a response, unless the response closes the connection.
func TestHTTPRefusalsDoNotWaitForTheBody(t *testing.T) {
	const token = "t0k"
	f := startHTTPFixture(t, HTTPConfig{AuthToken: token, MaxRequestBytes: 1024, Timeout: time.Hour})
	bearer := "Authorization: Bearer " + token
	cases := []struct {
		name, method, path string
		length             int
		headers            []string
		status             int
	}{
		{"413 declared length", http.MethodPost, "/mcp", 2048, []string{bearer}, http.StatusRequestEntityTooLarge},
		{"401 no credentials", http.MethodPost, "/mcp", 500, nil, http.StatusUnauthorized},
		{"403 origin", http.MethodPost, "/mcp", 500, []string{bearer, "Origin: http://evil.example"}, http.StatusForbidden},
		{"404 no route", http.MethodPost, "/nowhere", 500, []string{bearer}, http.StatusNotFound},
		{"405 ours", http.MethodPut, "/mcp", 500, []string{bearer}, http.StatusMethodNotAllowed},
		{"405 public path", http.MethodPost, "/health", 500, nil, http.StatusMethodNotAllowed},
		// mcp-go's own answer (streaming is disabled), not our envelope.
		{"405 mcp-go GET", http.MethodGet, "/mcp", 500, []string{bearer}, http.StatusMethodNotAllowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, body, closed := httpRawPromisedBody(t, f.base, tc.method, tc.path, tc.length, tc.headers...)
			wantRawRefusal(t, resp, body, closed, tc.status)
		})
	}
}

// TestHTTPInFlightRefusalDoesNotWaitForTheBody is the reported hole: with
// every slot taken, a request whose body has not arrived still gets its
// 503 at once, and its connection is closed.
func TestHTTPInFlightRefusalDoesNotWaitForTheBody(t *testing.T) {
	f := startHTTPFixture(t, HTTPConfig{MaxInFlight: 1, Timeout: time.Hour})
	failed := make(chan error, 1)
	go func() {
		if _, err := httpTry(http.MethodPost, f.base+"/mcp", httpToolCallBody("block"), httpPostHeaders...); err != nil {
			failed <- err
		}
	}()
	select {
	case <-f.entered:
	case err := <-failed:
		t.Fatalf("blocking call failed before holding the slot: %v", err)
	}
	resp, body, closed := httpRawPromisedBody(t, f.base, http.MethodPost, "/mcp", 500)
	wantRawRefusal(t, resp, body, closed, http.StatusServiceUnavailable)
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
}

// TestHTTPDeadlineWhileTheBodyNeverComes: the handler is stuck reading a
// body that never arrives; the deadline answers 504 and closes.
func TestHTTPDeadlineWhileTheBodyNeverComes(t *testing.T) {
	f := startHTTPFixture(t, HTTPConfig{Timeout: time.Second})
	resp, body, closed := httpRawPromisedBody(t, f.base, http.MethodPost, "/mcp", 500)
	wantRawRefusal(t, resp, body, closed, http.StatusGatewayTimeout)
}

// TestHTTPDeadlineCancelsTheToolHandler: the 504 is not only an answer,
// it stops the work. The tool handler, behind the real server's whole chain
// (registry, audit wrapper, call logging, mcp-go's streamable server), sees
// its context end with the HTTP deadline.
func TestHTTPDeadlineCancelsTheToolHandler(t *testing.T) {
	observed := make(chan error, 1)
	tool := mcplib.NewTool("ctx_probe", mcplib.WithDescription("waits for its context to end"),
		mcplib.WithReadOnlyHintAnnotation(false), mcplib.WithDestructiveHintAnnotation(false),
		mcplib.WithIdempotentHintAnnotation(true), mcplib.WithOpenWorldHintAnnotation(false))
	probe := func(ctx context.Context, _ mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
		<-ctx.Done()
		observed <- ctx.Err()
		return mcplib.NewToolResultText("stopped"), nil
	}
	s, _ := testServer(t, true, "", tools.Def{ServerTool: server.ServerTool{Tool: tool, Handler: probe}, Write: true})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ServeHTTPListener(ctx, ln, s, HTTPConfig{Timeout: time.Second}, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	got := httpDo(t, http.MethodPost, "http://"+ln.Addr().String()+"/mcp", httpToolCallBody("ctx_probe"), httpPostHeaders...)
	wantHTTPError(t, got, http.StatusGatewayTimeout, "GATEWAY_TIMEOUT", true)
	select {
	case err := <-observed:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the handler's context ended with %v, want the deadline (context.DeadlineExceeded)", err)
		}
	case <-time.After(httpRawTimeout):
		t.Fatal("the tool handler's context did not end after the 504")
	}
}
