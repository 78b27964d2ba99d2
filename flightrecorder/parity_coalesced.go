package flightrecorder

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// findCoalesced is find_coalesced_group[_with_non_p2p] on one rank's list:
// positions of the entries sharing the head's sequence key.
func (en *engine) findCoalesced(g *group, l *rankList) []int {
	var found []int
	var key int64
	started := false
	for p := l.nextLive(0); p < len(l.entries); p = l.nextLive(p + 1) {
		e := l.entries[p]
		if en.groupAt(l, p) != g {
			continue
		}
		switch {
		case !started:
			key = e.CollectiveSeqID
			if e.IsP2P {
				key = e.P2PSeqID
			}
			started = true
			found = append(found, p)
			continue
		case !e.IsP2P && e.CollectiveSeqID == key, e.IsP2P && e.P2PSeqID == key:
			found = append(found, p)
			continue
		}
		break
	}
	if len(found) <= 1 {
		return nil
	}
	last := l.entries[found[len(found)-1]].ProfilingName
	if en.major <= 2 && en.minor < 7 {
		if last != "nccl:coalesced" && !en.corrected {
			panic(abortError{"AssertionError"})
		}
	} else if strings.HasPrefix(last, "nccl:") && !strings.HasSuffix(last, "_coalesced") {
		msg := fmt.Sprintf("Rank %d does not have a coalesced end.", l.rank)
		en.addBlock(Block{Kind: BlockNoCoalescedEnd, Header: msg, GUID: g.guid, PGName: g.name, PGDesc: g.desc})
		en.log(msg)
	}
	return found
}

// coalesced is the coalesced branch of build_collectives.
func (en *engine) coalesced(g *group, first *rankList, rec *matchRecord, num int) {
	// Gather every expected rank's group (set.pop order: ascending for the
	// small rank numbers of a job; see the package tests).
	type rankGroup struct {
		rank int
		pos  []int
	}
	var groups []rankGroup
	for _, r := range rec.expected {
		l := en.byRank.get(r)
		var pos []int
		if l != nil && !l.gone {
			pos = en.findCoalesced(g, l)
		}
		for _, p := range pos {
			e := l.entries[p]
			en.checkOp(e)
			switch e.Op.Type {
			case "send":
				if src := localToGlobal(g, e.Op.Src); src != r {
					panic(abortError{fmt.Sprintf("AssertionError: Send src error: %d expected but %s is set", r, pyOptInt(src))})
				}
			case "recv":
				if dst := localToGlobal(g, e.Op.Dst); dst != r {
					panic(abortError{fmt.Sprintf("AssertionError: Recv dst error: %d expected but %s is set", r, pyOptInt(dst))})
				}
			}
		}
		groups = append(groups, rankGroup{r, pos})
	}
	var match bool
	if en.major <= 2 && en.minor < 7 {
		match = en.matchCoalescedP2POnly(g, groups2map(groups, func(x rankGroup) (int, []int) { return x.rank, x.pos }))
	} else {
		match = en.matchCoalescedWithNonP2P(g, rec, groups2map(groups, func(x rankGroup) (int, []int) { return x.rank, x.pos }))
	}
	if match && en.mismatch[g.guid] == 0 {
		en.addCollective(g, true, true)
	} else {
		en.mismatch[g.guid]++
		if match && en.out.Collectives == 0 && !en.corrected {
			panic(abortError{"IndexError: list index out of range"})
		}
	}
	for _, rg := range groups {
		if len(rg.pos) == 0 {
			continue
		}
		l := en.byRank.get(rg.rank)
		if en.corrected { // each rank's own group
			for _, p := range rg.pos {
				l.remove(p)
			}
			continue
		}
		l.removeFrom(rg.pos[0], num) // fr_trace pops the first rank's group length on every rank
	}
}

type orderedGroups struct {
	ranks []int
	pos   map[int][]int
}

func groups2map[T any](xs []T, kv func(T) (int, []int)) *orderedGroups {
	og := &orderedGroups{pos: map[int][]int{}}
	for _, x := range xs {
		r, p := kv(x)
		og.ranks = append(og.ranks, r)
		og.pos[r] = p
	}
	return og
}

func localToGlobal(g *group, local int) int {
	if local < 0 || local >= len(g.members) {
		return -1
	}
	return g.members[local]
}

func pyOptInt(n int) string {
	if n < 0 {
		return "None"
	}
	return strconv.Itoa(n)
}

// p2pOps turns each rank's group into its remaining ops (positions).
func (en *engine) opsOf(og *orderedGroups) map[int][]*Entry {
	ops := map[int][]*Entry{}
	for _, r := range og.ranks {
		l := en.byRank.get(r)
		for _, p := range og.pos[r] {
			ops[r] = append(ops[r], l.entries[p])
		}
	}
	return ops
}

