package flightrecorder_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/flightrecorder/pickle"
)

// Hostile dumps: each costs memory in proportion to its bytes, and what
// is refused is a problem naming the file, the value and the ceiling. The
// sizes are those of the attacks found on the old code, whose cost is
// quoted in each test.

// allocated runs f and returns the bytes it allocated (TotalAlloc bounds
// the peak too). Tests using it do not run in parallel.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

const goodEntry = `{"process_group": ["0", "default_pg"], "collective_seq_id": 1, "profiling_name": "nccl:all_reduce",
 "input_sizes": [[4]], "output_sizes": [[4]], "input_dtypes": ["Float"], "output_dtypes": ["Float"], "state": "completed"}`

// jsonDump is a one-group JSON dump whose pg_config lists ranks (a list
// literal string) with the given entries (a JSON array's items).
func jsonDump(ranks, entries string) []byte {
	return []byte(`{"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "` + ranks +
		`"}}, "pg_status": {}, "entries": [` + entries + `]}`)
}

func loadAnalyze(t *testing.T, dir string) (*fr.Loaded, *fr.Report, uint64) {
	t.Helper()
	var l *fr.Loaded
	var r *fr.Report
	got := allocated(func() {
		var err error
		if l, err = fr.Load([]string{dir}, fr.LoadOptions{}); err != nil {
			t.Fatal(err)
		}
		r = fr.AnalyzeLoaded(l, fr.Options{})
	})
	return l, r, got
}

func wantProblem(t *testing.T, l *fr.Loaded, file string, parts ...string) {
	t.Helper()
	p := problemFor(l, file)
	for _, want := range parts {
		if !strings.Contains(p, want) {
			t.Errorf("%s: problem %q, want it to name %q", file, p, want)
		}
	}
}

func dumpedRanks(l *fr.Loaded) []int {
	var out []int
	for _, d := range l.Dumps {
		out = append(out, d.Rank)
	}
	return out
}

// TestRankCeilingInPGConfig: a 200-byte dump whose pg_config names rank
// 10^8 is refused by name (the old code allocated 16 bytes per rank number
// up to it: 1.5 GB); the other rank is still analysed.
func TestRankCeilingInPGConfig(t *testing.T) {
	dir := t.TempDir()
	attack := jsonDump("[0, 100000000]", goodEntry)
	write(t, filepath.Join(dir, "nccl_trace_rank_0"), attack)
	write(t, filepath.Join(dir, "nccl_trace_rank_1"), jsonDump("[0, 1]", goodEntry))
	l, r, got := loadAnalyze(t, dir)
	t.Logf("%d-byte dump naming rank 10^8: %d bytes allocated", len(attack), got)
	if got > 64<<20 {
		t.Errorf("allocated %d bytes", got)
	}
	wantProblem(t, l, "nccl_trace_rank_0", "100000000", "1048576", "PROBING_FR_MAX_RANKS")
	if rs := dumpedRanks(l); len(rs) != 1 || rs[0] != 1 || r.Verdict == "" {
		t.Errorf("dumps %v, verdict %q", rs, r.Verdict)
	}
}

// TestRankCeilingInFileName: a file named for rank 10^8 (old code: 780 MB)
// or 2^31-1 (over 8 GB) is refused by name; rank 0 is still analysed.
func TestRankCeilingInFileName(t *testing.T) {
	for _, rank := range []string{"100000000", "2147483647"} {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "nccl_trace_rank_"+rank), jsonDump("[0, 1]", goodEntry))
		write(t, filepath.Join(dir, "nccl_trace_rank_0"), jsonDump("[0, 1]", goodEntry))
		l, _, got := loadAnalyze(t, dir)
		t.Logf("file named for rank %s: %d bytes allocated", rank, got)
		if got > 64<<20 {
			t.Errorf("rank %s: allocated %d bytes", rank, got)
		}
		wantProblem(t, l, "nccl_trace_rank_"+rank, rank, "1048576", "PROBING_FR_MAX_RANKS")
		if rs := dumpedRanks(l); len(rs) != 1 || rs[0] != 0 {
			t.Errorf("rank %s: dumps %v", rank, rs)
		}
	}
}

