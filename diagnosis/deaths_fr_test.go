package diagnosis

import (
	"strings"
	"testing"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
)

// TestDeadSnapshotsBackTheWaiters: the Flight Recorder that ranks 0-1
// left as they died of #4's timeout (persisted snapshots) cannot decide
// alone (rank 2 left none); when rank 2 is the verdict's culprit, the
// recorder is said to back the waiters, and the confidence is unchanged.
// It says nothing when the culprit is another rank or the ranks with a
// recorder did not die of the timeout.
func TestDeadSnapshotsBackTheWaiters(t *testing.T) {
	timeout := func(r int) *RankFacts {
		return &RankFacts{Rank: r, Raised: true, Record: &procfacts.Ending{Exception: &procfacts.ExitRecord{Type: "RuntimeError",
			Message: "[gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 6000ms for send operation to complete"}}}
	}
	in := Input{World: 3, Ranks: map[int]*RankFacts{0: timeout(0), 1: timeout(1), 2: {Rank: 2}}, FRRanks: []int{0, 1},
		FR: &fr.Report{ProcessGroups: []fr.PGReport{{PGName: "0", MembersText: "0-2", MissingDumps: []int{2},
			Finding: fr.Finding{Kind: fr.KindInsufficient, Seq: 4, Ranks: []int{2}}}}}}
	hs := withDeadSnapshots([]Hypothesis{{Category: CatCPUStall, culprits: []int{2}, Confidence: Medium}}, in)
	if n := len(hs[0].Evidence); n != 1 || hs[0].Confidence != Medium ||
		!strings.Contains(hs[0].Evidence[0].Text, "ranks 0-1 left as they died of the timeout agree through #4 (its seq); rank 2 left none") {
		t.Errorf("%+v", hs[0])
	}
	if hs := withDeadSnapshots([]Hypothesis{{Category: CatCPUStall, culprits: []int{1}}}, in); len(hs[0].Evidence) != 0 {
		t.Errorf("another culprit: %+v", hs[0])
	}
	in.Ranks[0], in.Ranks[1] = &RankFacts{Rank: 0}, &RankFacts{Rank: 1, Alive: true}
	if hs := withDeadSnapshots([]Hypothesis{{Category: CatCPUStall, culprits: []int{2}}}, in); len(hs[0].Evidence) != 0 {
		t.Errorf("no rank died of the timeout: %+v", hs[0])
	}
}
