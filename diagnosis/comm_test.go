package diagnosis

import (
	"fmt"
	"testing"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
)

// TestFromCommBlamesTheDivergedRank: the skipped sub-group collective of
// issue 10, as the agent's rings record it (8 ranks, pairs and the
// default group, five rounds, then rank 3 goes to the default group's #6
// without its pair's), through FromComm and WaitFor. Rank 7 left no rows.
func TestFromCommBlamesTheDivergedRank(t *testing.T) {
	pair := func(r int) string { return fmt.Sprintf("[%d, %d]", r/2*2, r/2*2+1) }
	const all = "[0, 1, 2, 3, 4, 5, 6, 7]"
	var rows []evidence.CommRow
	for r := 0; r < 7; r++ {
		ts := int64(0)
		add := func(grp string, seq int64, dur float64) {
			ts += 1000
			rows = append(rows, evidence.CommRow{Rank: r, TimestampUS: ts, Op: "all_reduce", Ranks: grp, GroupSeq: seq, DurationMS: dur})
		}
		for s := int64(1); s <= 5; s++ {
			add(pair(r), s, 1)
			add(all, s, 1)
		}
		switch r {
		case 2:
			add(pair(r), 6, -1)
		case 3:
			add(all, 6, -1)
		default:
			add(pair(r), 6, 1)
			add(all, 6, -1)
		}
	}
	rows = append(rows, evidence.CommRow{Rank: -1, GroupSeq: 1}, evidence.CommRow{Rank: 1, GroupSeq: 2, Ranks: "garbage"})
	m, problems := FromComm(rows, 8)
	if len(problems) != 1 || m.Ranks[7].Status != NoEvidence || m.Ranks[2].In.Group != "2-3" {
		t.Fatalf("problems %v, rank 7 %+v, rank 2 %+v", problems, m.Ranks[7], m.Ranks[2])
	}
	// Two sinks: rank 3 broke its order (its cycle with rank 2 never
	// resolves, whatever rank 7 does), and rank 7, that everyone in the
	// default group also waits for, left nothing to say why.
	g := WaitFor(m)
	var kinds []string
	for _, s := range g.Sinks {
		kinds = append(kinds, fmt.Sprint(s.Kind, s.Ranks))
	}
	if fmt.Sprint(kinds) != "[diverged[3] no_evidence[7]]" {
		t.Errorf("sinks %v", kinds)
	}
}
