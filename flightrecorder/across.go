package flightrecorder

import (
	"fmt"
	"slices"
	"strings"
)

// Across is the reading of the dumps across process groups. Each group's
// verdict sees its own members only: a rank that waits in a collective of
// another group looks missing from this one, so a group's culprit can be
// a victim. Across follows where each rank is now (its newest collective)
// and whom it waits for there, through every group, to the ranks that
// wait for nobody (Kind "outside") or, when the waits close a cycle, to
// the rank that took its groups in another order than in its previous
// round (Kind "order"); a cycle without such a rank names nobody (Kind
// "cycle").
type Across struct {
	Kind         string `json:"kind"`
	Culprits     []int  `json:"culprit_ranks,omitempty"`
	CulpritsText string `json:"culprit_ranges,omitempty"`
	// Victims are ranks some group's verdict names as its culprit that are
	// themselves waiting in a collective of another group.
	Victims     []int  `json:"victims,omitempty"`
	VictimsText string `json:"victim_ranges,omitempty"`
	Waiting     int    `json:"waiting_ranks"`
	Line        string `json:"line"`
	// waits are the collectives waited in (picture.go), not in the JSON.
	waits []Wait
}

// Across kinds.
const (
	AcrossOutside = "outside"
	AcrossOrder   = "order"
	AcrossCycle   = "cycle"
)

// waitKey is a collective that ranks wait in: a group and its sequence
// number. Ranks waiting in one share its target set, so the work is per
// collective, not per rank (a million-member group has few of them).
type waitKey struct {
	g   *group
	seq int64
}

// now is a rank's newest collective.
type now struct {
	g *group
	e *Entry
}

