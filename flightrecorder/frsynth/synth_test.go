package frsynth

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
)

// load writes spec's dumps and loads them, every one.
func load(t *testing.T, spec Spec) *fr.Loaded {
	t.Helper()
	dir := t.TempDir()
	if err := Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	l, err := fr.Load([]string{dir}, fr.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Dumps) != spec.Ranks || len(l.Problems) > 0 {
		t.Fatalf("loaded %d dumps, problems %v", len(l.Dumps), l.Problems)
	}
	return l
}

func analyze(t *testing.T, spec Spec) *fr.Report {
	t.Helper()
	return fr.AnalyzeLoaded(load(t, spec), fr.Options{})
}

func TestSyntheticFaults(t *testing.T) {
	cases := []struct {
		fault    Fault
		verdict  string
		culprits []int
	}{
		{Fault{}, "OK", nil},
		{Fault{Kind: "missing", Rank: 5, Seq: 60}, "MISSING_RANKS", []int{5}},
		{Fault{Kind: "type", Rank: 0, Seq: 60}, "COLLECTIVE_TYPE_MISMATCH", []int{0}},
		{Fault{Kind: "size", Rank: 7, Seq: 60}, "SIZE_OR_SYNTAX_MISMATCH", []int{7}},
		{Fault{Kind: "dtype", Rank: 3, Seq: 60}, "COLLECTIVE_DTYPE_MISMATCH", []int{3}},
	}
	for _, c := range cases {
		t.Run(c.fault.Kind, func(t *testing.T) {
			r := analyze(t, Spec{Ranks: 16, Entries: 100, Frames: true, TP: 4, Fault: c.fault})
			if r.Verdict != c.verdict {
				t.Fatalf("verdict %s, want %s: %s", r.Verdict, c.verdict, r.Summary)
			}
			if c.culprits != nil && !slices.Equal(r.ProcessGroups[0].CulpritRanks, c.culprits) {
				t.Errorf("culprits %v, want %v", r.ProcessGroups[0].CulpritRanks, c.culprits)
			}
			if len(r.ProcessGroups) != 5 {
				t.Errorf("%d groups, want default + 4 TP", len(r.ProcessGroups))
			}
		})
	}
}

// TestCppStackDumps: C++-stack dumps look like torch's (a dozen and more
// native frames per entry, many distinct frames, each frame dict written
// once and referenced through the memo after), and a load holds one copy
// of what every rank recorded alike.
func TestCppStackDumps(t *testing.T) {
	spec := Spec{Ranks: 8, Entries: 200, TP: 4, CppStack: true, Fault: Fault{Kind: "missing", Rank: 5, Seq: 150}}
	raw := Dump(spec, 0)
	d, err := fr.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	distinct := map[fr.Frame]bool{}
	for i, e := range d.Entries {
		native := 0
		for _, f := range e.Frames {
			distinct[f] = true
			if !strings.HasSuffix(f.Filename, ".py") {
				native++
			}
		}
		if native < 12 {
			t.Fatalf("entry %d has %d native frames, want a dozen or more", i, native)
		}
	}
	if len(distinct) < 40 {
		t.Errorf("%d distinct frames in the dump, want many", len(distinct))
	}
	// Each distinct frame dict is written once: the names of the frames
	// appear in the pickle once each.
	if n := bytes.Count(raw, []byte("c10::Dispatcher::callBoxed(")); n != 1 {
		t.Errorf("a native frame name is written %d times, want 1 (memoised)", n)
	}

	l := load(t, spec)
	a, b := l.Dumps[1].Entries, l.Dumps[2].Entries
	if a[10].Shared != b[10].Shared {
		t.Error("the same op on two ranks holds two copies of what it shares")
	}
	r := fr.AnalyzeLoaded(l, fr.Options{})
	pg := r.ProcessGroups[0]
	if r.Verdict != "MISSING_RANKS" || !slices.Equal(pg.CulpritRanks, []int{5}) {
		t.Fatalf("verdict %s culprits %v", r.Verdict, pg.CulpritRanks)
	}
	if len(pg.CulpritFrames) < 20 || pg.CulpritFrames[len(pg.CulpritFrames)-1].Name != "main" {
		t.Errorf("culprit frames %v", pg.CulpritFrames)
	}
	// The text shows where the job called the collective, not torch's
	// native frames first: the summary its innermost Python frames, the
	// full detail the job's own frames with the native ones counted.
	const call = "⟦all_reduce⟧ at ⟦torch/distributed/distributed_c10d.py⟧:2950"
	for _, o := range []fr.ViewOptions{{}, {Full: true}} {
		text := r.View(o).Text()
		if strings.Contains(text, "CapturedTraceback") || !o.Full && !strings.Contains(text, "not where it is now: "+call) ||
			o.Full && (!strings.Contains(text, "not where it is now: (17 native frames not shown) ← "+call) || !strings.Contains(text, "⟦train_step⟧ at ⟦train.py⟧:80")) {
			t.Errorf("text %+v:\n%s", o, text)
		}
	}
}

// TestSharedGroups: the rank list is written once and named by every group
// through the memo, so the file is one list long; decoded, the groups
// share one slice. At issue 23's size it is the 7.9 MB dump of the attack.
func TestSharedGroups(t *testing.T) {
	b := SharedGroups(SharedSpec{Ranks: 1000, Groups: 16, Entries: 2})
	d, err := fr.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.PGConfig) != 16 || len(d.PGConfig[15].Ranks) != 1000 || &d.PGConfig[0].Ranks[0] != &d.PGConfig[15].Ranks[0] || len(d.Entries) != 32 {
		t.Fatalf("%d groups, %d entries", len(d.PGConfig), len(d.Entries))
	}
	if one := len(rankList(rangeInts(0, 1000))); len(b) > one+8<<10 {
		t.Errorf("%d bytes for a list of %d: the list was written per group", len(b), one)
	}
	ints, err := fr.Decode(SharedGroups(SharedSpec{Ranks: 1000, Groups: 4, Lists: 2, Ints: true, Stop: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if g := ints.PGConfig; g[0].Ranks[0] != 0 || g[1].Ranks[0] != 1 || &g[0].Ranks[0] != &g[2].Ranks[0] || ints.Entries[0].State != "completed" {
		t.Errorf("lists of ints: %v %v", g[0].Ranks[:2], g[1].Ranks[:2])
	}
	if testing.Short() {
		return
	}
	if n := len(SharedGroups(SharedSpec{Ranks: 1_000_000, Groups: 16})); n < 7_800_000 || n > 8_000_000 {
		t.Errorf("issue 23's dump is 7.9 MB; this one %d bytes", n)
	}
}
