package mcp

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/probing-mcp/probing-mcp/internal/calltrace"
)

// recordsServer is a server with call records on (env adds to them), and
// where they go.
func recordsServer(t *testing.T, env map[string]string) (*server.MCPServer, string) {
	t.Helper()
	tmp := t.TempDir()
	path := filepath.Join(tmp, "records", "calls.jsonl")
	e := map[string]string{"PROBING_DATA_DIR": filepath.Join(tmp, "data"), "PROBING_ALLOWED_FILE_DIRS": fixtures(t),
		"PROBING_MCP_HISTORY": "off", calltrace.EnvOn: "1", calltrace.EnvPath: path, calltrace.EnvFormat: "jsonl"}
	for k, v := range env {
		e[k] = v
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg, err := ConfigFromEnv(func(k string) string { return e[k] }, "test", new(slog.LevelVar), logger)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { CloseCallRecords(s) })
	return s, path
}

func readRecords(t *testing.T, path string) []calltrace.Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []calltrace.Record
	for l := range strings.Lines(string(b)) {
		var r calltrace.Record
		dec := json.NewDecoder(strings.NewReader(l))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("not a record (%v): %q", err, l)
		}
		out = append(out, r)
	}
	return out
}

// Over the Go in-process client, in a trace span: each tools/call leaves
// one request_end and one tool record with the span's ids, the argument
// hash and never the arguments, the answer's sizes, and diagnose_hang's
// headline; the otel sink puts the same on the span.
func TestCallRecordsInProcess(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	s, path := recordsServer(t, map[string]string{calltrace.EnvSinks: "file,otel"})
	c := connect(t, s)

	ctx, span := tp.Tracer("test").Start(context.Background(), "client")
	missing := filepath.Join(fixtures(t), "missing_rank")
	calls := []struct {
		tool    string
		args    map[string]any
		outcome string
	}{
		{"analyze_flight_recorder", map[string]any{"paths": []string{missing}}, calltrace.OutcomeOK},
		{"analyze_flight_recorder", map[string]any{"paths": []string{"/nonexistent/secret-name"}}, calltrace.OutcomeToolError},
		{"diagnose_hang", map[string]any{}, calltrace.OutcomeOK},
	}
	results := make([]*mcplib.CallToolResult, len(calls))
	for i, cl := range calls {
		var req mcplib.CallToolRequest
		req.Params.Name, req.Params.Arguments = cl.tool, cl.args
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", cl.tool, err)
		}
		results[i] = res
	}
	var req mcplib.CallToolRequest
	req.Params.Name = "no_such_tool"
	if _, err := c.CallTool(ctx, req); err == nil {
		t.Fatal("an unknown tool was called")
	}
	span.End()
	CloseCallRecords(s)

	recs := readRecords(t, path)
	var tools, ends []calltrace.Record
	for _, r := range recs {
		if r.Schema != calltrace.Schema || r.Time == "" {
			t.Errorf("record without schema or time: %+v", r)
		}
		switch r.Type {
		case calltrace.TypeTool:
			tools = append(tools, r)
		case calltrace.TypeRequestEnd:
			if r.Method == "tools/call" {
				ends = append(ends, r)
			}
		default:
			t.Errorf("record of type %q", r.Type)
		}
	}
	if len(tools) != 3 || len(ends) != 4 {
		t.Fatalf("%d tool and %d tools/call request_end records, want 3 and 4:\n%+v", len(tools), len(ends), recs)
	}
	sc := span.SpanContext()
	for i, cl := range calls {
		r := tools[i]
		digest, n := argsDigest(cl.args)
		if r.Tool != cl.tool || r.Outcome != cl.outcome || r.ArgsSHA256 != digest || r.ArgsBytes != n || r.DurationMS <= 0 {
			t.Errorf("tool record %d: %+v, want %s %s args %s (%d bytes)", i, r, cl.tool, cl.outcome, digest, n)
		}
		if r.TraceID != sc.TraceID().String() || r.SpanID != sc.SpanID().String() {
			t.Errorf("tool record %d: trace %s span %s, want the client's %s %s", i, r.TraceID, r.SpanID, sc.TraceID(), sc.SpanID())
		}
		text, structured := resultBytes(results[i])
		if r.TextBytes != text || r.StructuredBytes != structured || text == 0 {
			t.Errorf("tool record %d: %d text and %d structured bytes, want %d and %d", i, r.TextBytes, r.StructuredBytes, text, structured)
		}
		if e := ends[i]; e.Outcome != cl.outcome || e.RequestID == "" || e.TraceID != r.TraceID || e.DurationMS < r.DurationMS {
			t.Errorf("request_end %d: %+v, want outcome %s around the tool's %v ms", i, e, cl.outcome, r.DurationMS)
		}
	}
	if b, _ := json.Marshal(results[0].StructuredContent); tools[0].StructuredBytes != len(b) {
		t.Errorf("structured_bytes %d, the JSON is %d", tools[0].StructuredBytes, len(b))
	}
	// diagnose_hang's headline is the verdict's.
	var rep struct {
		State      string
		Hypotheses []struct {
			Category     string
			CulpritRanks string `json:"culprit_ranks"`
			Confidence   string
		}
	}
	b, _ := json.Marshal(results[2].StructuredContent)
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	want := &calltrace.Verdict{State: rep.State}
	if len(rep.Hypotheses) > 0 {
		h := rep.Hypotheses[0]
		want.Category, want.CulpritRanks, want.Confidence = h.Category, h.CulpritRanks, h.Confidence
	}
	if !reflect.DeepEqual(tools[2].Verdict, want) || want.State == "" {
		t.Errorf("diagnose_hang headline %+v, want %+v", tools[2].Verdict, want)
	}
	if tools[0].Verdict != nil {
		t.Errorf("a headline on analyze_flight_recorder: %+v", tools[0].Verdict)
	}
	// The unknown tool: an error, with its JSON-RPC code.
	if e := ends[3]; e.Outcome != calltrace.OutcomeError || e.ErrorType != "tool_not_found" || e.ErrorCode == 0 {
		t.Errorf("unknown tool's request_end: %+v", e)
	}
	// Arguments never: not the path asked for, not the fixture's.
	raw, _ := os.ReadFile(path)
	for _, secret := range []string{"secret-name", "missing_rank"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the records hold an argument (%s):\n%s", secret, raw)
		}
	}
	// The otel sink: one event per record on the client's span.
	var events []string
	for _, sp := range sr.Ended() {
		for _, ev := range sp.Events() {
			events = append(events, ev.Name)
		}
	}
	if got := strings.Count(strings.Join(events, " "), "probing_mcp.tool"); got != 3 {
		t.Errorf("span events %v, want 3 tool events", events)
	}
}

