package diagnosis

import (
	"fmt"
	"slices"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// withDeadSnapshots weighs the Flight Recorder of ranks that died of a
// collective's timeout (the snapshot the agent persisted into their rings
// as they died, or torch's dump) when the recorder cannot decide alone:
// the ranks without one are exactly the verdict's culprits, which never
// reached the collective the dead waiters had enqueued. The recorder then
// backs the waiters' side of the story (they agree, none diverged), and
// says so; it cannot see the culprit, so the confidence is unchanged.
func withDeadSnapshots(hs []Hypothesis, in Input) []Hypothesis {
	if in.FR == nil || len(hs) == 0 {
		return hs
	}
	top := &hs[0]
	if len(top.culprits) == 0 {
		return hs
	}
	var waited []int
	for _, r := range in.FRRanks {
		if f := in.Ranks[r]; f != nil && !f.Alive && deathKind(f) == diedWaitingKind {
			waited = append(waited, r)
		}
	}
	if len(waited) == 0 {
		return hs
	}
	for _, pg := range in.FR.ProcessGroups {
		f := pg.Finding
		if f.Kind != fr.KindInsufficient || !slices.Equal(sortedCopy(pg.MissingDumps), sortedCopy(top.culprits)) {
			continue
		}
		top.Evidence = append(top.Evidence, Evidence{"flight_recorder", fmt.Sprintf(
			"group %s (pg %s): the Flight Recorder that %s left as they died of the timeout agree through #%d (its seq); %s left none: the recorder backs the waiters, it cannot see the culprit",
			pg.MembersText, jobtext.Quote(pg.PGName, jobtext.Name), rankWords(waited), f.Seq, rankWords(pg.MissingDumps))})
		return hs
	}
	return hs
}

func sortedCopy(rs []int) []int {
	out := slices.Clone(rs)
	slices.Sort(out)
	return out
}
