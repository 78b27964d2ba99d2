package traceexport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// decoded is a written trace read back.
type decoded struct {
	TraceEvents []struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat"`
		Ph   string         `json:"ph"`
		TS   float64        `json:"ts"`
		Dur  *float64       `json:"dur"`
		PID  int            `json:"pid"`
		TID  int            `json:"tid"`
		S    string         `json:"s"`
		Args map[string]any `json:"args"`
	} `json:"traceEvents"`
	DisplayTimeUnit string         `json:"displayTimeUnit"`
	Metadata        map[string]any `json:"metadata"`
}

// write builds, writes, validates and reads back a trace.
func write(t *testing.T, calls []Call, opt Options) (decoded, Summary, []byte) {
	t.Helper()
	tr, sum := Build(calls, opt)
	var b bytes.Buffer
	if err := tr.Write(&b); err != nil {
		t.Fatal(err)
	}
	if err := Validate(b.Bytes()); err != nil {
		t.Fatalf("the trace breaks the format: %v\n%s", err, head(b.String()))
	}
	var d decoded
	if err := json.Unmarshal(b.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	// Every event within the trace's span: a metadata event at 0 would
	// stretch a viewer's timeline back to 1970.
	for _, e := range d.TraceEvents {
		if e.TS < float64(sum.FromUS) || e.TS > float64(sum.ToUS) {
			t.Fatalf("event at %v outside [%d, %d]: %+v", e.TS, sum.FromUS, sum.ToUS, e)
		}
	}
	return d, sum, b.Bytes()
}

func head(s string) string {
	if len(s) > 3000 {
		return s[:3000] + "…"
	}
	return s
}

const t0 = int64(1_800_000_000_000_000) // µs

// hung is the demo's shape: ranks 0, 1 and 3 inside all_reduce #5 of the
// group 0-3, rank 2 stopped after #4; rank 0 also has an open call that
// a later call shows returned.
func hung() []Call {
	var cs []Call
	for r := 0; r < 4; r++ {
		last := 5
		if r == 2 {
			last = 4
		}
		for s := 1; s <= last; s++ {
			c := Call{Rank: r, Host: "node-a", StartUS: t0 + int64(s)*1000 + int64(r), DurUS: 500, Op: "all_reduce", Members: "0-3",
				Group: "ranks 0-3", Seq: int64(s), Shape: "(4, 3)", Dtype: "torch.float32", Bytes: 48, Peer: -1, Source: "comm_rings"}
			if s == 5 || (r == 0 && s == 2) {
				c.DurUS = -1
			}
			cs = append(cs, c)
		}
	}
	return cs
}

// TestBuildHung: a track per rank named for it, an X slice per call with
// its group, sequence number and sizes; the open last calls drawn to the
// read time, still inside; an open call followed by another drawn to the
// next; rank 2 marked as never entering #5; metadata says it all.
func TestBuildHung(t *testing.T) {
	read := t0 + 60_000_000
	d, sum, _ := write(t, hung(), Options{Ranks: []int{0, 1, 2, 3}, ReadUS: read, Why: "test", Source: "comm_rings"})
	if sum.Slices != 19 || sum.StillInside != 3 || sum.NeverEntered != 1 || len(sum.Ranks) != 4 || sum.Truncated() {
		t.Fatalf("summary %+v", sum)
	}
	if d.DisplayTimeUnit != "ms" || d.Metadata["selection"] != "ranks 0-3" || d.Metadata["still_inside"] != 3.0 || d.Metadata["truncated"] != false {
		t.Errorf("metadata %v", d.Metadata)
	}
	threads := map[int]string{}
	var stuck, never, unknownEnd int
	for _, e := range d.TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "thread_name":
			threads[e.TID] = e.Args["name"].(string)
		case e.Ph == "X" && e.Args["still_inside"] == true:
			stuck++
			if e.TID == 2 || e.Args["seq"] != 5.0 || e.TS+*e.Dur != float64(read) || e.Name != "all_reduce #5 (still inside)" {
				t.Errorf("stuck slice %+v", e)
			}
		case e.Ph == "X" && e.Args["end_unknown"] != nil:
			unknownEnd++
			if e.TID != 0 || e.Args["seq"] != 2.0 || e.TS+*e.Dur != float64(t0+3000) {
				t.Errorf("open call followed by another: %+v", e)
			}
		case e.Ph == "X":
			if *e.Dur != 500 || e.Args["group_ranks"] != "0-3" || e.Args["shape"] != "(4, 3)" || e.Args["dtype"] != "torch.float32" ||
				e.Args["bytes"] != 48.0 || e.Args["duration_ms"] != 0.5 || e.Cat != "collective" {
				t.Errorf("slice %+v", e)
			}
		case e.Ph == "i" && e.Cat == "never_entered":
			never++
			if e.TID != 2 || e.Name != "never entered all_reduce #5" || e.S != "t" || e.TS != float64(t0+5000) {
				t.Errorf("never entered %+v", e)
			}
		}
	}
	if stuck != 3 || never != 1 || unknownEnd != 1 {
		t.Errorf("stuck %d never %d unknown end %d", stuck, never, unknownEnd)
	}
	for r := 0; r < 4; r++ {
		if threads[r] != fmt.Sprintf("rank %d", r) {
			t.Errorf("thread names %v", threads)
		}
	}
	if w := sum.Words(); !strings.Contains(w, "19 collective slice(s) on 4 rank track(s) (ranks 0-3), 3 still inside, 1 never-entered mark(s)") {
		t.Errorf("words %q", w)
	}
}