// repeatedEntryPickle is a dump whose entries list holds one entry dict
// and then n memo references to it (2 bytes each).
func repeatedEntryPickle(n int) []byte {
	w := pickle.NewWriter()
	w.BeginDict()
	w.String("version")
	w.String("2.10")
	w.String("pg_config")
	w.BeginDict()
	w.String("0")
	w.BeginDict()
	w.String("name")
	w.String("0")
	w.String("desc")
	w.String("default_pg")
	w.String("ranks")
	w.String("[0, 1]")
	w.EndDict()
	w.EndDict()
	w.String("entries")
	w.BeginList()
	w.BeginDict()
	for _, k := range []string{"collective_seq_id", "record_id", "pg_id", "op_id"} {
		w.String(k)
		w.Int(1)
	}
	w.String("process_group")
	w.String("0")
	w.String("default_pg")
	w.Tuple2()
	w.String("profiling_name")
	w.String("nccl:all_reduce")
	w.String("state")
	w.String("completed")
	for _, k := range []string{"input_sizes", "output_sizes"} {
		w.String(k)
		w.BeginList()
		w.BeginList()
		w.Int(4)
		w.EndList()
		w.EndList()
	}
	w.EndDict()
	id := w.Memo()
	for i := 0; i < n; i++ {
		w.Get(id)
	}
	w.EndList()
	w.EndDict()
	return w.Finish()
}

// TestRepeatedEntryReferences: an 8 MB pickle whose entries are memo
// references to one entry dict (old code: 2.8 GB) decodes that entry once.
func TestRepeatedEntryReferences(t *testing.T) {
	dir := t.TempDir()
	attack := repeatedEntryPickle(4 << 20)
	write(t, filepath.Join(dir, "nccl_trace_rank_0"), attack)
	write(t, filepath.Join(dir, "nccl_trace_rank_1"), jsonDump("[0, 1]", goodEntry))
	l, r, got := loadAnalyze(t, dir)
	t.Logf("%d-byte pickle of repeated entry references: %d bytes allocated", len(attack), got)
	// The pickle itself costs 16 bytes a value, on the stack and then in its
	// container, while it is decoded.
	if ceiling := uint64(64*len(attack) + 64<<20); got > ceiling {
		t.Errorf("allocated %d bytes, over %d", got, ceiling)
	}
	if len(l.Dumps) != 2 || len(l.Dumps[0].Entries) != 1 {
		t.Fatalf("%d dumps, rank 0 has %d entries", len(l.Dumps), len(l.Dumps[0].Entries))
	}
	if w := strings.Join(r.DataQuality.Warnings, "\n"); !strings.Contains(w, "4194304 entries repeat") {
		t.Errorf("warnings do not count the repeats:\n%s", w)
	}
}

// TestEmptyJSONEntries: 5 M empty JSON entries (15 MB; old code: 5.8 GB
// and 23 s) are counted, not materialised.
func TestEmptyJSONEntries(t *testing.T) {
	dir := t.TempDir()
	const n = 5_000_000
	attack := jsonDump("[0, 1]", goodEntry+strings.Repeat(",{}", n))
	write(t, filepath.Join(dir, "nccl_trace_rank_0"), attack)
	write(t, filepath.Join(dir, "nccl_trace_rank_1"), jsonDump("[0, 1]", goodEntry))
	l, r, got := loadAnalyze(t, dir)
	t.Logf("%d-byte dump of %d empty entries: %d bytes allocated", len(attack), n, got)
	if ceiling := uint64(8*len(attack) + 64<<20); got > ceiling {
		t.Errorf("allocated %d bytes, over %d", got, ceiling)
	}
	if len(l.Dumps) != 2 || len(l.Dumps[0].Entries) != 1 {
		t.Fatalf("%d dumps, rank 0 has %d entries", len(l.Dumps), len(l.Dumps[0].Entries))
	}
	if w := strings.Join(r.DataQuality.Warnings, "\n"); !strings.Contains(w, fmt.Sprintf("%d entries have no \"process_group\"", n)) {
		t.Errorf("warnings do not count the empty entries:\n%s", w)
	}
	if r.Verdict != fr.VerdictOK {
		t.Errorf("verdict %s: %s", r.Verdict, r.Summary)
	}
}

