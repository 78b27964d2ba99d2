package calltrace

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// lockedBuffer is a log destination goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor polls cond until it holds or the test's own bound passes; the
// bound is a hang guard, never the evidence.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readJSONL(t *testing.T, path string) []Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []Record
	for l := range strings.Lines(string(b)) {
		var r Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%s: not a record (%v): %q", path, err, l)
		}
		out = append(out, r)
	}
	return out
}

func TestRecorderOffIsNil(t *testing.T) {
	r, err := Open(Config{}, nil, Options{})
	if r != nil || err != nil {
		t.Fatalf("off: %v %v, want nil nil", r, err)
	}
	r.Emit(context.Background(), Record{Type: TypeTool}) // a nil Recorder takes records and does nothing
	r.Close()
}

// A record in a span carries its ids, and with the otel sink is an event
// on that span with the record's fields.
func TestRecorderSpanIDsAndOTelSink(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	path := filepath.Join(t.TempDir(), "calls.jsonl")
	r, err := Open(Config{On: true, File: true, OTel: true, Path: path, Format: FormatJSONL}, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := tp.Tracer("test").Start(context.Background(), "tools/call")
	r.Emit(ctx, Record{Type: TypeTool, Tool: "diagnose_hang", DurationMS: 12.5, Outcome: OutcomeOK, TextBytes: 10, StructuredBytes: 20,
		Verdict: &Verdict{State: "hung", Category: "missing_rank", CulpritRanks: "3", Confidence: "high"}})
	span.End()
	r.Emit(context.Background(), Record{Type: TypeRequestEnd, Method: "tools/list", RequestID: "7", Outcome: OutcomeOK})
	r.Close()

	recs := readJSONL(t, path)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2: %+v", len(recs), recs)
	}
	sc := span.SpanContext()
	if recs[0].TraceID != sc.TraceID().String() || recs[0].SpanID != sc.SpanID().String() || recs[0].Schema != Schema || recs[0].Time == "" {
		t.Errorf("record in a span: %+v, want trace %s span %s", recs[0], sc.TraceID(), sc.SpanID())
	}
	if recs[1].TraceID != "" || recs[1].SpanID != "" {
		t.Errorf("record without a span has ids: %+v", recs[1])
	}
	ended := sr.Ended()
	if len(ended) != 1 || len(ended[0].Events()) != 1 {
		t.Fatalf("spans %d, want one with one event", len(ended))
	}
	ev := ended[0].Events()[0]
	got := map[attribute.Key]attribute.Value{}
	for _, kv := range ev.Attributes {
		got[kv.Key] = kv.Value
	}
	if ev.Name != "probing_mcp.tool" || got["tool"].AsString() != "diagnose_hang" || got["duration_ms"].AsFloat64() != 12.5 ||
		got["verdict.culprit_ranks"].AsString() != "3" || got["structured_bytes"].AsInt64() != 20 || got["outcome"].AsString() != "ok" {
		t.Errorf("span event %s %v", ev.Name, got)
	}
}

func TestJSONLRefusesAPlantedPath(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "calls.jsonl")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{FormatJSONL, FormatJSONLGz} {
		path := link
		if format == FormatJSONLGz {
			path = filepath.Join(dir, "calls")
			if err := os.Symlink(target, path+".lock"); err != nil {
				t.Fatal(err)
			}
		}
		_, err := Open(Config{On: true, File: true, Path: path, Format: format}, nil, Options{})
		if err == nil || !strings.Contains(err.Error(), "is a symbolic link; refusing to follow it") || !strings.Contains(err.Error(), EnvPath) {
			t.Errorf("%s: a symlink at the path: %v, want the refusal and the variable", format, err)
		}
	}
	// A file others may write is someone else's to plant.
	planted := filepath.Join(dir, "planted.jsonl")
	if err := os.WriteFile(planted, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(planted, 0o666); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Config{On: true, File: true, Path: planted, Format: FormatJSONL}, nil, Options{})
	if err == nil || !strings.Contains(err.Error(), "writable by every user") {
		t.Errorf("a world-writable file: %v, want it refused", err)
	}
	// A directory others may write.
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err = Open(Config{On: true, File: true, Path: filepath.Join(shared, "c.jsonl"), Format: FormatJSONL}, nil, Options{})
	if err == nil || !strings.Contains(err.Error(), "writable by other users") {
		t.Errorf("a shared directory: %v, want it refused", err)
	}
	if b, _ := os.ReadFile(target); len(b) != 0 {
		t.Errorf("the symlink's target was written: %q", b)
	}
}

