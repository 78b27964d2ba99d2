package flightrecorder

import (
	"path/filepath"
	"strings"
	"testing"
)

func realText(t *testing.T, dir string, o ViewOptions) string {
	t.Helper()
	l, err := Load([]string{dir}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return AnalyzeLoaded(l, Options{}).View(o).Text()
}

// TestTextQuiet: on real gloo dumps (whose pg_config torch's fr_trace
// cannot read), fr_trace's crash is one line of data quality, not a note
// per group and in the summary; the pg_config warnings are one line per
// dump set; and fr_trace is said only where it would blame other ranks.
func TestTextQuiet(t *testing.T) {
	for _, name := range []string{"missing_rank", "subgroup_missing", "size_mismatch"} {
		text := realText(t, filepath.Join("../testdata/fr/real", name), ViewOptions{})
		if n := strings.Count(text, "fr_trace"); n != 1 || !strings.Contains(text, "\n  fr_trace (torch's analyzer) would stop on these dumps: ⟦KeyError: ('0', 0)⟧\n") {
			t.Errorf("%s: fr_trace said %d times, want once in data quality:\n%s", name, n, text)
		}
		if n := strings.Count(text, "pg_config"); n < 1 || strings.Count(text, "warning: ") != 1 {
			t.Errorf("%s: want one pg_config warning line:\n%s", name, text)
		}
		t.Logf("%s: %d bytes", name, len(text))
	}
	// subgroup_missing: two groups not in pg_config, both on that one line.
	if text := realText(t, "../testdata/fr/real/subgroup_missing", ViewOptions{}); !strings.Contains(text, "2 group(s) not in it (pg ⟦0⟧ (⟦default_pg⟧), pg ⟦1⟧ (⟦pair12⟧))") {
		t.Errorf("subgroup_missing:\n%s", text)
	}
	// Where fr_trace would blame other ranks, it is said, once, with why.
	text := realText(t, "testdata/parity/f04_wrong_culprit", ViewOptions{})
	if strings.Count(text, "fr_trace would say SIZE_OR_SYNTAX_MISMATCH at #3 blaming 1-3; here SIZE_OR_SYNTAX_MISMATCH at #3 blaming 0 (fr_trace blames every rank") != 1 {
		t.Errorf("f04_wrong_culprit:\n%s", text)
	}
}

// A rank without a dump is missing, said once: not also a lagging rank.
func TestTextMissingDumpNotLagging(t *testing.T) {
	r := &Report{Verdict: "UNDECIDED", ProcessGroups: []PGReport{{PGName: "0", MembersText: "0-3", Verdict: "UNDECIDED",
		MissingDumps: []int{2}, Finding: Finding{Kind: KindInsufficient, Line: "no dump from rank(s) 2"},
		LaggingRanks: []Lag{{Rank: 2, Behind: 3, Note: "no entries"}, {Rank: 3, LastEnqueued: 5, LastCompleted: 4, Behind: 1}}}}}
	text := r.View(ViewOptions{}).Text()
	if strings.Contains(text, "lagging: rank 2") || !strings.Contains(text, "lagging: rank 3") || !strings.Contains(text, "no dump from 2") {
		t.Errorf("text:\n%s", text)
	}
}

// A tool's page of long groups stops near 2,000 tokens and says the offset
// that shows the rest.
func TestTextToolPageBounded(t *testing.T) {
	g := GroupView{PGName: "7", Ranks: "0-7", Verdict: "MISSING_RANKS", Finding: strings.Repeat("rank 3 never joined; ", 80)}
	v := View{Verdict: "MISSING_RANKS", Offset: 10, ProcessGroups: []GroupView{g, g, g, g, g, g, g, g, g, g}}
	text := v.Text()
	if len(text) > 8000 || !strings.Contains(text, "more group(s) of this page not shown; call again with offset=1") {
		t.Errorf("%d bytes:\n%s", len(text), text)
	}
}