// TestBuildGone: a rank whose process ended inside its call has that
// call end with it (at its recorded end, else at the read time, said),
// named "ended inside"; it still counts as inside for the never-entered
// mark.
func TestBuildGone(t *testing.T) {
	read := t0 + 60_000_000
	d, sum, _ := write(t, hung(), Options{Ranks: []int{0, 1, 2, 3}, ReadUS: read, Gone: map[int]int64{0: t0 + 7000, 1: 0}})
	if sum.StillInside != 1 || sum.EndedInside != 2 || sum.NeverEntered != 1 {
		t.Fatalf("%+v", sum)
	}
	ends := map[int]float64{}
	for _, e := range d.TraceEvents {
		if e.Ph == "X" && e.Args["seq"] == 5.0 {
			ends[e.TID] = e.TS + *e.Dur
			if (e.TID == 3) != (e.Args["still_inside"] == true) || (e.TID != 3) != (e.Args["ended_inside"] == true) {
				t.Errorf("%+v", e)
			}
		}
	}
	if ends[0] != float64(t0+7000) || ends[1] != float64(read) || ends[3] != float64(read) {
		t.Errorf("ends %v", ends)
	}
	if !strings.Contains(sum.Words(), "1 still inside, 2 ended inside (the rank's process is gone)") {
		t.Errorf("%s", sum.Words())
	}
}

// TestBuildOverlapNests: a call that overlaps the next on its track (an
// async launch, another thread) is cut at the next one, so the slices
// nest as the viewers need; the cut is said.
func TestBuildOverlapNests(t *testing.T) {
	cs := []Call{
		{Rank: 0, StartUS: t0, DurUS: 5000, Op: "all_reduce", Seq: 1, Peer: -1},
		{Rank: 0, StartUS: t0 + 1000, DurUS: 5000, Op: "broadcast", Seq: 2, Peer: -1},
		{Rank: 0, StartUS: t0 + 1000, DurUS: 10, Op: "isend", Seq: 1, Peer: 1, P2P: true},
	}
	d, _, _ := write(t, cs, Options{ReadUS: t0 + 10_000})
	cut := 0
	for _, e := range d.TraceEvents {
		if e.Args["cut_at_next_call"] == true {
			cut++
		}
		if e.Name == "isend #1" && (e.Cat != "p2p" || e.Args["peer"] != 1.0) {
			t.Errorf("p2p %+v", e)
		}
	}
	if cut != 2 {
		t.Errorf("%d cut, want 2", cut)
	}
}

