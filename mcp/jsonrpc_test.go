package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// countingServer is an MCP server whose one tool, "count", counts its
// calls: a request that must not be processed must leave it unchanged.
func countingServer() (*server.MCPServer, *atomic.Int64) {
	var calls atomic.Int64
	s := server.NewMCPServer("jsonrpc-test", "0", server.WithToolCapabilities(false))
	s.AddTool(mcplib.NewTool("count"), func(context.Context, mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
		calls.Add(1)
		return mcplib.NewToolResultText("counted"), nil
	})
	return s, &calls
}

func countCall(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"count","arguments":{}}}`
}

// Ids that the MCP spec forbids: a request id is a string or an integer,
// never null. Integers beyond ±(2^53-1) cannot be echoed exactly (mcp-go
// reads them as float64), so they are refused too.
var badRequestIDs = []string{`{"a":1}`, `[1]`, `true`, `false`, `null`, `1.5`, `-0.25`, `1e400`, `9007199254740993`, `-9007199254740993`}

var goodRequestIDs = []string{`7`, `0`, `-3`, `"seven"`, `""`, `9007199254740991`}

// jsonrpcInvalid is the answer every bad id must get.
type jsonrpcInvalid struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"` // "null" when null; nil when absent
	Error   struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    string `json:"data"`
	} `json:"error"`
}

func wantInvalidRequest(t *testing.T, what string, body []byte) {
	t.Helper()
	var got jsonrpcInvalid
	if err := json.Unmarshal(bytes.TrimSpace(body), &got); err != nil {
		t.Fatalf("%s: answer %s is not a JSON-RPC error: %v", what, body, err)
	}
	if got.JSONRPC != "2.0" || string(got.ID) != "null" || got.Error.Code != -32600 ||
		got.Error.Message != "Invalid Request" || !strings.Contains(got.Error.Data, "string or an integer") {
		t.Errorf("%s: answer %s, want error -32600 \"Invalid Request\" with id null and a reason naming the rule", what, body)
	}
}

func TestHTTPRequestIDs(t *testing.T) {
	s, calls := countingServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeHTTPListener(ctx, ln, s, HTTPConfig{}, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	url := "http://" + ln.Addr().String() + "/mcp"

	for _, id := range append(badRequestIDs, `{"x":1}`) {
		body := countCall(id)
		if id == `{"x":1}` { // encoding/json matches keys case-insensitively, and so does mcp-go
			body = strings.Replace(body, `"id"`, `"ID"`, 1)
		}
		got := httpDo(t, http.MethodPost, url, strings.NewReader(body), httpPostHeaders...)
		if got.status != http.StatusBadRequest {
			t.Errorf("id %s: status %d, want 400; body %s", id, got.status, got.body)
		}
		wantInvalidRequest(t, "id "+id, got.body)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d requests with invalid ids were processed", n)
	}

	for i, id := range goodRequestIDs {
		got := httpDo(t, http.MethodPost, url, strings.NewReader(countCall(id)), httpPostHeaders...)
		var resp struct {
			ID json.RawMessage `json:"id"`
		}
		if got.status != http.StatusOK || json.Unmarshal(got.body, &resp) != nil || string(resp.ID) != id {
			t.Errorf("id %s: %d %s, want 200 echoing the id", id, got.status, got.body)
		}
		if n := calls.Load(); n != int64(i+1) {
			t.Errorf("id %s: %d calls, want %d", id, n, i+1)
		}
	}

	// A notification has no id and stays fine; a batch is refused whole by
	// mcp-go (MCP has no batches since 2025-06-18) and runs nothing.
	note := httpDo(t, http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), httpPostHeaders...)
	if note.status != http.StatusAccepted {
		t.Errorf("notification: %d %s, want 202", note.status, note.body)
	}
	before := calls.Load()
	batch := httpDo(t, http.MethodPost, url, strings.NewReader("["+countCall("1")+","+countCall(`{"a":1}`)+"]"), httpPostHeaders...)
	if calls.Load() != before || !bytes.Contains(batch.body, []byte(`"error"`)) {
		t.Errorf("batch: %d %s and %d calls, want an error and none", batch.status, batch.body, calls.Load()-before)
	}
}

