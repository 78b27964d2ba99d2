package traceexport

import (
	"fmt"
	"slices"

	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Selection is the default choice of ranks: the verdict's culprit and
// its group.
type Selection struct {
	Ranks []int
	// Culprits are the verdict's culprits (none for a job judged healthy).
	Culprits []int
	Why      string
}

// DefaultSelection is the culprit of the verdict's first hypothesis that
// names one, and the members of its groups: the group of its newest
// call, and every group another rank is stuck in that counts it as a
// member (the collective it never entered). Without a group in the
// rings, the ranks the verdict says wait for it. A verdict without a
// culprit selects every rank the rings or the identities know. At most
// MaxRanks ranks, the culprits first, the cut said in Why.
func DefaultSelection(rep diagnosis.Report, comm []evidence.CommRow, world int) Selection {
	var h *diagnosis.Hypothesis
	for i := range rep.Hypotheses {
		if rep.Hypotheses[i].Culprits != "" && rep.Hypotheses[i].Category != diagnosis.CatHealthy {
			h = &rep.Hypotheses[i]
			break
		}
	}
	if h == nil {
		set := map[int]bool{}
		for _, c := range comm {
			set[c.Rank] = true
		}
		for r := 0; r < world && r < MaxRanks; r++ {
			set[r] = true
		}
		ranks := sortedKeys(set)
		why := fmt.Sprintf("the verdict (%s) names no culprit: every rank known", rep.State)
		return clipSel(Selection{Ranks: ranks, Why: why})
	}
	culprits, err := rankset.Parse(h.Culprits)
	if err != nil || len(culprits) == 0 {
		return Selection{Why: fmt.Sprintf("the verdict's culprits %q do not read as ranks", h.Culprits)}
	}
	isCulprit := map[int]bool{}
	for _, r := range culprits {
		isCulprit[r] = true
	}
	set := map[int]bool{}
	for _, r := range culprits {
		set[r] = true
	}
	groups := map[string]bool{}
	newest := map[int]evidence.CommRow{}
	for _, c := range comm {
		if isCulprit[c.Rank] && c.TimestampUS >= newest[c.Rank].TimestampUS {
			newest[c.Rank] = c
		}
	}
	for _, c := range newest {
		if m := membersOf(c.Ranks); m != "" {
			groups[m] = true
		}
	}
	for _, c := range comm {
		if c.DurationMS >= 0 || evidence.P2POps[c.Op] {
			continue
		}
		m := membersOf(c.Ranks)
		if m == "" || groups[m] {
			continue
		}
		rs, err := rankset.Parse(m)
		if err != nil {
			continue
		}
		for _, r := range culprits {
			if _, ok := slices.BinarySearch(rs, r); ok {
				groups[m] = true
				break
			}
		}
	}
	how := "its group"
	for m := range groups {
		rs, _ := rankset.Parse(m)
		for _, r := range rs {
			set[r] = true
		}
	}
	if len(groups) == 0 && h.Collateral != "" {
		if rs, err := rankset.Parse(h.Collateral); err == nil {
			for _, r := range rs {
				set[r] = true
			}
		}
		how = "the ranks that wait for it (no group in the rings)"
	} else if len(groups) > 1 {
		how = "its groups"
	}
	why := fmt.Sprintf("the verdict's culprit (%s: %s, %s confidence) and %s", h.Category, rankWords(culprits), h.Confidence, how)
	return clipSel(Selection{Ranks: sortedKeys(set), Culprits: culprits, Why: why})
}

// clipSel keeps at most MaxRanks ranks, the culprits first.
func clipSel(s Selection) Selection {
	if len(s.Ranks) <= MaxRanks {
		return s
	}
	keep := map[int]bool{}
	for _, r := range s.Culprits {
		keep[r] = true
	}
	for _, r := range s.Ranks {
		if len(keep) >= MaxRanks {
			break
		}
		keep[r] = true
	}
	n := len(s.Ranks)
	s.Ranks = sortedKeys(keep)
	s.Why += fmt.Sprintf("; %d of its %d ranks kept (at most %d tracks; pass --ranks to choose)", len(s.Ranks), n, MaxRanks)
	return s
}

func sortedKeys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for r := range m {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// DumpSelection is DefaultSelection for Flight Recorder dumps: the
// culprit ranks of the first process group the analysis faults (its
// missing ranks too) and that group's members; without a fault, every
// rank with a dump.
func DumpSelection(rep *fr.Report, l *fr.Loaded) Selection {
	if rep != nil {
		for _, pg := range rep.ProcessGroups {
			if len(pg.CulpritRanks) == 0 && len(pg.MissingRanks) == 0 {
				continue
			}
			set := map[int]bool{}
			for _, rs := range [][]int{pg.Members, pg.CulpritRanks, pg.MissingRanks} {
				for _, r := range rs {
					set[r] = true
				}
			}
			culprits := sortedKeys(mapOf(append(slices.Clone(pg.CulpritRanks), pg.MissingRanks...)))
			why := fmt.Sprintf("the Flight Recorder analysis' culprit (%s in group %s: %s) and its group", pg.Verdict,
				jobtext.Quote(pg.PGName, jobtext.Name), rankWords(culprits))
			return clipSel(Selection{Ranks: sortedKeys(set), Culprits: culprits, Why: why})
		}
	}
	set := map[int]bool{}
	if l != nil {
		for _, d := range l.Dumps {
			set[d.Rank] = true
		}
	}
	return clipSel(Selection{Ranks: sortedKeys(set), Why: "no group faulted in the dumps: every rank with a dump"})
}

func mapOf(rs []int) map[int]bool {
	m := map[int]bool{}
	for _, r := range rs {
		m[r] = true
	}
	return m
}