// matchCoalescedP2POnly is match_coalesced_groups (versions before 2.7).
func (en *engine) matchCoalescedP2POnly(g *group, og *orderedGroups) bool {
	ops := en.opsOf(og)
	for _, r := range og.ranks {
		l := ops[r]
		if len(l) == 0 {
			return false
		}
		if l[len(l)-1].Op.Type != "coalesced" {
			panic(abortError{"AssertionError"})
		}
		ops[r] = l[:len(l)-1]
	}
	return en.pairP2P(g, og.ranks, ops, true)
}

// pairP2P is the peer-matching loop shared by both coalesced matchers.
func (en *engine) pairP2P(g *group, order []int, ops map[int][]*Entry, p2pOnly bool) bool {
	present := map[int]bool{}
	for _, r := range order {
		present[r] = true
	}
	for {
		first := -1
		for _, r := range order {
			if present[r] {
				first = r
				break
			}
		}
		if first < 0 {
			break
		}
		mine := ops[first]
		if len(mine) == 0 {
			present[first] = false
			continue
		}
		op := mine[0]
		if !op.Op.IsP2POp() {
			if p2pOnly {
				panic(abortError{"NotImplementedError: coalesced collective ops"})
			}
			panic(abortError{"AssertionError: can't get dst of non-p2p op"})
		}
		peer := localToGlobal(g, op.Op.Dst)
		if peer < 0 {
			panic(abortError{"IndexError: list index out of range"})
		}
		if !present[peer] {
			panic(abortError{fmt.Sprintf("KeyError: %d", peer)})
		}
		idx := -1
		for i, other := range ops[peer] {
			if Match(op, other, len(g.members)).State == FullyMatched {
				idx = i
				break
			}
			if !other.Op.IsP2POp() {
				panic(abortError{"AssertionError: can't get src of non-p2p op"})
			}
			if op.Op.Dst == other.Op.Src {
				break
			}
		}
		if idx < 0 {
			en.addBlock(Block{Kind: BlockP2PMismatch, Header: "MISMATCH", GUID: g.guid, PGName: g.name, PGDesc: g.desc,
				Seq: op.CollectiveSeqID, RecordID: op.RecordID, ProfilingName: op.ProfilingName, Frames: op.Frames})
			en.log("MISMATCH ")
			return false
		}
		ops[first] = mine[1:]
		ops[peer] = slices.Delete(slices.Clone(ops[peer]), idx, idx+1)
	}
	en.addBlock(Block{Kind: BlockCoalescedP2POK, Header: "Match", GUID: g.guid, PGName: g.name, PGDesc: g.desc})
	en.log("Match ")
	return true
}

// matchCoalescedWithNonP2P is match_coalesced_groups_with_non_p2p (2.7+).
func (en *engine) matchCoalescedWithNonP2P(g *group, rec *matchRecord, og *orderedGroups) bool {
	ops := en.opsOf(og)
	isP2P := false
	for _, r := range og.ranks {
		for _, e := range ops[r] {
			if e.Op.IsP2POp() {
				isP2P = true
			}
		}
	}
	for _, r := range og.ranks {
		l := ops[r]
		if len(l) == 0 {
			msg := fmt.Sprintf("Rank %d has an empty op list.", r)
			en.addBlock(Block{Kind: BlockEmptyOpList, Header: msg, GUID: g.guid, PGName: g.name, PGDesc: g.desc})
			en.log(msg)
			continue
		}
		if isP2P && l[len(l)-1].Op.Type == "coalesced" {
			ops[r] = l[:len(l)-1]
		}
	}
	if isP2P {
		return en.pairP2P(g, og.ranks, ops, false)
	}
	// Non-P2P: match op by op through the ordinary record machinery, over
	// private copies of the group lists (fr_trace deep-copies them).
	lists := map[int]*rankList{}
	for _, r := range og.ranks {
		var es []*Entry
		for _, p := range og.pos[r] {
			es = append(es, en.byRank.get(r).entries[p])
		}
		lists[r] = newRankList(r, es, en.resolver(r))
	}
	present := map[int]bool{}
	for _, r := range og.ranks {
		present[r] = true
	}
	for {
		first := -1
		for _, r := range og.ranks {
			if present[r] {
				first = r
				break
			}
		}
		if first < 0 {
			return true
		}
		if len(ops[first]) == 0 {
			present[first] = false
			continue
		}
		l := lists[first]
		pos := l.head()
		if pos >= len(l.entries) {
			panic(abortError{"IndexError: list index out of range"})
		}
		cur := l.entries[pos]
		ops[first] = ops[first][1:]
		rec.entry, rec.errors = cur, nil
		rec.candidate.reset()
		rec.found.reset()
		rec.candidate.set(first, pos)
		listOf := func(r int) *rankList { return lists[r] }
		en.checkCurrentEntryMatch(g, cur, rec, listOf)
		en.errorAnalysis(g, first, cur, rec, listOf)
		if rec.allFound() && en.mismatch[g.guid] == 0 {
			for _, r := range rec.found.ranks {
				lists[r].remove(rec.found.at(r))
				if r != first && len(ops[r]) > 0 {
					ops[r] = ops[r][1:]
				}
			}
			continue
		}
		en.addCollective(g, len(rec.errors) == 0, false)
		return false
	}
}
