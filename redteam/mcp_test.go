package redteam

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// A minimal MCP client, as a model's host would be: JSON-RPC 2.0 over the
// server's stdin/stdout (one message a line), or over Streamable HTTP.

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type rpcMessage struct {
	ID     *json.RawMessage `json:"id,omitempty"`
	Method string           `json:"method,omitempty"`
	Result json.RawMessage  `json:"result,omitempty"`
	Error  *rpcError        `json:"error,omitempty"`
}

// toolResult is a tools/call answer: its text content, whether it is an
// error, its structured content, and how long the call took.
type toolResult struct {
	Text       string
	IsError    bool
	Structured json.RawMessage
	Took       time.Duration
}

func decodeToolResult(t *testing.T, m rpcMessage) toolResult {
	t.Helper()
	if m.Error != nil {
		t.Fatalf("tools/call: JSON-RPC error %d: %s", m.Error.Code, m.Error.Message)
	}
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError    bool            `json:"isError"`
		Structured json.RawMessage `json:"structuredContent"`
	}
	if err := json.Unmarshal(m.Result, &r); err != nil {
		t.Fatalf("tools/call result %.300s: %v", m.Result, err)
	}
	var text strings.Builder
	for _, c := range r.Content {
		text.WriteString(c.Text)
	}
	return toolResult{Text: text.String(), IsError: r.IsError, Structured: r.Structured}
}

func initParams() map[string]any {
	return map[string]any{"protocolVersion": "2025-03-26", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "probing-mcp-redteam", "version": "0"}}
}

// stdioClient is `probing-mcp serve` spoken to over stdio.
type stdioClient struct {
	t    *testing.T
	p    *proc
	in   io.WriteCloser
	mu   sync.Mutex
	next int
	wait map[string]chan rpcMessage
	gone chan struct{}
}

// serveStdio starts `probing-mcp serve ARGS...` and initializes a session.
func serveStdio(t *testing.T, environ []string, args ...string) *stdioClient {
	t.Helper()
	p := newProc(t, environ, append([]string{"serve"}, args...)...)
	in, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.launch()
	c := &stdioClient{t: t, p: p, in: in, wait: map[string]chan rpcMessage{}, gone: make(chan struct{})}
	go c.read(out)
	if m := c.rpc("initialize", initParams(), startTime); m.Error != nil {
		t.Fatalf("initialize: %s", m.Error.Message)
	}
	c.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	return c
}

func (c *stdioClient) read(out io.Reader) {
	defer close(c.gone)
	dec := json.NewDecoder(bufio.NewReaderSize(out, 1<<20))
	for {
		var m rpcMessage
		if err := dec.Decode(&m); err != nil {
			return
		}
		if m.ID == nil || m.Method != "" {
			continue // a notification or a request of the server's
		}
		c.mu.Lock()
		ch := c.wait[string(*m.ID)]
		delete(c.wait, string(*m.ID))
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

func (c *stdioClient) send(msg any) {
	c.t.Helper()
	b, err := json.Marshal(msg)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		c.t.Fatalf("writing to the server: %v; stderr:\n%s", err, tail(c.p.stderr.String(), 3000))
	}
}

// rpc sends one request and waits at most limit for its answer.
func (c *stdioClient) rpc(method string, params any, limit time.Duration) rpcMessage {
	c.t.Helper()
	c.mu.Lock()
	c.next++
	id := fmt.Sprint(c.next)
	ch := make(chan rpcMessage, 1)
	c.wait[id] = ch
	c.mu.Unlock()
	c.send(map[string]any{"jsonrpc": "2.0", "id": c.next, "method": method, "params": params})
	select {
	case m := <-ch:
		return m
	case <-c.gone:
		c.t.Fatalf("%s: the server's stdout closed before it answered; stderr:\n%s", method, tail(c.p.stderr.String(), 3000))
	case <-time.After(limit):
		c.p.cmd.Process.Kill()
		c.t.Fatalf("%s: no answer within %s (the server was killed); stderr:\n%s", method, limit, tail(c.p.stderr.String(), 3000))
	}
	return rpcMessage{}
}

// call calls a tool; limit bounds the call (past it the test fails).
func (c *stdioClient) call(name string, args map[string]any, limit time.Duration) toolResult {
	c.t.Helper()
	t0 := time.Now()
	m := c.rpc("tools/call", map[string]any{"name": name, "arguments": args}, limit)
	r := decodeToolResult(c.t, m)
	r.Took = time.Since(t0)
	return r
}

// close ends the session (EOF on stdin) and waits for the server to exit
// 0; its peak memory, read just before, is the whole session's.
func (c *stdioClient) close() {
	c.t.Helper()
	c.p.sample()
	c.in.Close()
	if code := c.p.wait(startTime); code != 0 {
		c.t.Errorf("serve exited %d after the session; stderr:\n%s", code, tail(c.p.stderr.String(), 3000))
	}
}

// httpCall is one JSON-RPC request to a Streamable HTTP MCP endpoint
// (stateless: no session to open first); the answer may come as JSON or
// as a server-sent event stream.
func httpCall(t *testing.T, url, token, method string, params any, limit time.Duration) rpcMessage {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-03-26")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := (&http.Client{Timeout: limit}).Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("%s: HTTP %d %v: %.500s", method, res.StatusCode, err, b)
	}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(string(b), "\n") {
			data, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "data:")
			if !ok {
				continue
			}
			var m rpcMessage
			if json.Unmarshal([]byte(strings.TrimSpace(data)), &m) == nil && m.ID != nil && m.Method == "" {
				return m
			}
		}
		t.Fatalf("%s: no answer in the event stream: %.500s", method, b)
	}
	var m rpcMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v: %.500s", method, err, b)
	}
	return m
}

// httpTool calls a tool over Streamable HTTP.
func httpTool(t *testing.T, url, token, name string, args map[string]any, limit time.Duration) toolResult {
	t.Helper()
	t0 := time.Now()
	r := decodeToolResult(t, httpCall(t, url, token, "tools/call", map[string]any{"name": name, "arguments": args}, limit))
	r.Took = time.Since(t0)
	return r
}
