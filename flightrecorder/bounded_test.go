package flightrecorder

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// bigReport is a report as large as a hostile job makes one: many problem
// groups, each with long rank lists, long evidence and a long transcript.
func bigReport(groups, ranks, lines, lineBytes int) *Report {
	missing := make([]int, ranks)
	for i := range missing {
		missing[i] = 2 * i // holes everywhere: ranges are no shorter
	}
	line := strings.Repeat("x", lineBytes)
	evidence := make([]string, lines)
	for i := range evidence {
		evidence[i] = line
	}
	r := &Report{Summary: "Verdict UNDECIDED.", Verdict: "UNDECIDED", Ranks: RankSummary{MissingDump: missing}}
	for g := 0; g < groups; g++ {
		r.ProcessGroups = append(r.ProcessGroups, PGReport{PGName: fmt.Sprint(g), Verdict: "UNDECIDED", MissingDumps: missing,
			CulpritRanks: missing, Finding: Finding{Kind: KindInsufficient, Line: line, Ranks: missing, Evidence: evidence},
			FRTrace: &FRTraceNote{Verdict: "UNDECIDED", Header: line, MissingRanks: missing}})
	}
	r.FRTrace.Transcript = evidence
	r.DataQuality.Warnings = evidence
	return r
}

// TestBounded: the rendered report keeps at most the bounds of every list
// and text, and about maxShownBytes in all, says what it cut, and leaves
// the report itself whole.
func TestBounded(t *testing.T) {
	many := bigReport(2000, 10, 2, 10).Bounded()
	if len(many.ProcessGroups) != maxShownGroups || !many.Truncated || !strings.Contains(strings.Join(many.Omitted, "\n"), "process_groups (worst first): 1024 of 2000 kept") {
		t.Errorf("2000 small groups: %d kept, omitted %q", len(many.ProcessGroups), many.Omitted)
	}
	r := bigReport(2000, 5000, 5000, 40000)
	b := r.Bounded()
	js, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("JSON: %d bytes, %d groups", len(js), len(b.ProcessGroups))
	if len(js) > maxShownBytes+maxShownBytes/2 || len(b.ProcessGroups) == 0 || len(b.Ranks.MissingDump) != maxShownRanks || !b.Truncated {
		t.Fatalf("JSON of %d bytes, %d groups, %d missing, truncated %v", len(js), len(b.ProcessGroups), len(b.Ranks.MissingDump), b.Truncated)
	}
	pg := b.ProcessGroups[0]
	if len(pg.MissingDumps) != maxShownRanks || len(pg.Finding.Ranks) != maxShownRanks || len(pg.FRTrace.MissingRanks) != maxShownRanks ||
		len(pg.Finding.Evidence) != maxShownEvidence || len(pg.Finding.Evidence[0]) > maxShownText+32 || len(pg.FRTrace.Header) > maxShownText+32 {
		t.Errorf("a group's lists: %d %d %d, evidence %d of %d bytes", len(pg.MissingDumps), len(pg.Finding.Ranks), len(pg.FRTrace.MissingRanks),
			len(pg.Finding.Evidence), len(pg.Finding.Evidence[0]))
	}
	omitted := strings.Join(b.Omitted, "\n")
	for _, want := range []string{"the report passed 16777216 bytes", "process_groups[].missing_dumps", "finding.evidence[]: texts of more than 32768 bytes",
		"fr_trace.transcript (in all): 0 of 4096 kept"} {
		if !strings.Contains(omitted, want) {
			t.Errorf("omitted lacks %q:\n%s", want, omitted)
		}
	}
	if len(r.ProcessGroups) != 2000 || len(r.ProcessGroups[0].MissingDumps) != 5000 || len(r.ProcessGroups[0].Finding.Evidence[0]) != 40000 ||
		r.Truncated || r.ProcessGroups[0].FRTrace.Header != strings.Repeat("x", 40000) {
		t.Error("Bounded changed the report")
	}
	if small := (&Report{Verdict: "OK"}).Bounded(); small.Truncated || small.Omitted != nil {
		t.Errorf("a small report is cut: %+v", small.Omitted)
	}
}

// TestTextBounded: the text (analyze's page of it here) lists the worst
// groups and a few lines of each list, clips lines, and stops listing
// groups past maxTextBytes, saying so each time.
func TestTextBounded(t *testing.T) {
	r := bigReport(300, 5000, 30, 3000)
	out := r.View(TerminalView(false)).Text()
	if len(out) > 2<<20 || !strings.Contains(out, "More groups: 200 not listed; --pg or --ranks narrows the analysis.") ||
		!strings.Contains(out, "… listed 0 of 0 file problem(s) and 8 of 30 warning(s) (--json lists them)") {
		t.Errorf("%d bytes:\n%.3000s", len(out), out)
	}
	for _, l := range strings.Split(out, "\n") {
		if len(l) > maxTextFinding+64 {
			t.Fatalf("a line of %d bytes", len(l))
		}
	}
	out = bigReport(1100, 5000, 5000, 3000).View(TerminalView(true)).Text()
	if len(out) > maxTextBytes || !strings.Contains(out, "More groups: 76 not listed") ||
		!strings.Contains(out, "  … 41 more evidence line(s) (--json lists them)") || !strings.Contains(out, "  … 904 more line(s) (--json)") {
		t.Errorf("verbose: %d bytes, ending %q", len(out), out[max(0, len(out)-200):])
	}
	for _, l := range strings.Split(out, "\n") {
		if len(l) > maxTextFinding+64 {
			t.Fatalf("verbose: a line of %d bytes", len(l))
		}
	}
	// A page past maxTextBytes stops listing its groups.
	g := GroupView{PGName: "0", Verdict: "UNDECIDED", Finding: strings.Repeat("x", maxTextFinding)}
	v := View{Verdict: "UNDECIDED", ProcessGroups: slices.Repeat([]GroupView{g}, maxTextBytes/maxTextFinding+10), term: &terminal{}}
	if out := v.Text(); len(out) > maxTextBytes+2*maxTextFinding || !strings.Contains(out, "… the text stops here, past 16777216 bytes: ") {
		t.Errorf("a page past the bound: %d bytes, ending %q", len(out), out[max(0, len(out)-300):])
	}
}