// TestBuildHostile: names the job wrote (HTML, a script tag, 20 KB,
// invalid UTF-8, bidi controls) come out escaped and clipped: no raw
// "<", valid UTF-8, every string within its bound.
func TestBuildHostile(t *testing.T) {
	big := strings.Repeat("A", 20<<10)
	script := "<script>alert(1)</script>"
	cs := []Call{{Rank: 0, Host: "<img src=x onerror=alert(1)>" + big, StartUS: t0, DurUS: 10, Op: script + big, Group: "</title>" + big,
		Shape: "\xff\xfe(4,)\u202e", Dtype: "torch.float32\n<b>", Peer: -1, State: big, Source: "comm_rings"},
		{Rank: 1, Host: "h", StartUS: t0 + 5, DurUS: -1, Op: script, Members: "0-1", Seq: 3, Peer: -1}}
	d, _, raw := write(t, cs, Options{ReadUS: t0 + 100})
	if bytes.ContainsAny(raw, "<>") {
		t.Errorf("a raw < or > in the trace:\n%s", head(string(raw)))
	}
	if !utf8.Valid(raw) || len(raw) > 8<<10 {
		t.Errorf("%d bytes, valid UTF-8 %v", len(raw), utf8.Valid(raw))
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			if len(x) > textBytes+40 {
				t.Errorf("a %d-byte string: %.80q", len(x), x)
			}
			if strings.ContainsRune(x, '\u202e') {
				t.Errorf("a bidi control left raw: %q", x)
			}
		case map[string]any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	for _, e := range d.TraceEvents {
		walk(e.Name)
		walk(e.Args)
	}
	if !strings.Contains(string(raw), `\u003cscript\u003e`) {
		t.Errorf("the script tag is not escaped as JSON escapes it")
	}
}

// TestBuildCap: more calls than the cap keeps the newest, and says how
// many older ones were left out and before when, in the metadata and the
// summary; never silently.
func TestBuildCap(t *testing.T) {
	var cs []Call
	for i := 0; i < 100; i++ {
		cs = append(cs, Call{Rank: i % 4, StartUS: t0 + int64(i)*100, DurUS: 10, Op: "all_reduce", Seq: int64(i/4 + 1), Peer: -1})
	}
	d, sum, _ := write(t, cs, Options{MaxEvents: 10, ReadUS: t0 + 1e6})
	if sum.Slices != 10 || sum.Dropped != 90 || !sum.Truncated() || sum.DroppedBeforeUS != t0+8900 {
		t.Fatalf("%+v", sum)
	}
	for _, e := range d.TraceEvents {
		if e.Ph == "X" && e.TS < float64(t0+9000) {
			t.Errorf("an old call kept: %+v", e)
		}
	}
	lo, _ := d.Metadata["left_out"].(string)
	if d.Metadata["truncated"] != true || !strings.Contains(lo, "90 older call(s)") || !strings.Contains(lo, "--max-events") {
		t.Errorf("metadata %v", d.Metadata)
	}
}

// TestBuildLargeJob: a 4096-rank selection, a tenth of the ranks without
// calls (not recorded, on a node that did not answer): a track per rank,
// the empty ones named and marked, the metadata naming them as ranges;
// the trace stays small and valid.
func TestBuildLargeJob(t *testing.T) {
	var sel []int
	var cs []Call
	empty := 0
	for r := 0; r < 4096; r++ {
		sel = append(sel, r)
		if r%10 == 7 {
			empty++
			continue
		}
		for s := 1; s <= 3; s++ {
			c := Call{Rank: r, Host: fmt.Sprintf("node%03d", r/8), StartUS: t0 + int64(s)*10000 + int64(r), DurUS: 100, Op: "all_reduce",
				Members: "0-4095", Seq: int64(s), Peer: -1}
			if s == 3 && r != 5 {
				c.DurUS = -1
			}
			if r == 5 && s == 3 {
				continue // rank 5 stopped after #2
			}
			cs = append(cs, c)
		}
	}
	start := time.Now()
	d, sum, raw := write(t, cs, Options{Ranks: sel, ReadUS: t0 + 1e6})
	took := time.Since(start)
	if len(sum.Ranks) != 4096-empty || len(sum.NoCalls) != empty {
		t.Fatalf("%d ranks with calls, %d without", len(sum.Ranks), len(sum.NoCalls))
	}
	// Never entered #3: rank 5, and the ranks without calls in the selection.
	if sum.NeverEntered != 1+empty {
		t.Errorf("never entered %d", sum.NeverEntered)
	}
	names := map[int]string{}
	pids := map[int]bool{}
	for _, e := range d.TraceEvents {
		if e.Ph == "M" && e.Name == "thread_name" {
			names[e.TID] = e.Args["name"].(string)
		}
		if e.Ph == "M" && e.Name == "process_name" {
			pids[e.PID] = true
		}
	}
	if len(names) != 4096 || names[7] != "rank 7 (no call recorded)" || names[4095] != "rank 4095" || len(pids) != 512+1 {
		t.Errorf("%d thread names (7: %q), %d processes", len(names), names[7], len(pids))
	}
	nc, _ := d.Metadata["ranks_without_calls"].(string)
	if !strings.HasPrefix(nc, "7,17,27") {
		t.Errorf("ranks without calls %q", nc)
	}
	t.Logf("4096 ranks, %d calls: %d bytes in %v", len(cs), len(raw), took)
}

// TestValidateRejects: the format check fails on what the viewers
// refuse, so that its passing means something.
func TestValidateRejects(t *testing.T) {
	for _, c := range []struct{ name, json string }{
		{"not an object", `[]`},
		{"unknown key first", `{"producer":"x","traceEvents":[]}`},
		{"metadata first", `{"metadata":{},"traceEvents":[]}`},
		{"no events", `{}`},
		{"bad unit", `{"traceEvents":[],"displayTimeUnit":"s"}`},
		{"no name", `{"traceEvents":[{"ph":"X","ts":1,"dur":1,"pid":1,"tid":1}]}`},
		{"string ts", `{"traceEvents":[{"name":"a","ph":"X","ts":"1","dur":1,"pid":1,"tid":1}]}`},
		{"no dur", `{"traceEvents":[{"name":"a","ph":"X","ts":1,"pid":1,"tid":1}]}`},
		{"negative dur", `{"traceEvents":[{"name":"a","ph":"X","ts":1,"dur":-1,"pid":1,"tid":1}]}`},
		{"float pid", `{"traceEvents":[{"name":"a","ph":"X","ts":1,"dur":1,"pid":1.5,"tid":1}]}`},
		{"string tid", `{"traceEvents":[{"name":"a","ph":"X","ts":1,"dur":1,"pid":1,"tid":"r1"}]}`},
		{"B without E", `{"traceEvents":[{"name":"a","ph":"B","ts":1,"pid":1,"tid":1}]}`},
		{"E without B", `{"traceEvents":[{"name":"a","ph":"E","ts":1,"pid":1,"tid":1}]}`},
		{"bad phase", `{"traceEvents":[{"name":"a","ph":"Z","ts":1,"pid":1,"tid":1}]}`},
		{"bad scope", `{"traceEvents":[{"name":"a","ph":"i","s":"x","ts":1,"pid":1,"tid":1}]}`},
		{"overlap", `{"traceEvents":[{"name":"a","ph":"X","ts":1,"dur":10,"pid":1,"tid":1},{"name":"b","ph":"X","ts":5,"dur":10,"pid":1,"tid":1}]}`},
		{"metadata without name", `{"traceEvents":[{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{}}]}`},
	} {
		if err := Validate([]byte(c.json)); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	ok := `{"traceEvents":[{"name":"a","ph":"X","ts":1,"dur":10,"pid":1,"tid":1},{"name":"b","ph":"X","ts":2,"dur":3,"pid":1,"tid":1},` +
		`{"name":"c","ph":"B","ts":1,"pid":1,"tid":2},{"name":"c","ph":"E","ts":2,"pid":1,"tid":2}],"displayTimeUnit":"ms","metadata":{"a":1}}`
	if err := Validate([]byte(ok)); err != nil {
		t.Errorf("a valid trace refused: %v", err)
	}
}