// TestPGConfigGroupCeiling: a 26 MB pg_config of 1 M groups (old code:
// 7.3 GB) is refused by name.
func TestPGConfigGroupCeiling(t *testing.T) {
	dir := t.TempDir()
	var b bytes.Buffer
	b.WriteString(`{"version": "2.10", "pg_config": {`)
	for i := 0; i < 1_000_000; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%d":{"ranks":"[0]"}`, i)
	}
	b.WriteString(`}, "entries": [` + goodEntry + `]}`)
	write(t, filepath.Join(dir, "nccl_trace_rank_0"), b.Bytes())
	write(t, filepath.Join(dir, "nccl_trace_rank_1"), jsonDump("[0, 1]", goodEntry))
	l, _, got := loadAnalyze(t, dir)
	t.Logf("%d-byte pg_config of 1M groups: %d bytes allocated", b.Len(), got)
	if ceiling := uint64(4*b.Len() + 64<<20); got > ceiling {
		t.Errorf("allocated %d bytes, over %d", got, ceiling)
	}
	wantProblem(t, l, "nccl_trace_rank_0", "pg_config", "65536", "PROBING_FR_MAX_GROUPS")
	if rs := dumpedRanks(l); len(rs) != 1 || rs[0] != 1 {
		t.Errorf("dumps %v", rs)
	}
}

// TestProblemsQuoteNoContent: a file that is not a dump is described by
// what it is not and its first byte, never by its bytes (the old message
// quoted them: starts with "AWS_SECR"), and no decoding error quotes a
// value from the file.
func TestProblemsQuoteNoContent(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"nccl_trace_rank_3": "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG\n",
		"nccl_trace_rank_4": `{"version": "SECRET-TOKEN", "entries": []}`,
		"nccl_trace_rank_5": `{"version": "2.10", "entries": [SECRETXYZ]}`,
		"nccl_trace_rank_6": `{"version": "2.10", "pg_config": {"0": {"ranks": "[0, SECRETXYZ]"}}}`,
		"nccl_trace_rank_7": "\x80\x02cSECRETXYZ\nsystem\n.",
		"nccl_trace_rank_8": `{"version": "2.10", "pg_status": {"0": {"last_enqueued_collective": "SECRETXYZ"}}}`,
		"nccl_trace_rank_9": `{"version": "2.10", "pg_config": {"0": {"ranks": ["SECRETXYZ"]}}}`,
	}
	var paths []string
	for name, content := range files {
		p := filepath.Join(dir, name)
		write(t, p, []byte(content))
		paths = append(paths, p)
	}
	l, err := fr.Load(paths, fr.LoadOptions{})
	if err == nil {
		t.Fatalf("loaded %d dumps", len(l.Dumps))
	}
	msg := strings.ReplaceAll(err.Error(), dir, "DIR")
	for _, p := range l.Problems {
		msg += "\n" + p.Problem
	}
	for _, leak := range []string{"AWS", "wJalr", "SECRET", "TOKEN"} {
		if strings.Contains(msg, leak) {
			t.Errorf("a problem quotes the file's bytes (%q):\n%s", leak, msg)
		}
	}
	if !strings.Contains(msg, "first byte is 0x41") || len(l.Problems) != len(files) {
		t.Errorf("%d problems for %d files; the non-dump's first byte is not named:\n%s", len(l.Problems), len(files), msg)
	}
}

// TestSparseRanksWithinCeiling: ranks far apart but under a raised ceiling
// cost memory for the ranks present, not for every number up to the
// largest (the old code: 16 bytes per rank number, 32 GB here).
func TestSparseRanksWithinCeiling(t *testing.T) {
	t.Setenv(fr.EnvMaxRanks, "2000000000")
	dir := t.TempDir()
	ranks := "[0, 1999999999]"
	write(t, filepath.Join(dir, "nccl_trace_rank_0"), jsonDump(ranks, goodEntry))
	write(t, filepath.Join(dir, "nccl_trace_rank_1999999999"), jsonDump(ranks, goodEntry))
	l, r, got := loadAnalyze(t, dir)
	t.Logf("ranks 0 and 1999999999: %d bytes allocated", got)
	if got > 32<<20 {
		t.Errorf("allocated %d bytes", got)
	}
	if rs := dumpedRanks(l); len(rs) != 2 || r.Verdict != fr.VerdictOK {
		t.Errorf("dumps %v, verdict %s: %s", rs, r.Verdict, r.Summary)
	}
}

