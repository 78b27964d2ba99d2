package frsynth

import (
	"slices"
	"testing"

	fr "github.com/probing-mcp/probing-mcp/diag/flightrecorder"
)

func analyze(t *testing.T, spec Spec) *fr.Report {
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
	return fr.AnalyzeLoaded(l, fr.Options{})
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
