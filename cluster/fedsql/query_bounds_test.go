package fedsql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// hostile is a node that serves python.t(k INTEGER, s TEXT) with whatever
// rows a test gives it: what a planted or broken node can send.
type hostile struct {
	id   string
	rows [][]any
	// scan, when set, runs before Scan answers (a node that stalls).
	scan func(ctx context.Context)
	// tags counts Tags calls; onTags sees each.
	tags   atomic.Int32
	onTags func(n int32)
}

func (h *hostile) ID() string { return h.id }
func (h *hostile) Tags() NodeTags {
	n := h.tags.Add(1)
	if h.onTags != nil {
		h.onTags(n)
	}
	return NodeTags{Host: h.id, Addr: h.id}
}
func (h *hostile) Tables(ctx context.Context) ([]Table, error) {
	return []Table{{Schema: "python", Name: "t", Columns: []Column{{Name: "k", Type: "INTEGER"}, {Name: "s", Type: "TEXT"}}}}, nil
}
func (h *hostile) Scan(ctx context.Context, req ScanRequest) (*ScanReply, error) {
	if h.scan != nil {
		h.scan(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return &ScanReply{Columns: req.Columns, Rows: h.rows}, nil
}

// longRows are two long values: a haystack of n 'a's (k=1) and a needle
// of n/2 'a's and a 'b' (k=2), which SQLite's own instr compared at every
// byte of the haystack.
func longRows(n int) [][]any {
	return [][]any{{int64(1), strings.Repeat("a", n)}, {int64(2), strings.Repeat("a", n/2) + "b"}}
}

// newLimiter is a pool of its own for one test, so its slots and peak are
// the test's alone.
func newLimiter(t *testing.T, opt sqlengine.Options) *sqlengine.Limiter {
	t.Helper()
	l, err := NewLimiter(opt)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func wantErr(t *testing.T, err error, kind string, inMsg ...string) *sqlengine.Error {
	t.Helper()
	var se *sqlengine.Error
	if !errors.As(err, &se) {
		t.Fatalf("want a %s query error, got %v", kind, err)
	}
	if se.Kind != kind {
		t.Fatalf("kind %q, want %q: %s", se.Kind, kind, se.Msg)
	}
	for _, s := range inMsg {
		if !strings.Contains(se.Msg, s) {
			t.Fatalf("message does not say %q: %s", s, se.Msg)
		}
	}
	return se
}

// underHalfGiB: what a hostile input may make one query hold, as its
// meter counted it (SQLite's memory and the Go copy of the rows).
func underHalfGiB(t *testing.T, l *sqlengine.Limiter) {
	t.Helper()
	if p := l.Peak(); p <= 0 || p >= 512<<20 {
		t.Fatalf("the query's meter peaked at %d bytes", p)
	}
	t.Logf("meter peak %.1f MiB", float64(l.Peak())/(1<<20))
}

// slotFreed: when a stopped query's caller has its answer, its slot is
// free again: nothing holds it, and the next query (which may not wait
// for one) runs.
func slotFreed(t *testing.T, l *sqlengine.Limiter, n Node) {
	t.Helper()
	if u := l.InUse(); u != 0 {
		t.Fatalf("%d query slot(s) still taken after the caller got its answer", u)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Query(ctx, []Node{n}, "SELECT count(*) AS n FROM python.t", 10, Options{Limiter: l})
	if err != nil || len(res.Rows) != 1 {
		t.Fatalf("the next query: %v %v", res, err)
	}
}

// TestQueryHasTheEnginesBounds: issue 23. The coordinator's copy of the
// nodes' rows is queried with the engine's value-length bound: a printf
// width that built a 1 GB string is refused as too big, with the fix; an
// ordinary statement still runs.
func TestQueryHasTheEnginesBounds(t *testing.T) {
	n := newNode(t, "node-a", 0, []int{0, 1}, 20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := Query(ctx, []Node{n}, "SELECT printf('%.*c', 1000000000, 'x') AS s FROM python.comm_collective LIMIT 1", 10, Options{})
	wantErr(t, err, "too_big", "value-length guard")
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %s", d)
	}
	res, err := Query(ctx, []Node{n}, "SELECT rank, count(*) AS n FROM python.comm_collective GROUP BY rank ORDER BY rank", 10, Options{})
	if err != nil || len(res.Rows) != 2 {
		t.Fatalf("%+v %v", res, err)
	}
}

// TestInstrIsLinear: issue 23's trial. instr of a 2 MB needle in 4 MB
// ran as one uninterruptible call of SQLite's own instr (166 s against a
// 10 s deadline at the trial; 2 MB in 1 MB took 20.7 s here); the
// coordinator's connection now has the engine's linear one.
func TestInstrIsLinear(t *testing.T) {
	l := newLimiter(t, sqlengine.Options{})
	n := &hostile{id: "n", rows: longRows(4_000_000)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Query(ctx, []Node{n}, "SELECT instr(a.s, b.s) AS i, instr(a.s || 'b', b.s) AS j FROM python.t a, python.t b WHERE a.k = 1 AND b.k = 2", 10, Options{Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	if i, _ := res.Rows[0].Get("i"); i.(int64) != 0 {
		t.Fatalf("instr = %v", i)
	}
	if j, _ := res.Rows[0].Get("j"); j.(int64) != 2_000_001 {
		t.Fatalf("instr = %v", j)
	}
	underHalfGiB(t, l)
}

// TestDeadlineFreesTheSlot: a statement of endless instr rows over long
// values meets a short deadline. The statement is interrupted, the caller
// gets a timeout that says what ran, and the only query slot is free when
// it does (the trial's instr kept its slot after the 504).
func TestDeadlineFreesTheSlot(t *testing.T) {
	l := newLimiter(t, sqlengine.Options{MaxConcurrent: 1})
	n := &hostile{id: "n", rows: longRows(4_000_000)}
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	_, err := Query(ctx, []Node{n}, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c) "+
		"SELECT sum(instr(a.s, b.s) + i) AS x FROM c, python.t a, python.t b WHERE a.k = 1 AND b.k = 2", 10, Options{Limiter: l})
	took := time.Since(start)
	wantErr(t, err, "timeout", "while the statement ran", cluster.EnvDeadline, "WHERE")
	slotFreed(t, l, n)
	// Generous: the machine may be slow; what matters is above.
	if took > 20*time.Second {
		t.Fatalf("the caller waited %s for a %s deadline", took, deadline)
	}
	underHalfGiB(t, l)
	t.Logf("returned after %s (deadline %s)", took, deadline)
}

// TestDeadlineWhileNodesAnswer: a node that stalls past the deadline
// does not keep the query's slot either.
func TestDeadlineWhileNodesAnswer(t *testing.T) {
	l := newLimiter(t, sqlengine.Options{MaxConcurrent: 1})
	n := &hostile{id: "n", rows: longRows(1000), scan: func(ctx context.Context) { <-ctx.Done() }}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := Query(ctx, []Node{n}, "SELECT count(*) FROM python.t", 10, Options{Limiter: l})
	wantErr(t, err, "timeout", "while it waited for the nodes")
	n.scan = nil
	slotFreed(t, l, n)
}

// expiring is a context whose deadline passes when expire is called, so
// a test can end a query's time at a chosen step.
type expiring struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newExpiring() *expiring {
	return &expiring{Context: context.Background(), done: make(chan struct{})}
}
func (e *expiring) Done() <-chan struct{} { return e.done }
func (e *expiring) Err() error {
	select {
	case <-e.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
func (e *expiring) expire() { e.once.Do(func() { close(e.done) }) }

// TestDeadlineWhileRowsLoad: the deadline that passes while the copy is
// loaded into SQLite stops the load at once.
func TestDeadlineWhileRowsLoad(t *testing.T) {
	l := newLimiter(t, sqlengine.Options{MaxConcurrent: 1})
	rows := make([][]any, 200_000)
	for i := range rows {
		rows[i] = []any{float64(i), "all_reduce"}
	}
	ctx := newExpiring()
	n := &hostile{id: "n", rows: rows}
	// Tags is asked once to prune nodes, then once per part as its load
	// starts: the query's time ends there.
	n.onTags = func(k int32) {
		if k == 2 {
			ctx.expire()
		}
	}
	start := time.Now()
	_, err := Query(ctx, []Node{n}, "SELECT count(*) FROM python.t", 10, Options{Limiter: l})
	wantErr(t, err, "timeout", "while the nodes' rows were loaded")
	n.onTags = nil
	slotFreed(t, l, n)
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("took %s", d)
	}
}

// TestMemoryCapOnTheCopy: the rows copied from the nodes are charged to
// the query's memory cap as they arrive; past it the query fails at
// once, naming the cap, its variable and the fix.
func TestMemoryCapOnTheCopy(t *testing.T) {
	l := newLimiter(t, sqlengine.Options{MemoryLimit: 32 << 20})
	row := strings.Repeat("x", 1000)
	var nodes []Node
	for i := 0; i < 4; i++ {
		rows := make([][]any, 10_000) // about 10 MB a node
		for j := range rows {
			rows[j] = []any{float64(j), row}
		}
		nodes = append(nodes, &hostile{id: fmt.Sprint("n", i), rows: rows})
	}
	_, err := Query(context.Background(), nodes, "SELECT count(*) FROM python.t", 10, Options{Limiter: l})
	wantErr(t, err, "memory", "copied from the nodes", "32 MiB", sqlengine.EnvMemory, "WHERE")
	if p := l.Peak(); p > 32<<20 {
		t.Fatalf("the meter let the copy reach %d bytes", p)
	}
	// One node's rows fit (in Go, then in SQLite), and the answer is exact.
	res, err := Query(context.Background(), nodes[:1], "SELECT count(*) AS n FROM python.t", 10, Options{Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := res.Rows[0].Get("n"); v.(int64) != 10_000 {
		t.Fatalf("%v rows", v)
	}
}

// TestMemoryCapOnTheStatement: the statement's working memory (here a
// DISTINCT of 2 M 300-byte strings, which held 735 MB of RSS before) and
// the rows it returns are charged to the same cap.
func TestMemoryCapOnTheStatement(t *testing.T) {
	l := newLimiter(t, sqlengine.Options{})
	n := &hostile{id: "n", rows: longRows(10)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := Query(ctx, []Node{n}, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 2000000) "+
		"SELECT count(DISTINCT printf('%0300d', i)) FROM c, python.t WHERE k = 1", 10, Options{Limiter: l})
	wantErr(t, err, "memory", "256 MiB", sqlengine.EnvMemory)
	underHalfGiB(t, l)
	// 1,000 rows of 4 MB values would be 4 GB of result.
	_, err = Query(ctx, []Node{n}, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 1000) "+
		"SELECT printf('%.*c', 4000000, 'x') AS s FROM c, python.t WHERE k = 1", 1000, Options{Limiter: l})
	wantErr(t, err, "memory", "256 MiB", sqlengine.EnvMemory)
	underHalfGiB(t, l)
}

// TestLongValueFromANode: a value longer than the engine's value-length
// guard leaves its node out, said, instead of failing the query.
func TestLongValueFromANode(t *testing.T) {
	l := newLimiter(t, sqlengine.Options{})
	bad := &hostile{id: "bad", rows: [][]any{{int64(1), strings.Repeat("a", 5<<20)}}}
	good := &hostile{id: "good", rows: longRows(10)}
	res, err := Query(context.Background(), []Node{bad, good}, "SELECT count(*) AS n FROM python.t", 10, Options{Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := res.Rows[0].Get("n"); v.(int64) != 2 {
		t.Fatalf("%v rows", v)
	}
	notes := strings.Join(res.DataQuality.Notes, "\n")
	if !strings.Contains(notes, "bad: its answer was refused") || !strings.Contains(notes, sqlengine.EnvMaxValue) {
		t.Fatalf("notes: %s", notes)
	}
}

// TestQuerySlots: at most MaxConcurrent coordinator queries run at once;
// another waits within its deadline, then fails as busy, naming the limit.
func TestQuerySlots(t *testing.T) {
	l := newLimiter(t, sqlengine.Options{MaxConcurrent: 1})
	n := &hostile{id: "n", rows: longRows(10)}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := Query(ctx, []Node{n}, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c) SELECT max(i) FROM c, python.t", 1, Options{Limiter: l})
		var se *sqlengine.Error
		if !errors.As(err, &se) || se.Kind != "canceled" {
			t.Errorf("the running query: want canceled, got %v", err)
		}
	}()
	for deadline := time.Now().Add(time.Minute); l.InUse() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first query never took its slot")
		}
	}
	pctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := Query(pctx, []Node{n}, "SELECT 1 FROM python.t", 1, Options{Limiter: l})
	cancel()
	wantErr(t, err, "busy", "coordinator's SQL", "1 query slots", sqlengine.EnvConcurrency)
	stop()
	wg.Wait()
	slotFreed(t, l, n)
}

// TestFunctionsAreTheEngines: the coordinator's connection has the
// engine's functions: the same bounded replacements registered, and
// every function SQLite offers refused by both with the same words, or
// by neither.
func TestFunctionsAreTheEngines(t *testing.T) {
	e, err := sqlengine.New(sqlengine.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, sqlengine.Options{})
	n := &hostile{id: "n", rows: [][]any{{int64(1), "x"}}}
	ctx := context.Background()
	fed := func(q string) (*sqlengine.Result, error) {
		return Query(ctx, []Node{n}, q, 1000, Options{Limiter: l})
	}
	names := func(rows [][]any) string {
		var s []string
		for _, r := range rows {
			s = append(s, fmt.Sprint(r...))
		}
		return strings.Join(s, ",")
	}
	// The bounded functions: registered by the application, not SQLite.
	own, err := e.QueryRows(ctx, "SELECT DISTINCT name, narg FROM pragma_function_list WHERE builtin = 0 ORDER BY 1, 2", 1000)
	if err != nil {
		t.Fatal(err)
	}
	res, err := fed("SELECT DISTINCT f.name, f.narg FROM pragma_function_list f, python.t WHERE f.builtin = 0 ORDER BY 1, 2")
	if err != nil {
		t.Fatal(err)
	}
	var got [][]any
	for _, r := range res.Rows {
		a, _ := r.Get("name")
		b, _ := r.Get("narg")
		got = append(got, []any{a, b})
	}
	if want := names(own.Rows); names(got) != want || !strings.Contains(want, "instr") {
		t.Fatalf("the coordinator's own functions are %s; the engine's %s", names(got), want)
	}
	// Every function SQLite lists, called with its number of arguments.
	all, err := e.QueryRows(ctx, "SELECT DISTINCT name, narg FROM pragma_function_list ORDER BY 1, 2", 1000)
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, r := range all.Rows {
		name, narg := r[0].(string), r[1].(int64)
		if !validIdent(name) {
			continue // operators (->, ->>)
		}
		args := strings.TrimSuffix(strings.Repeat("NULL,", int(max(narg, 1))), ",")
		if narg == 0 {
			args = ""
		}
		call := fmt.Sprintf("SELECT %s(%s)", name, args)
		_, eerr := e.QueryRows(ctx, call, 1)
		_, ferr := fed(call + " FROM python.t")
		ek, fk := kindOf(eerr), kindOf(ferr)
		if (ek == "read_only") != (fk == "read_only") || ek == "read_only" && eerr.Error() != ferr.Error() {
			t.Errorf("%s: the engine says %v; the coordinator %v", call, eerr, ferr)
		}
		if ek == "read_only" {
			refused++
		}
	}
	t.Logf("%d functions compared, %d refused by both", len(all.Rows), refused)
	if refused < 3 {
		t.Fatalf("only %d functions refused: the comparison saw no refusals", refused)
	}
	// Inputs that were quadratic or unbounded in SQLite's own functions
	// get the engine's answers (each would take minutes to hours as
	// SQLite's).
	const a4m, a2mb = "printf('%.*c', 4000000, 'a')", "(printf('%.*c', 2000000, 'a') || 'b')"
	for q, want := range map[string]string{
		"SELECT length(replace(" + a4m + ", " + a2mb + ", 'x')) AS v FROM python.t":        "4000000",
		"SELECT instr(" + a4m + " || 'b', " + a2mb + ") AS v FROM python.t":                "2000001",
		"SELECT (" + a4m + " LIKE '%" + strings.Repeat("a", 97) + "b') AS v FROM python.t": "0",
	} {
		res, err := fed(q)
		if err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
		if v, _ := res.Rows[0].Get("v"); fmt.Sprint(v) != want {
			t.Errorf("%.60s = %v, want %s", q, v, want)
		}
	}
	for q, want := range map[string]string{
		"SELECT trim(s, printf('%.*c', 300, 'b')) FROM python.t":         "256-byte limit",
		"SELECT s LIKE '" + strings.Repeat("a", 200) + "' FROM python.t": "100-byte limit",
		"SELECT length(zeroblob(999999999)) FROM python.t":               sqlengine.EnvMaxValue,
	} {
		_, err := fed(q)
		wantErr(t, err, "too_big", want)
	}
	underHalfGiB(t, l)
}

func kindOf(err error) string {
	var se *sqlengine.Error
	if errors.As(err, &se) {
		return se.Kind
	}
	return ""
}