// Records change no answer: the same calls answer the same with them on.
func TestCallRecordsChangeNoAnswer(t *testing.T) {
	on, _ := recordsServer(t, map[string]string{calltrace.EnvSinks: "file,otel"})
	off, _ := recordsServer(t, map[string]string{calltrace.EnvOn: "0"})
	args := map[string]any{"paths": []string{filepath.Join(fixtures(t), "missing_rank")}}
	var got [2]string
	for i, s := range []*server.MCPServer{on, off} {
		res, err := call(t, connect(t, s), "analyze_flight_recorder", args)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(res)
		got[i] = string(b)
	}
	if got[0] != got[1] {
		i := 0
		for i < min(len(got[0]), len(got[1])) && got[0][i] == got[1][i] {
			i++
		}
		t.Errorf("with records on the answer differs at byte %d:\n on %.300s\noff %.300s", i, got[0][max(0, i-100):], got[1][max(0, i-100):])
	}
}

// A symlink planted at the records path stops the server at start, naming
// the path and the fix.
func TestCallRecordsRefusePlantedSymlink(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "calls.jsonl")
	if err := os.Symlink(filepath.Join(dir, "target"), path); err != nil {
		t.Fatal(err)
	}
	e := map[string]string{"PROBING_DATA_DIR": filepath.Join(dir, "data"), "PROBING_MCP_HISTORY": "off",
		calltrace.EnvOn: "1", calltrace.EnvPath: path, calltrace.EnvFormat: "jsonl"}
	logger := slog.New(slog.DiscardHandler)
	cfg, err := ConfigFromEnv(func(k string) string { return e[k] }, "test", new(slog.LevelVar), logger)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, logger); err == nil || !strings.Contains(err.Error(), path+" is a symbolic link; refusing to follow it") ||
		!strings.Contains(err.Error(), calltrace.EnvPath) {
		t.Errorf("New with a symlink at the records path: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "target")); err == nil {
		t.Error("the symlink's target was created")
	}
}

// BenchmarkToolRecord is what the tool record adds to one call: the
// argument hash, the answer's sizes and the Emit, around a handler that
// answers at once with analyze_flight_recorder's real answer.
func BenchmarkToolRecord(b *testing.B) {
	path := filepath.Join(b.TempDir(), "calls.jsonl")
	rec, err := calltrace.Open(calltrace.Config{On: true, File: true, Path: path, Format: calltrace.FormatJSONL}, nil, calltrace.Options{Queue: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer rec.Close()
	text := strings.Repeat("x", 1838)
	structured := map[string]any{"summary": strings.Repeat("y", 1500), "verdict": "MISSING_RANKS", "process_groups": []any{map[string]any{"pg_name": "0", "culprit_ranks": "2"}}}
	res := mcplib.NewToolResultStructured(structured, text)
	handler := func(context.Context, mcplib.CallToolRequest) (*mcplib.CallToolResult, error) { return res, nil }
	var req mcplib.CallToolRequest
	req.Params.Name = "analyze_flight_recorder"
	req.Params.Arguments = map[string]any{"paths": []string{"/dev/shm/probing/fr/missing_rank"}}
	for _, bc := range []struct {
		name string
		h    server.ToolHandlerFunc
	}{{"off", handler}, {"on", toolRecords(rec)(handler)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.h(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