// across builds the cross-group reading from the analysis and the group
// reports; nil when no rank waits for another or the analysis was
// filtered to some groups or ranks (then other groups are not in view).
func (a *analysis) across(reports []PGReport) *Across {
	cur := map[int]now{}
	for g, pd := range a.data {
		for r, l := range pd.coll {
			if len(l) == 0 {
				continue
			}
			e := l[len(l)-1]
			if c, ok := cur[r]; !ok || e.RecordID > c.e.RecordID {
				cur[r] = now{g, e}
			}
		}
	}
	lastSeq := func(g *group, m int) (int64, bool) {
		l := a.data[g].coll[m]
		if len(l) == 0 {
			return -1, a.byRank[m] != nil
		}
		return l[len(l)-1].CollectiveSeqID, true
	}
	// Who each waited-in collective waits for: the members that never
	// enqueued it.
	targets := map[waitKey][]int{}
	waitsIn := map[int]waitKey{}
	for _, r := range a.sets.dumped {
		c, ok := cur[r]
		if !ok {
			continue
		}
		k := waitKey{c.g, c.e.CollectiveSeqID}
		t, seen := targets[k]
		if !seen {
			for _, m := range c.g.members {
				if s, _ := lastSeq(c.g, m); s < k.seq {
					t = append(t, m)
				}
			}
			targets[k] = t
		}
		if len(t) > 0 {
			waitsIn[r] = k
		}
	}
	if len(waitsIn) == 0 {
		return nil
	}
	// awaitedIn: where others wait for a rank (a few collectives suffice
	// to test its order).
	awaitedIn := map[int][]waitKey{}
	var sinks []int
	keys := make([]waitKey, 0, len(targets))
	for k, t := range targets {
		if len(t) > 0 {
			keys = append(keys, k)
		}
	}
	// Deterministic order: by group position, then sequence number.
	slices.SortFunc(keys, func(x, y waitKey) int {
		if x.g.idx != y.g.idx {
			return x.g.idx - y.g.idx
		}
		return int(x.seq - y.seq)
	})
	seenSink := map[int]bool{}
	for _, k := range keys {
		for _, m := range targets[k] {
			if _, waiting := waitsIn[m]; waiting {
				if len(awaitedIn[m]) < 4 {
					awaitedIn[m] = append(awaitedIn[m], k)
				}
				continue
			}
			if !seenSink[m] {
				seenSink[m] = true
				sinks = append(sinks, m)
			}
		}
	}
	slices.Sort(sinks)
	out := &Across{Waiting: len(waitsIn), waits: waitsOf(targets, waitsIn, cur)}
	waiters := func(except []int) string {
		var w []int
		for r := range waitsIn {
			if _, ex := slices.BinarySearch(except, r); !ex { // except is sorted
				w = append(w, r)
			}
		}
		slices.Sort(w)
		return rankText(w)
	}
	if len(sinks) > 0 {
		out.Kind, out.Culprits, out.CulpritsText = AcrossOutside, sinks, rankText(sinks)
		var noDump, idle []int
		for _, s := range sinks {
			if a.byRank[s] == nil {
				noDump = append(noDump, s)
			} else {
				idle = append(idle, s)
			}
		}
		var parts []string
		if len(idle) > 0 {
			parts = append(parts, fmt.Sprintf("%s %s in no collective that a peer has not entered too", rankWord(idle), isAre(idle)))
		}
		if len(noDump) > 0 {
			parts = append(parts, fmt.Sprintf("%s left no dump", rankWord(noDump)))
		}
		out.Line = fmt.Sprintf("%s, and ranks %s wait for %s, directly or through ranks that wait in other groups",
			strings.Join(parts, "; "), waiters(sinks), them(sinks))
		return out.withVictims(reports, waitsIn)
	}
	// Every awaited rank waits too: the waits close a cycle. The rank that
	// entered its current collective before one its previous round put
	// first holds it closed.
	var breach []int
	var why string
	whyRank := -1
	for r, ks := range awaitedIn {
		k1 := waitsIn[r]
		l1 := a.data[k1.g].coll[r]
		if len(l1) < 2 {
			continue
		}
		prev1 := l1[len(l1)-2] // its previous collective in the group it waits in
		for _, k2 := range ks {
			l2 := a.data[k2.g].coll[r]
			if len(l2) == 0 {
				continue
			}
			prev2 := l2[len(l2)-1] // the last it entered of the group awaiting it
			if prev2.RecordID < prev1.RecordID {
				breach = append(breach, r)
				if why == "" || r < whyRank {
					whyRank = r
					why = fmt.Sprintf("rank %d is in #%d %s on %s and never enqueued #%d on %s, whose collective came before %s's in its previous round",
						r, k1.seq, opOf(l1[len(l1)-1].ProfilingName), pgLabel(k1.g), k2.seq, pgLabel(k2.g), pgLabel(k1.g))
				}
				break
			}
		}
	}
	slices.Sort(breach)
	var cyc []int
	for r := range awaitedIn {
		cyc = append(cyc, r)
	}
	slices.Sort(cyc)
	if len(breach) > 0 {
		out.Kind, out.Culprits, out.CulpritsText = AcrossOrder, breach, rankText(breach)
		if len(breach) > 1 {
			why = fmt.Sprintf("ranks %s each entered a collective before one that came first in their previous round (e.g. %s)", rankText(breach), why)
		}
		out.Line = fmt.Sprintf("%s; ranks %s wait for %s there or through ranks that do (a cycle of waits across groups)",
			why, waiters(breach), them(breach))
		return out.withVictims(reports, waitsIn)
	}
	out.Kind = AcrossCycle
	out.Line = fmt.Sprintf("the waits close a cycle across groups (ranks %s): each waits in one group for a rank waiting in another, and none changed its own order since its previous round (the ranks order the groups differently from the start, or the rings do not reach back a round)", rankText(cyc))
	return out
}

// withVictims names the ranks that a group's verdict blames and that wait
// in a collective of another group, the culprits across groups apart.
func (x *Across) withVictims(reports []PGReport, waitsIn map[int]waitKey) *Across {
	var v []int
	seen := map[int]bool{}
	for _, pr := range reports {
		for _, c := range pr.CulpritRanks {
			_, waiting := waitsIn[c]
			if _, culprit := slices.BinarySearch(x.Culprits, c); waiting && !culprit && !seen[c] {
				seen[c] = true
				v = append(v, c)
			}
		}
	}
	slices.Sort(v)
	x.Victims, x.VictimsText = v, rankText(v)
	return x
}

func rankWord(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	return "ranks " + rankText(rs)
}

func isAre(rs []int) string {
	if len(rs) == 1 {
		return "is"
	}
	return "are"
}

func them(rs []int) string {
	if len(rs) == 1 {
		return "it"
	}
	return "them"
}