func TestStdioRequestIDs(t *testing.T) {
	s, calls := countingServer()
	lines := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	}
	for _, id := range badRequestIDs {
		lines = append(lines, countCall(id))
	}
	lines = append(lines, strings.Replace(countCall(`{"x":1}`), `"id"`, `"ID"`, 1))
	for _, id := range goodRequestIDs {
		lines = append(lines, countCall(id))
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The drain timeout is the test's overall bound, not a margin: with
	// every request answered, EOF ends the server at once.
	if err := serveStdio(ctx, s, slog.New(slog.DiscardHandler), strings.NewReader(strings.Join(lines, "\n")+"\n"), &out, time.Minute); err != nil {
		t.Fatal(err)
	}

	invalid := 0
	answered := map[string]bool{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var m struct {
			ID    json.RawMessage `json:"id"`
			Error *struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		if m.Error != nil && m.Error.Code == -32600 {
			wantInvalidRequest(t, "stdio", sc.Bytes())
			invalid++
			continue
		}
		answered[string(m.ID)] = true
	}
	if want := len(badRequestIDs) + 1; invalid != want {
		t.Errorf("%d Invalid Request answers, want %d:\n%s", invalid, want, out.String())
	}
	for _, id := range goodRequestIDs {
		if !answered[id] {
			t.Errorf("no answer for id %s:\n%s", id, out.String())
		}
	}
	if n := calls.Load(); n != int64(len(goodRequestIDs)) {
		t.Errorf("%d calls, want %d (the good ids only)", n, len(goodRequestIDs))
	}
}

func TestInvalidRequestID(t *testing.T) {
	for msg, bad := range map[string]bool{
		`{"jsonrpc":"2.0","id":1.0,"method":"ping"}`:           false, // an integer by value, as JSON Schema's "integer"
		`{"jsonrpc":"2.0","id":1e3,"method":"ping"}`:           false,
		`{"jsonrpc":"2.0","id": "x" ,"method":"ping"}`:         false,
		`{"jsonrpc":"2.0","method":"notifications/cancelled"}`: false,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}`:  false, // a response, not a request
		`[{"jsonrpc":"2.0","id":{},"method":"ping"}]`:          false, // a batch: mcp-go refuses it whole
		`not json`: false,
		`{"jsonrpc":"2.0","id": null ,"method":"ping"}`:    true,
		`{"jsonrpc":"2.0","id":1,"Id":{},"method":"ping"}`: true, // the last duplicate wins, as in mcp-go
		`{"jsonrpc":"2.0","id":-1.5e-3,"method":"ping"}`:   true,
	} {
		if got := invalidRequestID([]byte(msg)) != ""; got != bad {
			t.Errorf("%s: invalid=%v, want %v", msg, got, bad)
		}
	}
}

// FuzzInvalidRequestID: any message is either refused or, when it is a
// request, carries an id mcp-go echoes exactly: a string or an integer in
// ±(2^53-1).
func FuzzInvalidRequestID(f *testing.F) {
	for _, id := range append(append([]string{}, badRequestIDs...), goodRequestIDs...) {
		f.Add([]byte(countCall(id)))
	}
	for _, s := range []string{`[]`, `{}`, `{"method":"x","id":  -0}`, `{"method":"x","ID":1,"id":{}}`, `{"method":null,"id":1e5}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		if invalidRequestID(msg) != "" {
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method json.RawMessage `json:"method"`
		}
		if json.Unmarshal(msg, &m) != nil || m.Method == nil || m.ID == nil {
			return
		}
		var s string
		if json.Unmarshal(m.ID, &s) == nil {
			return
		}
		var n float64
		if err := json.Unmarshal(m.ID, &n); err != nil || n != math.Trunc(n) || math.Abs(n) > maxExactID {
			t.Fatalf("accepted id %s in %q", m.ID, msg)
		}
	})
}

// Invalid prompt arguments are -32602 Invalid params, with the request's
// id and the fix, on both transports; good ones still get the prompt.
func TestPromptArgumentsInvalidParams(t *testing.T) {
	s, _ := testServer(t, false, "")
	get := func(id, args string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"prompts/get","params":{"name":"find_straggler","arguments":` + args + `}}`
	}
	bad := map[string]string{ // arguments → what the message must say
		`{"window":"soon"}`:         `argument window="soon": want a duration such as 10m or 1h`,
		`{"ranks":"3-1"}`:           `argument ranks="3-1"`,
		`{"windw":"1h"}`:            `prompt find_straggler has no argument "windw"; its arguments: window, ranks`,
		`{"window":600}`:            `prompt argument "window" must be a string`,
		`{"window":"10m","x":null}`: `no argument "x"`,
	}
	check := func(t *testing.T, transport string, body []byte, want string) {
		t.Helper()
		var m struct {
			ID    json.RawMessage `json:"id"`
			Error *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(body), &m); err != nil || m.Error == nil || m.Error.Code != -32602 || string(m.ID) != "7" || !strings.Contains(m.Error.Message, want) {
			t.Errorf("%s: %s, want -32602 for id 7 saying %q", transport, body, want)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeHTTPListener(ctx, ln, s, HTTPConfig{}, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	url := "http://" + ln.Addr().String() + "/mcp"
	for args, want := range bad {
		got := httpDo(t, http.MethodPost, url, strings.NewReader(get("7", args)), httpPostHeaders...)
		check(t, "http "+args, got.body, want)
	}
	good := httpDo(t, http.MethodPost, url, strings.NewReader(get("8", `{"window":"1h"}`)), httpPostHeaders...)
	if good.status != http.StatusOK || !bytes.Contains(good.body, []byte("straggler")) || bytes.Contains(good.body, []byte(`"error"`)) {
		t.Errorf("good arguments: %d %s", good.status, good.body)
	}

	lines := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	}
	var order []string
	for args := range bad {
		lines = append(lines, get("7", args))
		order = append(order, args)
	}
	var out bytes.Buffer
	if err := serveStdio(context.Background(), s, slog.New(slog.DiscardHandler), strings.NewReader(strings.Join(lines, "\n")+"\n"), &out, time.Minute); err != nil {
		t.Fatal(err)
	}
	answers := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(answers) != 1+len(bad) {
		t.Fatalf("%d answers, want %d:\n%s", len(answers), 1+len(bad), out.String())
	}
	// The refusals are written by the reader, before mcp-go answers the
	// initialize request, so they are matched by content.
	for _, args := range order {
		found := false
		for _, a := range answers {
			if strings.Contains(a, "-32602") && strings.Contains(a, jsonEscaped(bad[args])) {
				check(t, "stdio "+args, []byte(a), bad[args])
				found = true
			}
		}
		if !found {
			t.Errorf("stdio %s: no -32602 answer saying %q:\n%s", args, bad[args], out.String())
		}
	}
}

func jsonEscaped(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}
