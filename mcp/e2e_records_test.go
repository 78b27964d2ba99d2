package mcp_test

// End-to-end tests of the call records (PROBING_MCP_TRACE): the built
// binary, driven by the official Python MCP SDK over stdio and HTTP (see
// e2e_test.go for the harness).

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/calltrace"
)

// readRecordFiles reads every record under prefix: the jsonl file itself,
// or its segments (gzipped ones must decompress whole), oldest first.
func readRecordFiles(t *testing.T, prefix string) []calltrace.Record {
	t.Helper()
	plain, _ := filepath.Glob(prefix + ".*.jsonl")
	gzipped, _ := filepath.Glob(prefix + ".*.jsonl.gz")
	if b, err := os.ReadFile(prefix); err == nil || len(plain)+len(gzipped) == 0 {
		return parseRecords(t, prefix, b)
	}
	// The writer rolls while this reads: a segment is compressed into
	// .gz.tmp (never read here), renamed to .gz, then its .jsonl removed.
	// A segment seen both ways is read from its .gz, which is whole; a
	// file gone between the listing and the read means a roll happened:
	// nil, and the caller reads again.
	files := gzipped
	for _, f := range plain {
		if !slices.Contains(gzipped, f+".gz") {
			files = append(files, f)
		}
	}
	sort.Strings(files) // zero-padded numbers
	var out []calltrace.Record
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if b, err = io.ReadAll(zr); err != nil {
				t.Fatalf("%s does not decompress whole: %v", f, err)
			}
		}
		out = append(out, parseRecords(t, f, b)...)
	}
	return out
}

func parseRecords(t *testing.T, name string, b []byte) []calltrace.Record {
	t.Helper()
	var out []calltrace.Record
	for l := range strings.Lines(string(b)) {
		var r calltrace.Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%s: not a record (%v): %q", name, err, l)
		}
		out = append(out, r)
	}
	return out
}

// byType splits records into tool records and tools/call request ends,
// and counts the other request ends by method.
func byType(recs []calltrace.Record) (tools, calls []calltrace.Record, others map[string]int) {
	others = map[string]int{}
	for _, r := range recs {
		switch {
		case r.Type == calltrace.TypeTool:
			tools = append(tools, r)
		case r.Method == "tools/call":
			calls = append(calls, r)
		default:
			others[r.Method]++
		}
	}
	return tools, calls, others
}

// waitRecords polls until prefix holds at least n records (the writer is
// asynchronous); the deadline is a hang guard.
func waitRecords(t *testing.T, prefix string, n int) []calltrace.Record {
	t.Helper()
	deadline := time.Now().Add(e2eStartTimeout)
	for {
		var recs []calltrace.Record
		if files, _ := filepath.Glob(prefix + "*"); len(files) > 0 {
			recs = readRecordFiles(t, prefix)
		}
		if len(recs) >= n || time.Now().After(deadline) {
			return recs
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkToolRecords: one tool record per call, in order, with its outcome,
// and one tools/call request end each.
func checkToolRecords(t *testing.T, recs []calltrace.Record, transport string, want ...[2]string) {
	t.Helper()
	tools, calls, others := byType(recs)
	if len(tools) != len(want) || len(calls) != len(want) {
		t.Fatalf("%d tool and %d tools/call request_end records for %d calls:\n%+v", len(tools), len(calls), len(want), recs)
	}
	if others["initialize"] != 1 {
		t.Errorf("request_end records by method %v, want one initialize", others)
	}
	for i, w := range want {
		r := tools[i]
		// Streamable HTTP is served stateless: no session there.
		if r.Tool != w[0] || r.Outcome != w[1] || len(r.ArgsSHA256) != 64 || r.Transport != transport || (r.Session == "") != (transport == "http") || r.TextBytes == 0 {
			t.Errorf("tool record %d: %+v, want %s %s over %s", i, r, w[0], w[1], transport)
		}
		if c := calls[i]; c.Outcome != w[1] || c.RequestID == "" || c.Transport != transport || c.Session != r.Session {
			t.Errorf("request_end %d: %+v, want %s over %s in session %s", i, c, w[1], transport, r.Session)
		}
	}
}

func TestE2ERecordsStdio(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "records", "calls.jsonl")
	env := h.serverEnv(t, "PROBING_ALLOWED_FILE_DIRS="+h.fr(""), "PROBING_MCP_HISTORY=off",
		"PROBING_MCP_TRACE=1", "PROBING_MCP_TRACE_FILE_FORMAT=jsonl", "PROBING_MCP_TRACE_FILE_PATH="+path)
	args := append(e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}}),
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{"/nonexistent"}})...)
	args = append(args, e2eArgs("diagnose_hang", map[string]any{})...)
	out := h.stdio(t, env, "stdio-call", args...)
	out.mustOK(t)
	checkMissingRank(t, out.call(t, 0))
	out.call(t, 1).toolError(t)
	out.call(t, 2).ok(t)

	recs := waitRecords(t, path, 7) // initialize, 3 × (tools/call, tool)
	checkToolRecords(t, recs, "stdio", [2]string{"analyze_flight_recorder", "ok"},
		[2]string{"analyze_flight_recorder", "tool_error"}, [2]string{"diagnose_hang", "ok"})
	tools, _, _ := byType(recs)
	var rep struct{ State string }
	_ = json.Unmarshal(out.call(t, 2).StructuredContent, &rep)
	if v := tools[2].Verdict; v == nil || v.State != rep.State || rep.State == "" {
		t.Errorf("diagnose_hang record's headline %+v, want state %q", v, rep.State)
	}
	if st := tools[0].StructuredBytes; st == 0 {
		t.Errorf("no structured bytes counted: %+v", tools[0])
	}
}

