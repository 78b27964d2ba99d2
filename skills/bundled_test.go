package skills

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/storage/memt"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// The bundled skills, as the catalog lists them.
var bfBundledIDs = []string{
	"collective_inflight", "health_overview", "memory_growth", "persistent_straggler",
	"post_mortem", "slow_rank", "training_hang", "watchdog_timeout",
}

// bfLoadBundled loads the embedded skills through the real roots and loader,
// with no other root, and fails on any problem, warnings included.
func bfLoadBundled(t *testing.T) *Catalog {
	t.Helper()
	roots := Roots(RootOptions{Bundled: Bundled()})
	if len(roots) != 1 || roots[0].Label != LabelBundled {
		t.Fatalf("roots %+v, want only the bundled one", roots)
	}
	cat, problems := Load(roots)
	for _, p := range problems {
		t.Errorf("problem: %v", p)
	}
	if t.Failed() {
		t.FailNow()
	}
	return cat
}

func TestBundledSkillsLoad(t *testing.T) {
	cat := bfLoadBundled(t)
	var ids []string
	for _, s := range cat.Skills {
		ids = append(ids, s.ID)
	}
	sort.Strings(ids)
	if !slices.Equal(ids, bfBundledIDs) {
		t.Fatalf("skills %v, want %v", ids, bfBundledIDs)
	}
	// Every skill directory is a skill (no stray files) and every one is
	// catalogued, with a known category and related skills that exist.
	ents, err := fs.ReadDir(Bundled(), ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() && !slices.Contains(bfBundledIDs, e.Name()) {
			t.Errorf("directory %s is not a loaded skill", e.Name())
		}
	}
	data, err := fs.ReadFile(Bundled(), "catalog.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cf, err := ParseCatalog("catalog.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	cats := map[string]bool{}
	for _, c := range cf.Categories {
		cats[c.ID] = c.Label != "" && c.Description != ""
	}
	for _, e := range cf.Skills {
		if !cats[e.Category] {
			t.Errorf("catalog %s: category %q undefined or without label/description", e.ID, e.Category)
		}
		for _, r := range e.Related {
			if _, ok := cat.Get(r); !ok {
				t.Errorf("catalog %s: related %q is no skill", e.ID, r)
			}
		}
		if e.Description == "" || len(e.Tables) == 0 {
			t.Errorf("catalog %s: description and tables are required here", e.ID)
		}
	}
	if first := cat.Skills[0]; first.ID != "health_overview" || !first.Entry {
		t.Errorf("first skill %s entry=%v, want the health_overview entry", first.ID, first.Entry)
	}
	for _, s := range cat.Skills {
		t.Run(s.ID, func(t *testing.T) { bfCheckBundledSkill(t, s) })
	}
}

func bfCheckBundledSkill(t *testing.T, s *Skill) {
	if !s.Catalogued || s.Front == nil || s.Steps == nil {
		t.Fatalf("catalogued %v, SKILL.md %v, steps.yaml %v: all required", s.Catalogued, s.Front != nil, s.Steps != nil)
	}
	fm, sp := s.Front, &s.Steps.Spec
	if fm.Name != s.ID || fm.Description == "" || fm.Category != s.Category || s.Steps.Metadata.Category != s.Category {
		t.Errorf("front matter name %q category %q, metadata.category %q, catalog %q", fm.Name, fm.Category, s.Steps.Metadata.Category, s.Category)
	}
	if len(fm.Tables) == 0 || len(fm.Tags) == 0 || len(fm.Keywords.En) == 0 {
		t.Errorf("front matter needs tables, tags and keywords.en")
	}
	for _, h := range []string{"## When to use", "## Parameters", "## How to read", "## Related skills"} {
		if h == "## Parameters" && len(sp.Parameters) == 0 {
			continue
		}
		if !strings.Contains(s.Guidance, h) {
			t.Errorf("SKILL.md body lacks %q", h)
		}
	}
	// The front matter's parameters mirror steps.yaml's, in order.
	if len(fm.Parameters) != len(sp.Parameters) {
		t.Errorf("front matter has %d parameters, steps.yaml %d", len(fm.Parameters), len(sp.Parameters))
	} else {
		for i, p := range sp.Parameters {
			f := fm.Parameters[i]
			if f.Name != p.Name || f.Type != p.Type || f.Default != p.Default || f.HasDefault != p.HasDefault {
				t.Errorf("parameter %d: front matter %s %s %q, steps.yaml %s %s %q", i, f.Name, f.Type, f.Default, p.Name, p.Type, p.Default)
			}
		}
	}
	for _, p := range sp.Parameters {
		if p.Name == "use_global" || !p.HasDefault || p.Description == "" {
			t.Errorf("parameter %s: want a default and a description, and no use_global (local tables only)", p.Name)
		}
	}
	if len(sp.Rules) == 0 || (sp.SummaryTemplate == "") == (sp.VerdictStep == "") || len(sp.NextSteps) == 0 {
		t.Errorf("rules, next_steps and a summary (summary_template, or a verdict_step's diagnosis) are required here")
	}
	for _, r := range sp.Rules {
		if r.Cond == nil {
			t.Errorf("rule %s did not parse", r.ID)
		}
	}
	for _, st := range sp.Steps {
		if st.When != "" || st.Cluster || st.Platform != "" {
			t.Errorf("step %s: when/cluster/platform are not for local skills", st.ID)
		}
	}
}

var bfLeftoverRE = regexp.MustCompile(`\{[A-Za-z_][A-Za-z0-9_]*\}`)

func TestBundledSkillsExpandWithDefaults(t *testing.T) {
	cat := bfLoadBundled(t)
	for _, s := range cat.Skills {
		b, err := s.Bind(nil, BindOptions{PeerCount: func() (int, error) { return 7, nil }})
		if err != nil {
			t.Fatalf("%s: %v", s.ID, err)
		}
		if b.UseGlobal {
			t.Errorf("%s: use_global resolved true with peers", s.ID)
		}
		for i := range s.Steps.Spec.Steps {
			st := &s.Steps.Spec.Steps[i]
			e, err := b.Expand(st)
			if err != nil {
				t.Errorf("%s/%s: %v", s.ID, st.ID, err)
				continue
			}
			if e.SkipReason != "" || e.Fanout {
				t.Errorf("%s/%s: skip %q fanout %v", s.ID, st.ID, e.SkipReason, e.Fanout)
			}
			switch e.Type {
			case StepSQL:
				if m := bfLeftoverRE.FindString(e.SQL); m != "" {
					t.Errorf("%s/%s: %s left in the SQL", s.ID, st.ID, m)
				}
			case StepTool:
				if !slices.Contains([]string{"diagnose_hang", "get_stacks", "list_processes", "snapshot_flight_recorder", "analyze_flight_recorder"}, e.Tool) {
					t.Errorf("%s/%s: unexpected tool %s", s.ID, st.ID, e.Tool)
				}
			default:
				t.Errorf("%s/%s: step type %s", s.ID, st.ID, e.Type)
			}
		}
	}
	// post_mortem's dumps reach analyze_flight_recorder as a JSON list of
	// one path (the tool's paths is a list), quotes and all.
	s, _ := cat.Get("post_mortem")
	e, err := s.Expand("analyze_dumps", map[string]string{"dumps": "/tmp/it's/nccl_trace_rank_"})
	var paths []string
	if err != nil || json.Unmarshal([]byte(e.Args["paths"]), &paths) != nil || !slices.Equal(paths, []string{"/tmp/it's/nccl_trace_rank_"}) {
		t.Fatalf("analyze_dumps: %v %v", e.Args, err)
	}
}

// --- fixtures written with the Go MEMT writer ---

// bfCols builds MEMT columns from "name:type" pairs.
func bfCols(spec string) []memt.Column {
	types := map[string]memt.DType{"i64": memt.I64, "f64": memt.F64, "str": memt.Str}
	var cols []memt.Column
	for _, f := range strings.Fields(spec) {
		name, typ, _ := strings.Cut(f, ":")
		cols = append(cols, memt.Column{Name: name, Type: types[typ]})
	}
	return cols
}

const (
	bfCommSpec   = "timestamp:i64 micro_step:i64 local_step:i64 global_step:i64 micro_batches:i64 rank:i64 world_size:i64 role:str op:str group_rank:i64 group_size:i64 participate_ranks:str tensor_shape:str tensor_dtype:str bytes:i64 duration_ms:f64 async_op:i64 group_seq:i64"
	bfTimingSpec = "timestamp:i64 micro_step:i64 local_step:i64 global_step:i64 micro_batches:i64 rank:i64 world_size:i64 role:str step_duration_sec:f64 is_shadow:i64 sampled:i64 shadow_normal:i64 shadow_baseline:i64 sample_rate:f64 sample_mode:str"
	bfTraceSpec  = "timestamp:i64 micro_step:i64 local_step:i64 global_step:i64 micro_batches:i64 seq:i64 module:str stage:str allocated:f64 max_allocated:f64 cached:f64 max_cached:f64 time_offset:f64 duration:f64 allocated_delta:f64 max_allocated_delta:f64 rank:i64 world_size:i64 role:str"
	bfPgSpec     = "timestamp:i64 snapshot_id:i64 rank:i64 world_size:i64 pg_id:str pg_name:str pg_desc:str ranks:str last_enqueued_collective:i64 last_started_collective:i64 last_completed_collective:i64"
)

// ring writes one ring file with rows given as plain Go values.
func bfRing(t *testing.T, path, spec string, rows [][]any) *memt.Writer {
	t.Helper()
	cols := bfCols(spec)
	w, err := memt.Create(path, cols, memt.Options{ChunkSize: 64 << 10, NumChunks: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	for _, r := range rows {
		if len(r) != len(cols) {
			t.Fatalf("%s: row of %d values for %d columns", path, len(r), len(cols))
		}
		b := w.Row()
		for i, v := range r {
			switch cols[i].Type {
			case memt.I64:
				b = b.I64(int64(v.(int)))
			case memt.F64:
				b = b.F64(v.(float64))
			default:
				b = b.Str(v.(string))
			}
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// Planted faults of the fixture job (4 ranks, one process each):
//   - rank 2 is the straggler: ~2 ms per collective while its peers wait
//     ~40 ms in each;
//   - then it hangs outside NCCL: its last group_seq is 100 (finished)
//     while ranks 0, 1 and 3 entered all_reduce group_seq 101 five minutes
//     ago and never returned (duration_ms = -1);
//   - rank 1 leaks: its allocated memory grows 40 MB every step;
//   - the Flight Recorder status shows rank 2 one collective short of
//     enqueueing what the others did.
const (
	bfFixtureRanks  = 4
	bfFixtureSteps  = 20
	bfCallsPerStep  = 5
	bfStuckSeq      = bfFixtureSteps*bfCallsPerStep + 1 // 101
	bfStraggler     = 2
	bfLeakyRank     = 1
	bfHungSecondAgo = 300
)

var bfFixturePIDs = []int{3999101, 3999102, 3999103, 3999104}

type bfFixture struct {
	dir     string
	writers []*memt.Writer
}

func bfWriteFixture(t *testing.T) *bfFixture {
	t.Helper()
	f := &bfFixture{dir: t.TempDir()}
	now := time.Now().UnixMicro()
	hungAt := now - bfHungSecondAgo*1_000_000
	start := hungAt - int64(bfFixtureSteps+1)*10_000_000 // one step every 10 s before the hang
	const group = "[0, 1, 2, 3]"
	for r := 0; r < bfFixtureRanks; r++ {
		pdir := filepath.Join(f.dir, fmt.Sprint(bfFixturePIDs[r]))
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			t.Fatal(err)
		}
		id, _ := json.Marshal(map[string]any{"rank": r, "node_rank": 0, "local_rank": r})
		if err := os.WriteFile(filepath.Join(pdir, ".identity.json"), id, 0o644); err != nil {
			t.Fatal(err)
		}
		var comm, timing, trace [][]any
		seq := 0
		for step := 1; step <= bfFixtureSteps; step++ {
			stepStart := start + int64(step-1)*10_000_000
			for k := 0; k < bfCallsPerStep; k++ {
				seq++
				d := 40.0 + float64(r) + float64(k)/10
				if r == bfStraggler {
					d = 2.0 + float64(k)/10
				}
				comm = append(comm, []any{int(stepStart) + k*1000, step, step, step, 1, r, bfFixtureRanks, "dp=" + fmt.Sprint(r),
					"all_reduce", r, bfFixtureRanks, group, "(1024,)", "torch.bfloat16", 2048, d, 0, seq})
			}
			timing = append(timing, []any{int(stepStart) + 9_000_000, step, step, step, 1, r, bfFixtureRanks, "", 9.5 + float64(r)/100, 0, 1, 4, 1, 1.0, "random"})
			alloc := 1000.0 + float64(step%2) // flat, with noise
			if r == bfLeakyRank {
				alloc = 1000.0 + 40*float64(step)
			}
			for i, mod := range []string{"model.layers.0", "model.layers.1"} {
				delta := 0.0
				if r == bfLeakyRank && i == 1 {
					delta = 40
				}
				trace = append(trace, []any{int(stepStart) + 1000*i, step, step, step, 1, i, mod, "post forward",
					alloc, alloc + 500, alloc + 1000, alloc + 1500, 0.1, 0.05, delta, 0.0, r, bfFixtureRanks, ""})
			}
		}
		if r != bfStraggler { // the peers entered the next all_reduce and wait in it
			comm = append(comm, []any{int(hungAt), bfFixtureSteps + 1, bfFixtureSteps + 1, bfFixtureSteps + 1, 1, r, bfFixtureRanks, "dp=" + fmt.Sprint(r),
				"all_reduce", r, bfFixtureRanks, group, "(1024,)", "torch.bfloat16", 2048, -1.0, 0, bfStuckSeq})
		}
		enq := bfStuckSeq
		if r == bfStraggler {
			enq = bfStuckSeq - 1
		}
		pg := [][]any{{int(now), int(now) * 1000, r, bfFixtureRanks, "0", "0", "default_pg", group, enq, -1, bfStuckSeq - 1}}
		f.writers = append(f.writers,
			bfRing(t, filepath.Join(pdir, "python.comm_collective"), bfCommSpec, comm),
			bfRing(t, filepath.Join(pdir, "python.torch_step_timing"), bfTimingSpec, timing),
			bfRing(t, filepath.Join(pdir, "python.torch_trace"), bfTraceSpec, trace),
			bfRing(t, filepath.Join(pdir, "python.torch_nccl_pg_status"), bfPgSpec, pg))
	}
	return f
}

// kill makes every writer of the fixture dead: the files are closed and
// their creator pid set to one no process has (as a crashed job leaves them).
func (f *bfFixture) kill(t *testing.T) {
	t.Helper()
	for _, w := range f.writers {
		w.Close()
	}
	err := filepath.WalkDir(f.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint32(b[40:], 0x3ffffff0)
		return os.WriteFile(p, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Tables that the fixture has no rings for: a step reading one of them
// must fail with "no such table" and must be marked on_empty: skip, so the
// runner skips it instead of failing the skill. Every other step must run.
var bfFixtureLacks = []string{"python.trace_event", "cpu.utilization", "gpu.utilization",
	"history.fr_snapshots", "history.stack_captures", "history.diagnoses"}

var bfTableRefRE = regexp.MustCompile(`\b(python|cpu|gpu|history|probing|nccl|process)\.([a-z_]+)\b`)

// bfOutcome is one skill run over the real engine: the SQL evidence as the
// runner builds it (§6.4: zero rows with skip = no evidence; with warn =
// evidence of zero rows), and the findings of the skill's rules.
type bfOutcome struct {
	results  map[string]*sqlengine.Result
	evidence map[string]*Table
	findings map[string]Finding
}

func bfRunSQL(t *testing.T, e *sqlengine.Engine, s *Skill, lacks []string) bfOutcome {
	t.Helper()
	b, err := s.Bind(nil, BindOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := bfOutcome{results: map[string]*sqlengine.Result{}, evidence: map[string]*Table{}, findings: map[string]Finding{}}
	env := &Env{Params: b.Values, Evidence: out.evidence}
	for i := range s.Steps.Spec.Steps {
		st := &s.Steps.Spec.Steps[i]
		env.Order = append(env.Order, st.ID)
		ex, err := b.Expand(st)
		if err != nil {
			t.Fatalf("%s/%s: %v", s.ID, st.ID, err)
		}
		if ex.Type != StepSQL {
			continue
		}
		var missing []string
		for _, m := range bfTableRefRE.FindAllString(ex.SQL, -1) {
			if slices.Contains(lacks, m) && !slices.Contains(missing, m) {
				missing = append(missing, m)
			}
		}
		res, err := e.Query(context.Background(), ex.SQL, 200)
		switch {
		case len(missing) > 0:
			if err == nil || !strings.Contains(err.Error(), "no such table") {
				t.Errorf("%s/%s reads %v, absent from the fixture: want a no-such-table error, got %v", s.ID, st.ID, missing, err)
			}
			if ex.OnEmpty != "skip" {
				t.Errorf("%s/%s reads %v that may be absent, so it must be on_empty: skip, not %s", s.ID, st.ID, missing, ex.OnEmpty)
			}
			continue
		case err != nil:
			t.Errorf("%s/%s: SQL error: %v\n%s", s.ID, st.ID, err, ex.SQL)
			continue
		}
		out.results[st.ID] = res
		if res.RowCount == 0 && ex.OnEmpty == "skip" {
			continue
		}
		tb := &Table{Columns: res.Columns}
		for _, r := range res.Rows {
			tb.Rows = append(tb.Rows, r.Values())
		}
		out.evidence[st.ID] = tb
	}
	for _, f := range Evaluate(s.Steps.Spec.Rules, env) {
		out.findings[f.RuleID] = f
		if bfLeftoverRE.MatchString(f.Message) {
			t.Errorf("%s: finding %s has an unexpanded placeholder: %s", s.ID, f.RuleID, f.Message)
		}
	}
	if sum := ExpandMessage(s.Steps.Spec.SummaryTemplate, env); sum == "" && s.Steps.Spec.VerdictStep == "" {
		t.Errorf("%s: empty summary", s.ID)
	}
	return out
}

func (o bfOutcome) col(t *testing.T, step, col string) []any {
	t.Helper()
	res := o.results[step]
	if res == nil {
		t.Fatalf("step %s has no result", step)
	}
	var out []any
	for _, r := range res.Rows {
		v, ok := r.Get(col)
		if !ok {
			t.Fatalf("step %s has no column %s (columns %v)", step, col, res.Columns)
		}
		out = append(out, v)
	}
	return out
}

func (o bfOutcome) first(t *testing.T, step, col string) float64 {
	t.Helper()
	vs := o.col(t, step, col)
	if len(vs) == 0 {
		t.Fatalf("step %s returned no rows", step)
	}
	f, ok := number(vs[0])
	if !ok {
		t.Fatalf("step %s column %s: %T %v is not a number", step, col, vs[0], vs[0])
	}
	return f
}

func (o bfOutcome) wantFindings(t *testing.T, want, notWant []string) {
	t.Helper()
	for _, id := range want {
		if _, ok := o.findings[id]; !ok {
			t.Errorf("finding %s missing; got %v", id, o.findingIDs())
		}
	}
	for _, id := range notWant {
		if f, ok := o.findings[id]; ok {
			t.Errorf("finding %s must not fire: %s", id, f.Message)
		}
	}
}

func (o bfOutcome) findingIDs() []string {
	var ids []string
	for id := range o.findings {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func bfInts(t *testing.T, vs []any) []int {
	t.Helper()
	var out []int
	for _, v := range vs {
		f, ok := number(v)
		if !ok {
			t.Fatalf("%T %v is not a number", v, v)
		}
		out = append(out, int(f))
	}
	return out
}

// TestBundledSQLOnHungJob runs every SQL step of every bundled skill
// through the real engine over a live (hung) fixture job and checks that
// the planted faults come out as rows and findings.
func TestBundledSQLOnHungJob(t *testing.T) {
	cat := bfLoadBundled(t)
	f := bfWriteFixture(t)
	e, err := sqlengine.New(sqlengine.Options{DataDir: f.dir, Host: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	run := map[string]bfOutcome{}
	for _, s := range cat.Skills {
		run[s.ID] = bfRunSQL(t, e, s, bfFixtureLacks)
	}

	t.Run("training_hang", func(t *testing.T) {
		o := run["training_hang"]
		if r := o.first(t, "last_collective_per_rank", "rank"); r != bfStraggler {
			t.Errorf("most behind rank %v, want %d", r, bfStraggler)
		}
		if got := bfInts(t, o.col(t, "last_collective_per_rank", "last_seq")); !slices.Equal(got, []int{bfStuckSeq - 1, bfStuckSeq, bfStuckSeq, bfStuckSeq}) {
			t.Errorf("last group_seq per rank %v", got)
		}
		if o.first(t, "last_collective_per_rank", "seq_behind") != 1 || o.first(t, "last_collective_per_rank", "unfinished") != 0 {
			t.Errorf("rank 2 must be 1 behind and not inside a call")
		}
		if got := bfInts(t, o.col(t, "unfinished_collectives", "rank")); !slices.Equal(bfSorted(got), []int{0, 1, 3}) {
			t.Errorf("unfinished on ranks %v, want 0,1,3", got)
		}
		if age := o.first(t, "unfinished_collectives", "age_s"); age < bfHungSecondAgo-5 || age > bfHungSecondAgo+60 {
			t.Errorf("age_s %v, want about %d", age, bfHungSecondAgo)
		}
		// Its findings are the diagnosis's (the verdict step, a tool): the
		// SQL rules name no rank.
		o.wantFindings(t, nil, []string{"kernel_wait"})
	})

	t.Run("collective_inflight", func(t *testing.T) {
		o := run["collective_inflight"]
		if got := bfInts(t, o.col(t, "inflight_calls", "group_seq")); !slices.Equal(got, []int{bfStuckSeq, bfStuckSeq, bfStuckSeq}) {
			t.Errorf("in-flight group_seq %v", got)
		}
		if o.first(t, "inflight_by_group", "ranks_inside") != 3 || o.first(t, "inflight_by_group", "not_inside") != 1 {
			t.Errorf("want 3 of 4 inside: %v", o.results["inflight_by_group"].Rows)
		}
		if got := bfInts(t, o.col(t, "members_not_arrived", "rank")); !slices.Equal(got, []int{bfStraggler}) {
			t.Errorf("members not arrived %v, want [2]", got)
		}
		o.wantFindings(t, []string{"stuck_collective", "member_not_arrived", "partial_group"}, []string{"member_elsewhere"})
	})

	t.Run("slow_rank", func(t *testing.T) {
		o := run["slow_rank"]
		if r := o.first(t, "rank_comm_time", "rank"); r != bfStraggler {
			t.Errorf("least time in collectives: rank %v, want %d", r, bfStraggler)
		}
		if got := bfInts(t, o.col(t, "straggler_candidate", "rank")); !slices.Equal(got, []int{bfStraggler}) {
			t.Errorf("straggler candidates %v", got)
		}
		if w := o.first(t, "straggler_candidate", "wait_ratio"); w < 10 {
			t.Errorf("wait ratio %v", w)
		}
		if n := len(o.col(t, "rank_step_time", "rank")); n != bfFixtureRanks {
			t.Errorf("step time for %d ranks", n)
		}
		o.wantFindings(t, []string{"straggler", "comm_time_imbalance"}, []string{"step_time_imbalance"})
	})

	t.Run("persistent_straggler", func(t *testing.T) {
		o := run["persistent_straggler"]
		if o.first(t, "straggler_fraction", "rank") != bfStraggler || o.first(t, "straggler_fraction", "straggler_fraction") != 1 {
			t.Errorf("straggler_fraction %v", o.results["straggler_fraction"].Rows)
		}
		if got := bfInts(t, o.col(t, "persistent_offenders", "rank")); !slices.Equal(got, []int{bfStraggler}) {
			t.Errorf("offenders %v", got)
		}
		o.wantFindings(t, []string{"chronic_straggler", "single_dominant"}, []string{"shared_cause"})
	})

	t.Run("memory_growth", func(t *testing.T) {
		o := run["memory_growth"]
		if got := bfInts(t, o.col(t, "monotonic_ranks", "rank")); !slices.Equal(got, []int{bfLeakyRank}) {
			t.Errorf("monotonic ranks %v, want [1]", got)
		}
		if g := o.first(t, "growth_per_rank", "growth_mb"); g != 40*(bfFixtureSteps-3) {
			t.Errorf("growth %v MB, want %d (steps 3..20)", g, 40*(bfFixtureSteps-3))
		}
		if o.first(t, "monotonic_ranks", "rising_fraction") != 1 {
			t.Errorf("rising fraction %v", o.results["monotonic_ranks"].Rows)
		}
		if n := len(o.col(t, "memory_by_step", "rank")); n != bfFixtureRanks*(bfFixtureSteps-2) {
			t.Errorf("memory_by_step rows %d", n)
		}
		o.wantFindings(t, []string{"sustained_growth", "large_delta_module"}, []string{"critical_device_memory", "device_memory_growth"})
	})

	t.Run("watchdog_timeout", func(t *testing.T) {
		o := run["watchdog_timeout"]
		if o.first(t, "pg_status", "rank") != bfStraggler || o.first(t, "pg_status", "enqueue_lag") != 1 {
			t.Errorf("pg_status %v", o.results["pg_status"].Rows)
		}
		if o.first(t, "pending_per_group", "ranks_with_pending") != 3 {
			t.Errorf("pending %v", o.results["pending_per_group"].Rows)
		}
		// The culprit is the diagnosis's (the verdict step); no SQL rule
		// names one.
		o.wantFindings(t, []string{"pending_collectives"}, []string{"completion_lag", "rank_not_enqueued", "comm_lagging_rank"})
	})

	t.Run("health_overview", func(t *testing.T) {
		o := run["health_overview"]
		tables := o.col(t, "available_tables", "table_name")
		for _, want := range []string{"comm_collective", "torch_step_timing", "torch_trace", "torch_nccl_pg_status"} {
			if !slices.Contains(tables, any(want)) {
				t.Errorf("available_tables lacks %s: %v", want, tables)
			}
		}
		if got := bfInts(t, o.col(t, "writers", "writer_alive")); !slices.Equal(got, []int{1, 1, 1, 1}) {
			t.Errorf("writers alive %v", got)
		}
		if o.first(t, "collective_progress", "unfinished") != 1 {
			t.Errorf("collective_progress %v", o.results["collective_progress"].Rows)
		}
		o.wantFindings(t, []string{"training_active", "training_stalled", "collectives_in_flight"}, []string{"no_tables", "dead_writers", "writes_blocked", "ring_overwrite", "high_gpu_mem"})
	})

	t.Run("post_mortem_while_alive", func(t *testing.T) {
		o := run["post_mortem"]
		if o.first(t, "ring_summary", "alive_pids") != bfFixtureRanks || o.first(t, "ring_summary", "dead_pids") != 0 {
			t.Errorf("ring_summary %v", o.results["ring_summary"].Rows)
		}
		o.wantFindings(t, []string{"died_in_collective"}, []string{"died_behind", "job_dead", "some_dead", "prior_diagnoses", "stored_snapshots"})
	})
}

// TestBundledSQLOnDeadJob: the same job after it died (every writer gone)
// with a history database holding what the server stored while it ran.
func TestBundledSQLOnDeadJob(t *testing.T) {
	cat := bfLoadBundled(t)
	f := bfWriteFixture(t)
	f.kill(t)
	hpath := filepath.Join(t.TempDir(), "history.db")
	h, err := history.Open(hpath, history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rank := 2
	if _, err := h.AddSnapshot(history.Snapshot{Rank: &rank, Source: "/tmp/nccl_trace_rank_2", Format: "json", Entries: 3, Data: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.AddStackCapture(history.StackCapture{Rank: &rank, Method: "agent", ThreadCount: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.AddDiagnosis(history.Diagnosis{Kind: "flight_recorder", Verdict: "rank 2 never joined all_reduce seq 101", CulpritRanks: "2"}); err != nil {
		t.Fatal(err)
	}
	h.Close()
	e, err := sqlengine.New(sqlengine.Options{DataDir: f.dir, HistoryPath: hpath, Host: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	lacks := []string{"python.trace_event", "cpu.utilization", "gpu.utilization"}

	s, _ := cat.Get("post_mortem")
	o := bfRunSQL(t, e, s, lacks)
	if o.first(t, "ring_summary", "dead_pids") != bfFixtureRanks || o.first(t, "ring_summary", "alive_pids") != 0 {
		t.Errorf("ring_summary %v", o.results["ring_summary"].Rows)
	}
	if got := bfInts(t, o.col(t, "dead_writers", "pid")); !slices.Equal(got, bfFixturePIDs) {
		t.Errorf("dead pids %v", got)
	}
	if o.first(t, "last_collective_per_rank", "rank") != bfStraggler {
		t.Errorf("last_collective_per_rank %v", o.results["last_collective_per_rank"].Rows)
	}
	for _, step := range []string{"stored_fr_snapshots", "stored_stack_captures", "stored_diagnoses"} {
		if n := len(o.col(t, step, "id")); n != 1 {
			t.Errorf("%s: %d rows", step, n)
		}
	}
	o.wantFindings(t, []string{"job_dead", "died_in_collective", "prior_diagnoses", "stored_snapshots"}, []string{"died_behind", "some_dead", "ring_history_lost"})
	if m := o.findings["prior_diagnoses"].Message; !strings.Contains(m, "⟦rank 2 never joined") || !strings.Contains(m, "culprit ranks 2") {
		t.Errorf("prior_diagnoses message: %s", m)
	}

	s, _ = cat.Get("health_overview")
	o = bfRunSQL(t, e, s, lacks)
	o.wantFindings(t, []string{"dead_writers"}, []string{"no_tables"})

	// Every other skill's SQL still runs over the dead job's rings.
	for _, s := range cat.Skills {
		bfRunSQL(t, e, s, lacks)
	}
}

// TestBundledSQLOnEmptyDataDir: with no rings at all, steps reading the
// engine's own tables still answer, health_overview says so, and every
// step reading a ring is on_empty: skip — except those that must abort.
func TestBundledSQLOnEmptyDataDir(t *testing.T) {
	cat := bfLoadBundled(t)
	e, err := sqlengine.New(sqlengine.Options{DataDir: t.TempDir(), Host: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range cat.Skills {
		b, err := s.Bind(nil, BindOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range s.Steps.Spec.Steps {
			st := &s.Steps.Spec.Steps[i]
			ex, _ := b.Expand(st)
			if ex.Type != StepSQL {
				continue
			}
			_, err := e.Query(context.Background(), ex.SQL, 200)
			readsRing := false
			for _, m := range bfTableRefRE.FindAllString(ex.SQL, -1) {
				readsRing = readsRing || !strings.HasPrefix(m, "probing.")
			}
			switch {
			case !readsRing && err != nil:
				t.Errorf("%s/%s reads only engine tables but failed: %v", s.ID, st.ID, err)
			case readsRing && err == nil:
				t.Errorf("%s/%s: a ring table of an empty data dir answered", s.ID, st.ID)
			case readsRing && ex.OnEmpty == "warn":
				t.Errorf("%s/%s: on_empty warn on a ring table would turn a missing table into an error", s.ID, st.ID)
			}
		}
	}
	s, _ := cat.Get("health_overview")
	o := bfRunSQL(t, e, s, []string{"python.comm_collective", "python.torch_step_timing", "gpu.utilization"})
	o.wantFindings(t, []string{"no_tables"}, []string{"dead_writers", "training_active"})
}

func bfSorted(v []int) []int { v = slices.Clone(v); slices.Sort(v); return v }
