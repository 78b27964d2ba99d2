package traceexport

import (
	"context"
	"fmt"
	"strings"
	"testing"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
)

// TestFlightRecorderDumps: the shipped real dumps of a job whose rank 2
// never called the fifth all_reduce. The analysis' culprit and its group
// are selected; each entry is a slice with its process group and
// sequence number; the ranks waiting in #5 are still inside at the
// dumps' last time, and rank 2 is marked as never entering it.
func TestFlightRecorderDumps(t *testing.T) {
	l, err := fr.LoadContext(context.Background(), []string{"../testdata/fr/real/missing_rank"}, fr.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	calls, last := FromFlightRecorder(l)
	rep, err := fr.AnalyzeLoadedContext(context.Background(), l, fr.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sel := DumpSelection(rep, l)
	if fmt.Sprint(sel.Ranks) != "[0 1 2 3]" || fmt.Sprint(sel.Culprits) != "[2]" || !strings.Contains(sel.Why, "MISSING_RANKS") {
		t.Fatalf("selection %+v", sel)
	}
	d, sum, _ := write(t, calls, Options{Ranks: sel.Ranks, ReadUS: last, Source: "flight_recorder"})
	if sum.Slices != 19 || sum.StillInside != 4 || sum.NeverEntered != 1 {
		t.Fatalf("summary %+v", sum)
	}
	for _, e := range d.TraceEvents {
		if e.Ph == "X" && (e.Args["group"] != "0 (default_pg)" || e.Args["source"] != "flight_recorder" || e.Args["seq"] == nil || e.Args["state"] == nil) {
			t.Errorf("slice %+v", e)
		}
		if e.Ph == "i" && e.Cat == "never_entered" && (e.TID != 2 || e.Name != "never entered all_reduce #5") {
			t.Errorf("never entered %+v", e)
		}
	}
	if d.Metadata["source"] != "Flight Recorder dump" {
		t.Errorf("metadata %v", d.Metadata)
	}
}