// A torn last record (a crash) is cut off before the next append.
func TestJSONLCutsATornRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls.jsonl")
	if err := os.WriteFile(path, []byte("{\"n\":0}\n{\"n\":1,\"cut"), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := openJSONL(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	mustWrite(t, j, numbered(1, 2, 0))
	b, _ := os.ReadFile(path)
	if string(b) != "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n" {
		t.Errorf("after a torn record: %q", b)
	}
}

// With the writer held up (another server holds the file's lock), a full
// queue drops records at once, counts them and says so in the log without
// waiting; the calls that emitted them were not held up.
func TestRecorderDropsWhenTheQueueIsFull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls.jsonl")
	var logs lockedBuffer
	r, err := Open(Config{On: true, File: true, Path: path, Format: FormatJSONL},
		slog.New(slog.NewJSONHandler(&logs, nil)), Options{Queue: 2, ReportEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// The writer takes the first record and blocks on the lock.
	r.Emit(context.Background(), Record{Type: TypeTool, Tool: "first", Outcome: OutcomeOK})
	waitFor(t, "the writer to take the first record", func() bool { return len(r.queue) == 0 })
	const n = 50
	for i := 1; i < n; i++ {
		r.Emit(context.Background(), Record{Type: TypeTool, Tool: "t" + strconv.Itoa(i), Outcome: OutcomeOK})
	}
	// The queue holds 2; a few more may have joined the first one's batch
	// before the writer blocked.
	if d := r.Dropped(); d < n-10 {
		t.Errorf("dropped %d of %d with a queue of 2, want at least %d", d, n, n-10)
	}
	waitFor(t, "the drop warning", func() bool { return strings.Contains(logs.String(), "call records dropped") })
	_ = syscall.Flock(int(other.Fd()), syscall.LOCK_UN)
	r.Close()
	written := uint64(len(readJSONL(t, path)))
	if written+r.Dropped() != n || written != r.Written() {
		t.Errorf("written %d (counted %d) + dropped %d != %d", written, r.Written(), r.Dropped(), n)
	}
	var warn struct {
		Msg        string `json:"msg"`
		Dropped    uint64 `json:"dropped"`
		LastReason string `json:"last_reason"`
	}
	first, _, _ := strings.Cut(logs.String(), "\n")
	if err := json.Unmarshal([]byte(first), &warn); err != nil || warn.Dropped == 0 || !strings.Contains(warn.LastReason, "queue of 2 records is full") {
		t.Errorf("drop warning %q (%v)", first, err)
	}
	// Said once per interval: one line at once, then the rest at Close.
	if c := strings.Count(logs.String(), "call records dropped"); c > 2 {
		t.Errorf("%d drop warnings, want at most 2:\n%s", c, logs.String())
	}
}

// The stderr sink writes the same lines.
func TestRecorderStderrSink(t *testing.T) {
	var out lockedBuffer
	r, err := Open(Config{On: true, Stderr: true}, nil, Options{Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	r.Emit(context.Background(), Record{Type: TypeRequestEnd, Method: "initialize", RequestID: "0", Outcome: OutcomeOK})
	r.Close()
	var rec Record
	if err := json.Unmarshal([]byte(out.String()), &rec); err != nil || rec.Method != "initialize" || rec.Type != TypeRequestEnd {
		t.Errorf("stderr sink wrote %q (%v)", out.String(), err)
	}
}

// --- subprocesses: a file size limit (a full disk), and a kill ---

const helperEnv = "CALLTRACE_TEST_HELPER"

// TestMain runs the helpers when the test binary is started as one.
func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "fsize":
		os.Exit(fsizeHelper())
	case "writer":
		os.Exit(writerHelper())
	}
	os.Exit(m.Run())
}

func helper(t *testing.T, kind string, kv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{helperEnv + "=" + kind}, kv...)...)
	return cmd
}

// fsizeHelper emits records under RLIMIT_FSIZE (a write past it fails with
// EFBIG, as on a full disk) and reports the counts as JSON.
func fsizeHelper() int {
	limit, _ := strconv.ParseUint(os.Getenv("FSIZE"), 10, 64)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		fmt.Fprintln(os.Stderr, "setrlimit:", err)
		return 3
	}
	cfg := Config{On: true, File: true, Path: os.Getenv("TRACE_PATH"), Format: os.Getenv("TRACE_FORMAT"), RollBytes: 1 << 20, Segments: 4}
	r, err := Open(cfg, slog.New(slog.NewJSONHandler(os.Stderr, nil)), Options{ReportEvery: time.Hour})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 3
	}
	start := time.Now()
	var slowest time.Duration
	for i := range 200 {
		t0 := time.Now()
		r.Emit(context.Background(), Record{Type: TypeTool, Tool: "analyze_flight_recorder", RequestID: strconv.Itoa(i), Outcome: OutcomeOK,
			ArgsSHA256: strings.Repeat("ab", 32)})
		slowest = max(slowest, time.Since(t0))
		if i%20 == 0 {
			time.Sleep(time.Millisecond) // let the writer take batches of several sizes
		}
	}
	r.Close()
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"written": r.Written(), "dropped": r.Dropped(),
		"slowest_emit_us": slowest.Microseconds(), "total_ms": time.Since(start).Milliseconds()})
	return 0
}