// pairGroupsJob is n ranks, each in one 2-rank group with every other rank
// (n(n-1)/2 groups), with one all_reduce on each of its groups.
func pairGroupsJob(t *testing.T, dir string, n int) {
	for r := 0; r < n; r++ {
		var cfg, entries strings.Builder
		cfg.WriteString(`"0": {"name": "0", "desc": "default_pg", "ranks": "[` + rangeList(n) + `]"}`)
		for o := 0; o < n; o++ {
			if o == r {
				continue
			}
			name := fmt.Sprintf("p%d_%d", min(r, o), max(r, o))
			fmt.Fprintf(&cfg, `, "%s": {"name": "%s", "desc": "pair", "ranks": "[%d, %d]"}`, name, name, min(r, o), max(r, o))
			if entries.Len() > 0 {
				entries.WriteByte(',')
			}
			fmt.Fprintf(&entries, `{"process_group": ["%s", "pair"], "collective_seq_id": 1, "profiling_name": "nccl:all_reduce", "input_sizes": [[4]], "output_sizes": [[4]], "input_dtypes": ["Float"], "output_dtypes": ["Float"], "state": "completed"}`, name)
		}
		write(t, filepath.Join(dir, fmt.Sprintf("nccl_trace_rank_%d", r)),
			[]byte(`{"version": "2.10", "pg_config": {`+cfg.String()+`}, "pg_status": {}, "entries": [`+entries.String()+`]}`))
	}
}

func rangeList(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprint(i)
	}
	return strings.Join(parts, ", ")
}

// TestManyGroupsLinear: a job of thousands of small groups costs memory
// in proportion to its groups and entries. The old matcher gave every
// rank's list one slot per group of the job, in every group's run: ranks x
// groups x groups.
func TestManyGroupsLinear(t *testing.T) {
	dir := t.TempDir()
	const n = 96 // 4560 groups
	pairGroupsJob(t, dir, n)
	_, r, got := loadAnalyze(t, dir)
	t.Logf("%d ranks, %d groups: %d bytes allocated", n, len(r.ProcessGroups), got)
	if len(r.ProcessGroups) != n*(n-1)/2+1 || r.Verdict != fr.VerdictOK {
		t.Fatalf("%d groups, verdict %s: %s", len(r.ProcessGroups), r.Verdict, r.Summary)
	}
	if got > 192<<20 {
		t.Errorf("allocated %d bytes", got)
	}
}

// sharedRankListPickle is a dump whose pg_config has groups groups that all
// refer, through the memo, to one rank list string of n ranks.
func sharedRankListPickle(groups, n int) []byte {
	w := pickle.NewWriter()
	w.BeginDict()
	w.String("version")
	w.String("2.10")
	w.String("pg_config")
	w.BeginDict()
	list := "[" + rangeList(n) + "]"
	for g := 0; g < groups; g++ {
		w.String(fmt.Sprint(g))
		w.BeginDict()
		w.String("name")
		w.String(fmt.Sprint(g))
		w.String("desc")
		w.String("shared")
		w.String("ranks")
		w.String(list) // written once, then memo references
		w.EndDict()
	}
	w.EndDict()
	w.String("entries")
	w.BeginList()
	w.EndList()
	w.EndDict()
	return w.Finish()
}

// TestSharedRankLists: groups that share one rank list through the memo
// share its parsed slice; sharing beyond any job (here 200 world-sized
// groups) is refused by name instead of walked once per group.
func TestSharedRankLists(t *testing.T) {
	d, err := fr.Decode(sharedRankListPickle(8, 50000))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.PGConfig) != 8 || &d.PGConfig[0].Ranks[0] != &d.PGConfig[7].Ranks[0] {
		t.Errorf("the shared list was parsed per group")
	}
	dir := t.TempDir()
	attack := sharedRankListPickle(200, 50000)
	write(t, filepath.Join(dir, "nccl_trace_rank_0"), attack)
	write(t, filepath.Join(dir, "nccl_trace_rank_1"), jsonDump("[0, 1]", goodEntry))
	l, _, got := loadAnalyze(t, dir)
	t.Logf("%d-byte pickle, 200 groups sharing a 50000-rank list: %d bytes allocated", len(attack), got)
	if ceiling := uint64(64*len(attack) + 16<<20); got > ceiling {
		t.Errorf("allocated %d bytes, over %d", got, ceiling)
	}
	wantProblem(t, l, "nccl_trace_rank_0", "pg_config", "10000000 members")
}