// Over HTTP, with segments of 2 lines: the segments roll while the server
// runs and decompress whole.
func TestE2ERecordsHTTPRolling(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	prefix := filepath.Join(t.TempDir(), "records", "calls")
	srv := h.startHTTP(t, h.serverEnv(t, "PROBING_ALLOWED_FILE_DIRS="+h.fr(""), "PROBING_MCP_HISTORY=off",
		"PROBING_MCP_TRACE=on", "PROBING_MCP_TRACE_FILE_PATH="+prefix, "PROBING_MCP_TRACE_FILE_ROLL_LINES=2",
		"PROBING_MCP_TRACE_FILE_SEGMENTS=1000"))
	out := h.http(t, srv.url, "http-call",
		append(e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}}),
			e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("healthy")}})...)...)
	out.mustOK(t)
	checkMissingRank(t, out.call(t, 0))
	checkHealthy(t, out.call(t, 1))

	recs := waitRecords(t, prefix, 5)
	checkToolRecords(t, recs, "http", [2]string{"analyze_flight_recorder", "ok"}, [2]string{"analyze_flight_recorder", "ok"})
	gz, _ := filepath.Glob(prefix + ".*.jsonl.gz")
	if len(gz) < 2 {
		t.Errorf("%d gzipped segments for %d records in segments of 2 lines", len(gz), len(recs))
	}
}

// A full disk (a file size limit on the server, as ulimit -f sets it)
// drops records, says so in the log, and fails no call.
func TestE2ERecordsFullDiskFailsNoCall(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "records", "calls.jsonl")
	// 2 blocks of 512 bytes (POSIX sh): room for a few records only.
	wrapper := filepath.Join(dir, "probing-mcp")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nulimit -f 2 || exit 97\nexec "+h.bin+" \"$@\"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	env := h.serverEnv(t, "PROBING_ALLOWED_FILE_DIRS="+h.fr(""), "PROBING_MCP_HISTORY=off", "PROBING_GPU=0",
		"PROBING_MCP_TRACE=1", "PROBING_MCP_TRACE_FILE_FORMAT=jsonl", "PROBING_MCP_TRACE_FILE_PATH="+path)
	var args []string
	for range 8 {
		args = append(args, e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}})...)
	}
	out := h.run(t, env, append([]string{"stdio-call", "--server", wrapper}, args...)...)
	out.mustOK(t)
	for i := range 8 {
		checkMissingRank(t, out.call(t, i))
	}
	recs := readRecordFiles(t, path)
	if fi, err := os.Stat(path); err != nil || fi.Size() > 1024 {
		t.Fatalf("records file: %v, %d bytes, want at most the 1024 the limit allows", err, fi.Size())
	}
	if len(recs) == 0 || len(recs) >= 17 {
		t.Errorf("%d whole records kept, want some but not all 17", len(recs))
	}
	if !strings.Contains(out.stderr, "call records dropped; tool calls are not affected") || !strings.Contains(out.stderr, "file too large") {
		t.Errorf("the server's log does not say records were dropped, and why:\n%s", lastLines(out.stderr, 30))
	}
}
