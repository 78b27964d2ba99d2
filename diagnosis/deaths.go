package diagnosis

import (
	"fmt"
	"sort"

	"github.com/probing-mcp/probing-mcp/diag/rankset"
)

// orderDeaths puts the job's deaths in order. Several dead ranks are one
// story, not one culprit each: the first to die is the culprit (its own
// exception, an OOM kill), the later ones died of it (a peer's connection
// closed, a watchdog's timeout). The order comes from the ending records'
// times; a rank that left none (SIGKILL) is said and ranked last. When
// the wait-for graph found nobody (every rank dead and out of its
// collectives), the deaths are still the explanation if a rank died of
// its own exception.
func orderDeaths(hs []Hypothesis, in Input) []Hypothesis {
	var deadHs []Hypothesis
	var rest []Hypothesis
	for _, h := range hs {
		if h.Category == CatDeadRank {
			deadHs = append(deadHs, h)
		} else {
			rest = append(rest, h)
		}
	}
	var dead []*RankFacts
	raised := false
	for _, f := range sortedFacts(in.Ranks) {
		if !f.Alive && (f.Raised || f.EndedNS > 0 || inHyps(deadHs, f.Rank)) {
			dead = append(dead, f)
			raised = raised || f.Raised
		}
	}
	switch {
	case len(deadHs) == 0 && (len(rest) > 0 || !raised):
		return hs
	case len(deadHs) == 1 && len(dead) <= 1:
		h := deadHs[0]
		if f := in.Ranks[h.culprits[0]]; f != nil && f.Record != nil {
			h.whereThread = exceptionThread(f.Record.Exception)
		}
		return append(rest, h)
	}
	// Earliest known ending first; unknown times last, by rank.
	sort.SliceStable(dead, func(i, j int) bool {
		a, b := dead[i].EndedNS, dead[j].EndedNS
		if (a > 0) != (b > 0) {
			return a > 0
		}
		return a < b
	})
	first := dead[0]
	h := Hypothesis{Category: CatDeadRank, culprits: []int{first.Rank}}
	collateral := map[int]bool{}
	for _, d := range deadHs {
		for _, r := range d.culprits {
			collateral[r] = true
		}
		for _, r := range mustParse(d.Collateral) {
			collateral[r] = true
		}
	}
	for _, f := range dead[1:] {
		collateral[f.Rank] = true
	}
	delete(collateral, first.Rank)
	var coll []int
	for r := range collateral {
		coll = append(coll, r)
	}
	sort.Ints(coll)
	h.Collateral = rankset.Format(coll)
	h.Evidence = []Evidence{{"agent", fmt.Sprintf("rank %d died first%s: %s", first.Rank, whenWords(first.EndedNS, 0), endingWords(first))}}
	for _, f := range dead[1:] {
		h.Evidence = append(h.Evidence, Evidence{"agent", fmt.Sprintf("then rank %d%s: %s", f.Rank, whenWords(f.EndedNS, first.EndedNS), endingWords(f))})
	}
	switch {
	case first.EndedNS > 0 && len(dead) > 1 && dead[1].EndedNS > first.EndedNS && first.Raised:
		h.Confidence = High
	case first.EndedNS > 0 && (len(dead) == 1 || dead[1].EndedNS > first.EndedNS):
		h.Confidence = Medium
	default:
		h.Confidence = Low
		h.Evidence = append(h.Evidence, Evidence{"agent", "the order of these deaths is not known from the records (a rank killed by SIGKILL leaves none): the first to die may be another"})
	}
	said := map[string]bool{}
	for _, d := range deadHs {
		for _, e := range d.Evidence {
			if e.Source == "comm_rings" && !said[e.Text] {
				said[e.Text] = true
				h.Evidence = append(h.Evidence, e)
			}
		}
	}
	if first.Record != nil {
		h.whereThread = exceptionThread(first.Record.Exception)
	}
	h.Confirm = "list_processes {\"include_dead\":true}: each rank's ending, with its time"
	h.Refute = fmt.Sprintf("a rank that died before rank %d", first.Rank)
	return append(rest, h)
}

func inHyps(hs []Hypothesis, r int) bool {
	for _, h := range hs {
		for _, c := range h.culprits {
			if c == r {
				return true
			}
		}
	}
	return false
}

func mustParse(s string) []int {
	if s == "" {
		return nil
	}
	rs, err := rankset.Parse(s)
	if err != nil {
		return nil
	}
	return rs
}

func whenWords(ns, since int64) string {
	switch {
	case ns <= 0:
		return " (when: not recorded)"
	case since > 0:
		return fmt.Sprintf(" (%s later)", ago(ns-since))
	}
	return ""
}

func endingWords(f *RankFacts) string {
	if f.Ending != "" {
		return f.Ending
	}
	return "it is gone and left no record of how it ended"
}
