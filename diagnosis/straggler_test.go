package diagnosis

import (
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
)

func TestWaitStragglers(t *testing.T) {
	var rows []evidence.CommRow
	for r := 0; r < 8; r++ {
		for i := 0; i < 40; i++ {
			d := 200.0
			if r == 5 {
				d = 30
			}
			rows = append(rows, evidence.CommRow{Rank: r, GroupSeq: int64(i + 1), DurationMS: d})
		}
	}
	slow, why := waitStragglers(rows, 0)
	if len(slow) != 1 || slow[0] != 5 || !strings.HasPrefix(why, "rank 5 waits 30 ms per collective on average over its last 32, the others a median of 200 ms") {
		t.Fatalf("%v %q", slow, why)
	}
	// The same waits in a job whose step is 1.2 s: 200 ms is under a
	// fifth of it, a rank the others barely wait for.
	if slow, _ := waitStragglers(rows, 1200*time.Millisecond); slow != nil {
		t.Errorf("waits small against the step: %v", slow)
	}
	if slow, _ := waitStragglers(rows, 800*time.Millisecond); len(slow) != 1 {
		t.Errorf("waits a quarter of the step: %v", slow)
	}
	// Everyone quick (no real waiting), or half the job "slow": no claim.
	for i := range rows {
		rows[i].DurationMS /= 100
	}
	if slow, _ := waitStragglers(rows, 0); slow != nil {
		t.Errorf("tiny waits: %v", slow)
	}
	for i := range rows {
		rows[i].DurationMS = 200
		if rows[i].Rank < 4 {
			rows[i].DurationMS = 10
		}
	}
	if slow, _ := waitStragglers(rows, 0); slow != nil {
		t.Errorf("half the job: %v", slow)
	}
}

// TestFlightRecorderStraggler: a moving job whose rings show no waits (DDP's
// collectives are issued from C++) gets its straggler from the order in
// which the Flight Recorder saw the members enter their collectives; a
// wait that is short each time (a loaded machine's noise), or a small
// share of the time, names nobody.
func TestFlightRecorderStraggler(t *testing.T) {
	for _, c := range []struct {
		wait, span float64
		last       int
		want       string
	}{{1500, 3000, 40, StateSlow}, {300, 3000, 40, StateHealthy}, {600, 3000, 64, StateHealthy}, {300, 3000, 20, StateHealthy}} {
		in := scenario(everyoneBut(3, 2, "default", "pair"), 0.05)
		in.FR = &fr.Report{ProcessGroups: []fr.PGReport{
			{MembersText: "0-1", Size: 2},
			{MembersText: "0-7", Size: 8, Arrival: &fr.Arrival{Rank: 5, Last: c.last, Of: 64, WaitMS: c.wait, SpanMS: c.span, Share: 0.9}},
		}}
		rep := Diagnose(in)
		if rep.State != c.want {
			t.Fatalf("%+v: %s", c, rep.Text())
		}
		if c.want != StateSlow {
			// Under the bar: healthy, but not at high confidence when the
			// rank came last in at least half of them, and said.
			h := rep.Hypotheses[0]
			near := 2*c.last >= 64
			said := strings.Contains(h.Evidence[len(h.Evidence)-1].Text, "rank 5 coming last in")
			if near != said || (near && h.Confidence == High) {
				t.Errorf("%+v: near %v, said %v, confidence %s:\n%s", c, near, said, h.Confidence, rep.Text())
			}
			continue
		}
		h := rep.Hypotheses[0]
		if h.Category != CatStraggler || h.Culprits != "5" || h.Confidence != Medium ||
			!strings.Contains(rep.Summary, "the Flight Recorder shows the others waiting for rank 5 1500 ms of the last 3000 ms (64 collectives of group 0-7") {
			t.Errorf("%s", rep.Text())
		}
	}
}
