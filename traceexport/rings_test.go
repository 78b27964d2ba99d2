package traceexport

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
	"github.com/probing-mcp/probing-mcp/storage/memt"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// ring writes rank r's python.comm_collective ring (the agent's columns,
// peer only when withPeer) into a pid directory with its identity; row
// i is entered at ts(i), the last one still running.
func ring(t *testing.T, base string, pid, r, rows int, withPeer bool, ts func(i int) int64) {
	t.Helper()
	dir := filepath.Join(base, fmt.Sprint(pid))
	cols := []memt.Column{{Name: "timestamp", Type: memt.I64}, {Name: "op", Type: memt.Str}, {Name: "participate_ranks", Type: memt.Str},
		{Name: "tensor_shape", Type: memt.Str}, {Name: "tensor_dtype", Type: memt.Str}, {Name: "bytes", Type: memt.I64},
		{Name: "duration_ms", Type: memt.F64}, {Name: "group_seq", Type: memt.I64}}
	if withPeer {
		cols = append(cols, memt.Column{Name: "peer", Type: memt.I64})
	}
	w, err := memt.Create(filepath.Join(dir, "python.comm_collective"), cols, memt.Options{ChunkSize: 1 << 20, NumChunks: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 1; i <= rows; i++ {
		dur := 0.25
		if i == rows {
			dur = -1
		}
		row := w.Row().I64(ts(i)).Str("all_reduce").Str("[0, 1, 2, 3]").Str("(4, 3)").Str("torch.float32").I64(48).F64(dur).I64(int64(i))
		if withPeer {
			row = row.I64(-1)
		}
		if err := row.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".identity.json"), []byte(fmt.Sprintf(`{"agent":"probing-mcp","pid":%d,"rank":%d,"world_size":4}`, pid, r)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func engine(t *testing.T, base string) *sqlengine.Engine {
	t.Helper()
	e, err := sqlengine.New(sqlengine.Options{DataDir: base})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestReadRings: the selected ranks' calls, in pages across the engine's
// row limit, none twice and none lost where a page boundary splits one
// microsecond; the columns an older agent lacks are left out; no table
// is no calls.
func TestReadRings(t *testing.T) {
	base := t.TempDir()
	e := engine(t, base)
	if got, err := ReadRings(context.Background(), e, []int{0}, 0, t0*2, 100); err != nil || len(got.Calls) != 0 {
		t.Fatalf("no table: %+v %v", got, err)
	}
	// Rank 0: 2500 calls, the first 1500 in pairs of one microsecond
	// (pages of 1000 split a pair); rank 1 an older agent without the
	// peer column; rank 3 not selected.
	ring(t, base, 999901, 0, 2500, true, func(i int) int64 { return t0 + int64(i/2) })
	ring(t, base, 999902, 1, 30, false, func(i int) int64 { return t0 + int64(i)*10 })
	ring(t, base, 999903, 3, 30, true, func(i int) int64 { return t0 + int64(i)*10 })
	got, err := ReadRings(context.Background(), e, []int{0, 1}, 0, t0*2, 100000)
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[int]map[int64]int{}
	for _, c := range got.Calls {
		if seqs[c.Rank] == nil {
			seqs[c.Rank] = map[int64]int{}
		}
		seqs[c.Rank][c.Seq]++
		if c.Rank == 3 {
			t.Fatalf("an unselected rank: %+v", c)
		}
		if c.Members != "0-3" || c.Group != "" || c.Shape != "(4, 3)" || c.Bytes != 48 || c.Source != "comm_rings" || c.Peer != -1 {
			t.Fatalf("call %+v", c)
		}
		if (c.Seq == 2500 || c.Rank == 1 && c.Seq == 30) != c.Open() {
			t.Fatalf("open %+v", c)
		}
	}
	if len(seqs[0]) != 2500 || len(seqs[1]) != 30 || got.Dropped != 0 {
		t.Fatalf("rank 0: %d calls, rank 1: %d, dropped %d", len(seqs[0]), len(seqs[1]), got.Dropped)
	}
	for s, n := range seqs[0] {
		if n != 1 {
			t.Fatalf("rank 0's #%d read %d times", s, n)
		}
	}
	// The window: only what was entered since.
	got, err = ReadRings(context.Background(), e, []int{1}, t0+200, t0*2, 100)
	if err != nil || len(got.Calls) != 11 {
		t.Fatalf("since: %d calls, %v", len(got.Calls), err)
	}
}

// TestReadRingsCap: past its share of the cap a range keeps its newest
// calls and counts the older ones it left out.
func TestReadRingsCap(t *testing.T) {
	base := t.TempDir()
	ring(t, base, 999911, 0, 3000, true, func(i int) int64 { return t0 + int64(i)*10 })
	ring(t, base, 999912, 2, 10, true, func(i int) int64 { return t0 + int64(i)*10 })
	got, err := ReadRings(context.Background(), engine(t, base), []int{0, 2}, 0, t0*2, 1200)
	if err != nil {
		t.Fatal(err)
	}
	n := map[int]int{}
	oldest := int64(t0 * 2)
	for _, c := range got.Calls {
		n[c.Rank]++
		if c.Rank == 0 {
			oldest = min(oldest, c.StartUS)
		}
	}
	// Two ranges (0 and 2), 600 calls each at most.
	if n[0] != 600 || n[2] != 10 || got.Dropped != 2400 || got.DroppedBeforeUS != t0+24000 || oldest != t0+24010 {
		t.Errorf("calls %v, dropped %d before %d, oldest kept %d", n, got.Dropped, got.DroppedBeforeUS-t0, oldest-t0)
	}
}

// TestDefaultSelection: the culprit and the group of its newest call;
// a culprit that never entered the collective others are stuck in gets
// that group; a verdict without a culprit, every rank.
func TestDefaultSelection(t *testing.T) {
	comm := []evidence.CommRow{
		{Rank: 0, TimestampUS: 10, Op: "all_reduce", Ranks: "[0, 1, 2, 3]", GroupSeq: 5, DurationMS: -1},
		{Rank: 2, TimestampUS: 9, Op: "all_reduce", Ranks: "[2, 3]", GroupSeq: 4, DurationMS: 1},
		{Rank: 5, TimestampUS: 9, Op: "all_reduce", Ranks: "[4, 5]", GroupSeq: 4, DurationMS: -1},
	}
	rep := diagnosis.Report{State: "stalled", Hypotheses: []diagnosis.Hypothesis{{Category: diagnosis.CatCPUStall, Culprits: "2", Confidence: "high", Collateral: "0-1,3"}}}
	s := DefaultSelection(rep, comm, 8)
	if fmt.Sprint(s.Ranks) != "[0 1 2 3]" || fmt.Sprint(s.Culprits) != "[2]" || !strings.Contains(s.Why, "cpu_stall: rank 2") || !strings.Contains(s.Why, "its groups") {
		t.Errorf("%+v", s)
	}
	// No group in the rings: the ranks that wait for it.
	s = DefaultSelection(rep, nil, 8)
	if fmt.Sprint(s.Ranks) != "[0 1 2 3]" || !strings.Contains(s.Why, "wait for it") {
		t.Errorf("no rings: %+v", s)
	}
	s = DefaultSelection(diagnosis.Report{State: "healthy"}, comm, 8)
	if fmt.Sprint(s.Ranks) != "[0 1 2 3 4 5 6 7]" || !strings.Contains(s.Why, "names no culprit") {
		t.Errorf("healthy: %+v", s)
	}
	// A world group of 100k ranks: the culprit kept, the cut said.
	big := []evidence.CommRow{{Rank: 0, TimestampUS: 10, Op: "all_reduce", Ranks: "[" + strings.Repeat("", 0) + ranksList(100000) + "]", GroupSeq: 5, DurationMS: -1}}
	rep.Hypotheses[0].Culprits = "99999"
	s = DefaultSelection(rep, big, 100000)
	if len(s.Ranks) != MaxRanks || s.Ranks[len(s.Ranks)-1] != 99999 || !strings.Contains(s.Why, "16384 of its 100000 ranks kept") {
		t.Errorf("big: %d ranks, last %d, %s", len(s.Ranks), s.Ranks[len(s.Ranks)-1], s.Why)
	}
}

func ranksList(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, i)
	}
	return b.String()
}

// TestReadRings4096: a 4096-rank job's rings (a tenth of the ranks never
// wrote one): the whole job selected is read within the cap, every rank
// with a ring has its track, the others are named as without calls.
func TestReadRings4096(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 4096 rings; skipped with -short")
	}
	base := t.TempDir()
	var sel []int
	empty := 0
	for r := 0; r < 4096; r++ {
		sel = append(sel, r)
		if r%10 == 7 {
			empty++
			continue
		}
		smallRing(t, base, 900000+r, r, 6)
	}
	e := engine(t, base)
	start := time.Now()
	got, err := ReadRings(context.Background(), e, sel, 0, t0*2, DefaultMaxEvents)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("read in %v", time.Since(start))
	if want := (4096 - empty) * 6; len(got.Calls) != want || got.Dropped != 0 {
		t.Fatalf("%d calls (want %d), %d dropped", len(got.Calls), want, got.Dropped)
	}
	_, sum, raw := write(t, got.Calls, Options{Ranks: sel, ReadUS: t0 + 1e6})
	if len(sum.Ranks) != 4096-empty || len(sum.NoCalls) != empty || sum.StillInside != 4096-empty {
		t.Errorf("%d ranks, %d without calls, %d still inside", len(sum.Ranks), len(sum.NoCalls), sum.StillInside)
	}
	t.Logf("%d bytes", len(raw))
}

// smallRing is ring with small chunks: thousands of them fit a test's
// temporary directory.
func smallRing(t *testing.T, base string, pid, r, rows int) {
	t.Helper()
	dir := filepath.Join(base, fmt.Sprint(pid))
	cols := []memt.Column{{Name: "timestamp", Type: memt.I64}, {Name: "op", Type: memt.Str}, {Name: "participate_ranks", Type: memt.Str},
		{Name: "duration_ms", Type: memt.F64}, {Name: "group_seq", Type: memt.I64}}
	w, err := memt.Create(filepath.Join(dir, "python.comm_collective"), cols, memt.Options{ChunkSize: 4096, NumChunks: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 1; i <= rows; i++ {
		dur := 0.25
		if i == rows {
			dur = -1
		}
		if err := w.Row().I64(t0 + int64(i)*1000 + int64(r)).Str("all_reduce").Str("[0, 4095]").F64(dur).I64(int64(i)).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".identity.json"), []byte(fmt.Sprintf(`{"agent":"probing-mcp","pid":%d,"rank":%d,"world_size":4096}`, pid, r)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadRingsHostile: a job that names its collectives and groups with
// HTML and 20 KB strings (record_collective takes any op name): read,
// laid out, escaped and clipped.
func TestReadRingsHostile(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "999921")
	cols := []memt.Column{{Name: "timestamp", Type: memt.I64}, {Name: "op", Type: memt.Str}, {Name: "participate_ranks", Type: memt.Str},
		{Name: "tensor_shape", Type: memt.Str}, {Name: "duration_ms", Type: memt.F64}, {Name: "group_seq", Type: memt.I64}}
	w, err := memt.Create(filepath.Join(dir, "python.comm_collective"), cols, memt.Options{ChunkSize: 1 << 20, NumChunks: 2})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("<script>alert(1)</script>", 800)
	if err := w.Row().I64(t0).Str(big).Str("[<b>0</b>, 1]").Str("\u202e(4,)" + big).F64(-1).I64(1).Commit(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := os.WriteFile(filepath.Join(dir, ".identity.json"), []byte(`{"agent":"probing-mcp","pid":999921,"rank":0,"world_size":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRings(context.Background(), engine(t, base), []int{0}, 0, t0*2, 10)
	if err != nil || len(got.Calls) != 1 {
		t.Fatalf("%+v %v", got, err)
	}
	_, sum, raw := write(t, got.Calls, Options{Ranks: []int{0}, ReadUS: t0 + 10})
	if sum.StillInside != 1 || bytes.ContainsAny(raw, "<>") || strings.Contains(string(raw), "\u202e") || len(raw) > 4<<10 {
		t.Errorf("%d bytes, %+v:\n%s", len(raw), sum, raw)
	}
}

// copying is a Querier that also counts the rows each page's filter
// selects: what a whole-job query copies from the nodes before its
// LIMIT applies.
type copying struct {
	e            *sqlengine.Engine
	pages, total int
}

func (c *copying) Query(ctx context.Context, sql string, limit int) (*sqlengine.Result, error) {
	if from := strings.Index(sql, " FROM "); strings.HasPrefix(sql, "SELECT _rank") && from > 0 {
		where := sql[from:]
		if i := strings.Index(where, " ORDER BY"); i > 0 {
			where = where[:i]
		}
		res, err := c.e.Query(ctx, "SELECT count(*) AS n"+where, 1)
		if err == nil {
			c.pages++
			c.total += int(jsonrow.Int(res.Rows[0].Values()[0]))
		}
	}
	return c.e.Query(ctx, sql, limit)
}

// TestReadRingsWindows: a long ring (20,000 calls over 200 s, and a
// burst a day before) is read whole, and the rows the pages' filters
// select add up to a few times the rows read, not to the square of the
// pages (a whole-job query copies what its filter selects from every
// node: pages keyed on the time alone would each copy the whole past).
func TestReadRingsWindows(t *testing.T) {
	base := t.TempDir()
	const old, recent = 500, 20000
	ring(t, base, 999931, 0, old+recent, true, func(i int) int64 {
		if i <= old {
			return t0 - 86400e6 + int64(i)*1000
		}
		return t0 + int64(i-old)*10000
	})
	q := &copying{e: engine(t, base)}
	got, err := ReadRings(context.Background(), q, []int{0}, 0, t0+300e6, 100000)
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[int64]bool{}
	for _, c := range got.Calls {
		seqs[c.Seq] = true
	}
	if len(got.Calls) != old+recent || len(seqs) != old+recent {
		t.Fatalf("%d calls, %d distinct", len(got.Calls), len(seqs))
	}
	if 2*q.total > 5*(old+recent) {
		t.Errorf("%d pages selected %d rows in all for %d read", q.pages, q.total, old+recent)
	}
	t.Logf("%d pages selected %d rows in all for %d read", q.pages, q.total, old+recent)
}