// A full disk drops records, counted and said once, and leaves whole
// lines; emitting is not held up.
func TestRecorderFullDisk(t *testing.T) {
	for _, format := range []string{FormatJSONL, FormatJSONLGz} {
		t.Run(format, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "calls")
			const limit = 4096
			cmd := helper(t, "fsize", "FSIZE="+strconv.Itoa(limit), "TRACE_PATH="+path, "TRACE_FORMAT="+format)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, stderr.String())
			}
			var got struct {
				Written, Dropped uint64
				SlowestEmitUS    int64 `json:"slowest_emit_us"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("helper said %q: %v", out, err)
			}
			if got.Dropped == 0 || got.Written == 0 || got.Written+got.Dropped != 200 {
				t.Fatalf("written %d dropped %d, want some of each, 200 in all\n%s", got.Written, got.Dropped, stderr.String())
			}
			if c := strings.Count(stderr.String(), "call records dropped"); c < 1 || c > 2 {
				t.Errorf("%d drop warnings, want one at once and at most one at close:\n%s", c, stderr.String())
			}
			if !strings.Contains(stderr.String(), "file too large") {
				t.Errorf("the warning does not say why:\n%s", stderr.String())
			}
			var lines int
			if format == FormatJSONL {
				lines = len(readJSONL(t, path))
			} else {
				for _, s := range readSegments(t, path) {
					lines += len(s.lines)
				}
			}
			if uint64(lines) != got.Written {
				t.Errorf("%d whole records on disk, the recorder counted %d written", lines, got.Written)
			}
			t.Logf("%s: written %d, dropped %d, slowest Emit %d µs", format, got.Written, got.Dropped, got.SlowestEmitUS)
		})
	}
}

// writerHelper writes records with small segments until killed.
func writerHelper() int {
	cfg := Config{On: true, File: true, Path: os.Getenv("TRACE_PATH"), Format: FormatJSONLGz, RollBytes: 2048, Segments: 1000}
	r, err := Open(cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)), Options{Queue: 1 << 16})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 3
	}
	for i := 0; ; i++ {
		r.Emit(context.Background(), Record{Type: TypeTool, Tool: "t", RequestID: strconv.Itoa(i), Outcome: OutcomeOK})
		if i%64 == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// A writer killed (SIGKILL) while it writes and rolls leaves every
// finished segment a whole gzip, and the live one plain JSONL whose torn
// last line, if any, the next writer cuts off.
func TestRollingSurvivesAKill(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "calls")
	cmd := helper(t, "writer", "TRACE_PATH="+prefix)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "five gzipped segments", func() bool {
		m, _ := filepath.Glob(prefix + ".*.jsonl.gz")
		return len(m) >= 5
	})
	_ = cmd.Process.Kill()
	_ = cmd.Wait()

	// Cut the live segment's torn line (as the next writer would) and read
	// everything back: readSegments fails on any broken gzip or line.
	r := newRolling(t, prefix, 2048, 0, 1000)
	mustWrite(t, r, [][]byte{[]byte(`{"after":"kill"}` + "\n")})
	segs := readSegments(t, prefix)
	gz := 0
	for _, s := range segs {
		if s.gz {
			gz++
		}
	}
	if gz < 5 {
		t.Fatalf("%d gzipped segments after the kill, want at least 5: %v\n%s", gz, names(segs), stderr.String())
	}
	last := segs[len(segs)-1]
	if last.lines[len(last.lines)-1] != `{"after":"kill"}` {
		t.Errorf("the record after the kill is not last: %v", names(segs))
	}
}

// BenchmarkEmit is what recording costs the call that emits: the record's
// JSON and a queue send (the writer drains in the background).
func BenchmarkEmit(b *testing.B) {
	for _, format := range []string{FormatJSONL, FormatJSONLGz} {
		b.Run(format, func(b *testing.B) {
			r, err := Open(Config{On: true, File: true, Path: filepath.Join(b.TempDir(), "calls"), Format: format,
				RollBytes: DefaultRollBytes, Segments: DefaultSegments}, nil, Options{Queue: 1 << 20})
			if err != nil {
				b.Fatal(err)
			}
			rec := Record{Type: TypeTool, Tool: "diagnose_hang", Session: "stdio", Transport: "stdio", DurationMS: 12.345,
				Outcome: OutcomeOK, ArgsSHA256: strings.Repeat("ab", 32), ArgsBytes: 40, TextBytes: 1800, StructuredBytes: 2100,
				Verdict: &Verdict{State: "hung", Category: "missing_rank", CulpritRanks: "3", Confidence: "high"}}
			b.ReportAllocs()
			for b.Loop() {
				r.Emit(context.Background(), rec)
			}
			b.StopTimer()
			r.Close()
			if r.Dropped() != 0 {
				b.Errorf("dropped %d", r.Dropped())
			}
		})
	}
}