// TestGroupCeilings: the group ceiling holds for a pickle's pg_config, for
// pg_status, and for the groups an analysis infers from entries.
func TestGroupCeilings(t *testing.T) {
	t.Setenv(fr.EnvMaxGroups, "4")
	if _, err := fr.Decode(sharedRankListPickle(5, 2)); err == nil || !strings.Contains(err.Error(), "5 process groups, over the ceiling of 4") {
		t.Errorf("pg_config of 5 groups: %v", err)
	}
	status := `{"version": "2.10", "pg_status": {"0": {}, "1": {}, "2": {}, "3": {}, "4": {}}}`
	if _, err := fr.Decode([]byte(status)); err == nil || !strings.Contains(err.Error(), "pg_status: 5 process groups") {
		t.Errorf("pg_status of 5 groups: %v", err)
	}
	// Entries naming 6 groups no pg_config registers: 4 are inferred.
	var entries []string
	for g := 0; g < 6; g++ {
		entries = append(entries, strings.Replace(goodEntry, `["0", "default_pg"]`, fmt.Sprintf(`["g%d", "x"]`, g), 1))
	}
	d, err := fr.Decode([]byte(`{"version": "2.10", "pg_config": {}, "entries": [` + strings.Join(entries, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := fr.Analyze([]*fr.Dump{d}, fr.Options{})
	if len(r.ProcessGroups) != 4 || !strings.Contains(strings.Join(r.DataQuality.Warnings, "\n"), "more than 4 process groups") {
		t.Errorf("%d groups; warnings:\n%s", len(r.ProcessGroups), strings.Join(r.DataQuality.Warnings, "\n"))
	}
}

// TestAnalyzeRefusesRankOverCeiling: a dump that reaches Analyze with a
// rank past the ceiling (a live snapshot, a mapping) is a named problem.
func TestAnalyzeRefusesRankOverCeiling(t *testing.T) {
	ok, err := fr.Decode(jsonDump("[0, 1]", goodEntry))
	if err != nil {
		t.Fatal(err)
	}
	big := *ok
	ok.Rank, big.Rank, big.Path = 0, 1<<30, "pid 42 (rank 1073741824)"
	r := fr.Analyze([]*fr.Dump{ok, &big}, fr.Options{})
	if len(r.DataQuality.Files) != 1 || !strings.Contains(r.DataQuality.Files[0].Problem, "1073741824 is over the ceiling of 1048576") ||
		r.DataQuality.Files[0].Path != big.Path || len(r.Ranks.Dumped) != 1 {
		t.Errorf("files %+v, dumped %v", r.DataQuality.Files, r.Ranks.Dumped)
	}
}

// TestRankOutsideItsGroupEnds: a rank whose entries name a group its own
// pg_config leaves it out of made fr_trace's replay pop nothing and loop
// forever (found by FuzzDecode); every step now makes progress.
func TestRankOutsideItsGroupEnds(t *testing.T) {
	var dumps []*fr.Dump
	entry := strings.Replace(goodEntry, `{`, `{"record_id": 0, `, 1) // fr_trace's replay keeps record ids >= 0
	for r := 0; r < 2; r++ {
		d, err := fr.Decode(jsonDump("[1]", entry))
		if err != nil {
			t.Fatal(err)
		}
		d.Rank = r
		dumps = append(dumps, d)
	}
	done := make(chan *fr.Report, 1)
	go func() {
		fr.Parity(dumps, fr.ParityOptions{})
		done <- fr.Analyze(dumps, fr.Options{Transcript: true})
	}()
	select {
	case r := <-done:
		if r.Verdict == "" {
			t.Error("no verdict")
		}
	case <-time.After(time.Minute):
		t.Fatal("the replay did not end: a step popped nothing")
	}
}
