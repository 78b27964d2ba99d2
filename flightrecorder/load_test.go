package flightrecorder_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
	"github.com/probing-mcp/probing-mcp/flightrecorder/pickle"
)

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func problemFor(l *fr.Loaded, name string) string {
	for _, p := range l.Problems {
		if filepath.Base(p.Path) == name || strings.HasSuffix(p.Path, name) {
			return p.Problem
		}
	}
	return ""
}

// TestBadInputs: every bad file gets a problem naming it and what is wrong,
// the rest of the directory is still analysed, and nothing hangs.
func TestBadInputs(t *testing.T) {
	dir := t.TempDir()
	spec := frsynth.Spec{Ranks: 12, Entries: 40, Fault: frsynth.Fault{Kind: "missing", Rank: 2, Seq: 30}}
	if err := frsynth.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	good := frsynth.Dump(spec, 4)
	write(t, filepath.Join(dir, "nccl_trace_rank_4"), good[:len(good)/2]) // truncated
	write(t, filepath.Join(dir, "nccl_trace_rank_5"), []byte("\x80\x02cos\nsystem\n(X\x02\x00\x00\x00idtR."))
	w := pickle.NewWriter()
	w.BeginDict()
	w.String("version")
	w.String("3.0")
	w.EndDict()
	write(t, filepath.Join(dir, "nccl_trace_rank_6"), w.Finish())
	write(t, filepath.Join(dir, "nccl_trace_rank_7"), []byte("\x89PNG\r\n\x1a\n...."))            // another format
	write(t, filepath.Join(dir, "nccl_trace_rank_8"), []byte(`{"version": "2.10", "entries": [`)) // broken JSON
	write(t, filepath.Join(dir, "notes.txt"), []byte("job notes"))
	write(t, filepath.Join(dir, "train_step_400"), []byte("checkpoint marker"))
	write(t, filepath.Join(dir, "old", "nccl_trace_rank_9"), frsynth.Dump(spec, 9)) // a second rank 9
	if err := syscall.Mkfifo(filepath.Join(dir, "nccl_trace_rank_0.pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "nccl_trace_rank_10"))
	if err := syscall.Mkfifo(filepath.Join(dir, "nccl_trace_rank_10"), 0o600); err != nil { // a FIFO in a rank's place
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "nccl_trace_rank_11"))
	write(t, filepath.Join(dir, "nccl_trace_rank_11"), append(frsynth.Dump(spec, 11), make([]byte, 2048)...))

	done := make(chan *fr.Loaded)
	go func() {
		l, err := fr.Load([]string{dir}, fr.LoadOptions{MaxFileBytes: int64(len(good) + 1024)})
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	var l *fr.Loaded
	select {
	case l = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Load hung (a FIFO was opened?)")
	}
	for name, want := range map[string]string{
		"nccl_trace_rank_4":  "truncated",
		"nccl_trace_rank_5":  "forbidden global",
		"nccl_trace_rank_6":  "unsupported Flight Recorder version 3.0",
		"nccl_trace_rank_7":  "not a Flight Recorder dump",
		"nccl_trace_rank_8":  "invalid JSON",
		"/nccl_trace_rank_9": "two dumps for one rank",
		"nccl_trace_rank_11": "over the",
	} {
		if got := problemFor(l, name); !strings.Contains(got, want) {
			t.Errorf("%s: problem %q, want it to contain %q", name, got, want)
		}
	}
	if got := problemFor(l, "nccl_trace_rank_10"); !strings.Contains(got, "not a regular file") {
		t.Errorf("FIFO in a rank's place: %q", got)
	}
	if got := problemFor(l, "nccl_trace_rank_0.pipe"); got != "" {
		t.Errorf("torch's .pipe trigger reported: %q", got)
	}
	var ranks []int
	for _, d := range l.Dumps {
		ranks = append(ranks, d.Rank)
	}
	if len(ranks) != 4 || ranks[0] != 0 || ranks[3] != 3 {
		t.Fatalf("loaded ranks %v, want 0-3", ranks)
	}
	r := fr.AnalyzeLoaded(l, fr.Options{})
	if !r.DataQuality.Partial || len(r.DataQuality.Files) < 7 {
		t.Errorf("data quality: %+v", r.DataQuality)
	}
	// The remaining ranks still give a verdict: rank 2 never joined.
	if r.ProcessGroups[0].CulpritRanks == nil || r.ProcessGroups[0].CulpritRanks[0] != 2 {
		t.Errorf("verdict %s culprits %v: %s", r.Verdict, r.ProcessGroups[0].CulpritRanks, r.Summary)
	}
}

func TestLoadErrors(t *testing.T) {
	empty := t.TempDir()
	if _, err := fr.Load([]string{empty}, fr.LoadOptions{}); err == nil || !strings.Contains(err.Error(), "no files found") {
		t.Errorf("empty dir: %v", err)
	}
	if _, err := fr.Load([]string{filepath.Join(empty, "nope")}, fr.LoadOptions{}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing dir: %v", err)
	}
	write(t, filepath.Join(empty, "README.md"), []byte("# notes"))
	if _, err := fr.Load([]string{empty}, fr.LoadOptions{}); err == nil || !strings.Contains(err.Error(), "none named like a dump") {
		t.Errorf("no dumps: %v", err)
	}
	// An explicit file must be usable.
	if _, err := fr.Load([]string{filepath.Join(empty, "README.md")}, fr.LoadOptions{}); err == nil || !strings.Contains(err.Error(), "cannot tell the rank") {
		t.Errorf("explicit non-dump: %v", err)
	}
	// Every file broken: the error lists them.
	write(t, filepath.Join(empty, "trace_0"), []byte("\x80\x02"))
	_, err := fr.Load([]string{empty}, fr.LoadOptions{})
	if err == nil || !strings.Contains(err.Error(), "trace_0: pickle: offset 2: truncated: no STOP opcode") {
		t.Errorf("all broken: %v", err)
	}
}

// TestMixedJobs: two jobs' dumps in one directory, told apart by prefix;
// the larger family is analysed and the other listed.
func TestMixedJobs(t *testing.T) {
	dir := t.TempDir()
	if err := frsynth.Write(dir, frsynth.Spec{Ranks: 4, Entries: 20}); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 2; r++ {
		write(t, filepath.Join(dir, "job2_rank_"+string(rune('0'+r))), frsynth.Dump(frsynth.Spec{Ranks: 2, Entries: 20}, r))
	}
	l, err := fr.Load([]string{dir}, fr.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Prefix != "nccl_trace_rank_" || len(l.Dumps) != 4 || !strings.Contains(problemFor(l, "job2_rank_0"), "mix dumps of different jobs") {
		t.Errorf("prefix %q, %d dumps, problems %+v", l.Prefix, len(l.Dumps), l.Problems)
	}
	l, err = fr.Load([]string{dir}, fr.LoadOptions{Prefix: "job2_rank_"})
	if err != nil || len(l.Dumps) != 2 {
		t.Errorf("explicit prefix: %v %d", err, len(l.Dumps))
	}
}

// TestRankMapping: files whose names say nothing about the rank.
func TestRankMapping(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "host-a.pkl"), filepath.Join(dir, "host-b.pkl")
	write(t, a, frsynth.Dump(frsynth.Spec{Ranks: 2, Entries: 5}, 0))
	write(t, b, frsynth.Dump(frsynth.Spec{Ranks: 2, Entries: 5}, 1))
	l, err := fr.Load([]string{a, b}, fr.LoadOptions{RankOf: map[string]int{a: 0, b: 1}})
	if err != nil || len(l.Dumps) != 2 || l.Dumps[1].Rank != 1 {
		t.Fatalf("%v %+v", err, l)
	}
}
