package diagnosis

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Mismatch is one collective of a group (one group_seq) that its members
// called differently: other ops, or the same op on other dtypes or sizes.
type Mismatch struct {
	Group string
	Seq   int64
	Sides []CallSide // the largest side first
	// Culprits are the ranks outside the largest side (every rank when no
	// side is larger than the others).
	Culprits []int
	// Stuck: some member has not returned from this call.
	Stuck bool
	// ByHistory: the sides were even, and the culprits are the side whose
	// call differs from its own earlier calls on this group (Why says
	// so); the other side called what it always had.
	ByHistory bool
	Why       string
}

// key is one collective of one group.
type key struct {
	group string
	seq   int64
}

// breakTie settles even sides (a two-member group has no majority) by
// each side's own history on the group: the side whose call changed is
// the culprit, when exactly one side changed.
func breakTie(m *Mismatch, calls map[key][]evidence.CommRow, group string) {
	sig := func(r evidence.CommRow) string { return r.Op + "|" + r.Dtype + "|" + sizeText(r) }
	changed := make([]bool, len(m.Sides))
	known := make([]bool, len(m.Sides))
	now := map[int]evidence.CommRow{}
	for _, r := range calls[key{group, m.Seq}] {
		now[r.Rank] = r
	}
	// Each rank's latest earlier call of the same op on the group (an op
	// it never called there before is a change too).
	for i, side := range m.Sides {
		for _, rank := range side.Ranks {
			same := false
			for seq := m.Seq - 1; seq >= max(1, m.Seq-16) && !same; seq-- {
				for _, r := range calls[key{group, seq}] {
					if r.Rank != rank {
						continue
					}
					known[i] = true
					if r.Op == now[rank].Op {
						same = true
						changed[i] = changed[i] || sig(r) != sig(now[rank])
					}
				}
			}
			if known[i] && !same {
				changed[i] = true
			}
		}
	}
	n, which := 0, -1
	for i := range m.Sides {
		if !known[i] {
			return // a side without history: nothing to compare
		}
		if changed[i] {
			n, which = n+1, i
		}
	}
	if n != 1 {
		return
	}
	m.Culprits = append([]int(nil), m.Sides[which].Ranks...)
	m.ByHistory = true
	m.Why = fmt.Sprintf("the sides are even, but %s's call differs from %s own earlier calls on this group, the others' does not",
		rankWords(m.Sides[which].Ranks), plural(len(m.Sides[which].Ranks), "its", "their"))
}

// CallSide is what some members of the group called.
type CallSide struct {
	Op, Dtype, Size string // Size: the shape, else the bytes; "" when not compared
	Ranks           []int
}

// sizeOps are the collectives whose every member passes a tensor of the
// same size (all_to_all, gather and scatter may legitimately differ).
var sizeOps = map[string]bool{"all_reduce": true, "broadcast": true, "reduce": true, "all_gather": true,
	"all_gather_into_tensor": true, "reduce_scatter_tensor": true, "reduce_scatter": true}

// FindMismatches compares, per group and group_seq, what each member
// called, and returns the first mismatch of each group (later ones follow
// from it), oldest group_seq first. A field is compared only when every
// member's row has it. Groups with point-to-point calls, or whose rows
// repeat a group_seq within one rank (two process groups over the same
// ranks, which the rings cannot tell apart), are left out.
func FindMismatches(rows []evidence.CommRow, world int) []Mismatch {
	calls := map[key][]evidence.CommRow{}
	skip := map[string]bool{}
	seen := map[string]map[int]map[int64]bool{}
	groups := groupCache{}
	for _, r := range rows {
		if r.Rank < 0 || r.GroupSeq <= 0 {
			continue
		}
		if r.P2PPeer() >= 0 {
			continue // counted on its channel, not on the group
		}
		g, _, err := groups.of(r.Ranks, world)
		if err != nil {
			continue
		}
		if evidence.P2POps[r.Op] {
			// An older agent counted point-to-point calls on the group: its
			// group_seq differs across members by design, no comparing it.
			skip[g] = true
		}
		if seen[g] == nil {
			seen[g] = map[int]map[int64]bool{}
		}
		if seen[g][r.Rank] == nil {
			seen[g][r.Rank] = map[int64]bool{}
		}
		if seen[g][r.Rank][r.GroupSeq] {
			skip[g] = true
		}
		seen[g][r.Rank][r.GroupSeq] = true
		k := key{g, r.GroupSeq}
		calls[k] = append(calls[k], r)
	}
	first := map[string]Mismatch{}
	for k, rs := range calls {
		if skip[k.group] || len(rs) < 2 {
			continue
		}
		if m, ok := compareCalls(k.group, k.seq, rs); ok {
			if len(m.Sides[0].Ranks) == len(m.Sides[1].Ranks) {
				breakTie(&m, calls, k.group)
			}
			if prev, had := first[k.group]; !had || m.Seq < prev.Seq {
				first[k.group] = m
			}
		}
	}
	var out []Mismatch
	for _, m := range first {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Seq != out[j].Seq {
			return out[i].Seq < out[j].Seq
		}
		return out[i].Group < out[j].Group
	})
	return out
}

func compareCalls(group string, seq int64, rs []evidence.CommRow) (Mismatch, bool) {
	allDtype, allSize, sameOp := true, true, true
	for _, r := range rs {
		allDtype = allDtype && r.Dtype != ""
		allSize = allSize && (r.Shape != "" || r.Bytes > 0)
		sameOp = sameOp && r.Op == rs[0].Op
	}
	m := Mismatch{Group: group, Seq: seq}
	type call struct{ op, dtype, size string }
	sides := map[call][]int{}
	for _, r := range rs {
		c := call{op: r.Op}
		if allDtype {
			c.dtype = r.Dtype
		}
		if allSize && sameOp && sizeOps[r.Op] {
			c.size = sizeText(r)
		}
		sides[c] = append(sides[c], r.Rank)
		if r.DurationMS < 0 {
			m.Stuck = true
		}
	}
	if len(sides) < 2 {
		return Mismatch{}, false
	}
	for c, ranks := range sides {
		sort.Ints(ranks)
		m.Sides = append(m.Sides, CallSide{Op: c.op, Dtype: c.dtype, Size: c.size, Ranks: ranks})
	}
	sort.Slice(m.Sides, func(i, j int) bool {
		if len(m.Sides[i].Ranks) != len(m.Sides[j].Ranks) {
			return len(m.Sides[i].Ranks) > len(m.Sides[j].Ranks)
		}
		return m.Sides[i].Ranks[0] < m.Sides[j].Ranks[0]
	})
	from := 1
	if len(m.Sides[0].Ranks) == len(m.Sides[1].Ranks) {
		from = 0 // no majority: every side is suspect
	}
	for _, s := range m.Sides[from:] {
		m.Culprits = append(m.Culprits, s.Ranks...)
	}
	sort.Ints(m.Culprits)
	return m, true
}

// sizeText: the shape when the row has one (it says more), else the bytes.
// Both are compared as recorded: the agent writes them the same way on
// every rank.
func sizeText(r evidence.CommRow) string {
	if r.Shape != "" {
		if r.Bytes > 0 {
			return fmt.Sprintf("%s, %d bytes", r.Shape, r.Bytes)
		}
		return r.Shape
	}
	return fmt.Sprintf("%d bytes", r.Bytes)
}

func (m Mismatch) words() string {
	var parts []string
	for _, s := range m.Sides {
		call := s.Op
		var facts []string
		if s.Dtype != "" {
			facts = append(facts, s.Dtype)
		}
		if s.Size != "" {
			facts = append(facts, s.Size)
		}
		if len(facts) > 0 {
			call += " (" + strings.Join(facts, ", ") + ")"
		}
		parts = append(parts, fmt.Sprintf("%s called %s", rankWords(s.Ranks), call))
	}
	return fmt.Sprintf("collective #%d (rings' count) of group %s was called differently: %s", m.Seq, m.Group, strings.Join(parts, "; "))
}

// mismatchHypothesis explains m; sink, when not nil, is the all-in sink
// of that very collective (every member inside it): the rings then show
// the job hanging in the mismatched call.
func mismatchHypothesis(m Mismatch, sink *Sink) Hypothesis {
	h := Hypothesis{Category: CatMismatch, culprits: m.Culprits}
	h.Evidence = []Evidence{{"comm_rings", m.words()}}
	decided := len(m.Sides[0].Ranks) > len(m.Sides[1].Ranks) || m.ByHistory
	switch {
	case sink != nil && decided:
		h.Confidence = High
	case sink != nil || m.Stuck:
		h.Confidence = Medium
	default:
		h.Confidence = Low
	}
	switch {
	case sink != nil:
		h.Evidence = append(h.Evidence, Evidence{"comm_rings", "every member is inside this call and none returned: the mismatched call is where the job hangs"})
	case m.Stuck:
		h.Evidence = append(h.Evidence, Evidence{"comm_rings", "some member has not returned from this call"})
	default:
		h.Evidence = append(h.Evidence, Evidence{"comm_rings", "this call returned on every member (a backend may let a mismatch through, with wrong results, and hang later)"})
	}
	switch {
	case m.ByHistory:
		h.Evidence = append(h.Evidence, Evidence{"comm_rings", m.Why})
		var rest []int
		for _, side := range m.Sides {
			if !slices.Equal(side.Ranks, m.Culprits) {
				rest = append(rest, side.Ranks...)
			}
		}
		sort.Ints(rest)
		h.collateral, h.Collateral = rest, rankset.Format(rest)
	case !decided:
		h.Evidence = append(h.Evidence, Evidence{"comm_rings", "no side is larger than the other: which one is wrong cannot be told from the calls"})
	default:
		h.Collateral = rankset.Format(m.Sides[0].Ranks)
	}
	h.Confirm = fmt.Sprintf("snapshot_flight_recorder: the collective the rings count #%d of group %s, each rank's op, sizes and dtype", m.Seq, m.Group)
	h.Refute = "the Flight Recorder shows the same call on every member"
	return h
}

// refineAllIn makes an all-in-collective sink a collective mismatch when
// the members called that collective differently.
func refineAllIn(h Hypothesis, s Sink, ms []Mismatch) Hypothesis {
	if s.At == nil {
		return h
	}
	for _, m := range ms {
		if m.Group == s.At.Group && m.Seq == s.At.Seq {
			return mismatchHypothesis(m, &s)
		}
	}
	return h
}

// mergeMismatches drops repeats of one mismatch (its members sit in
// calls of different names, so the wait-for graph finds one all-in sink
// per name) and adds the mismatches no hypothesis has explained yet.
func mergeMismatches(hs []Hypothesis, ms []Mismatch) []Hypothesis {
	var out []Hypothesis
	said := map[string]bool{}
	for _, h := range hs {
		if h.Category == CatMismatch {
			if said[h.Evidence[0].Text] {
				continue
			}
			said[h.Evidence[0].Text] = true
		}
		out = append(out, h)
	}
	for _, m := range ms {
		if h := mismatchHypothesis(m, nil); !said[h.Evidence[0].Text] {
			said[h.Evidence[0].Text] = true
			out = append(out, h)
		}
	}
	return out
}

// mismatchDeaths: a job dead of a mismatched collective. Backends do not
// always hang on a mismatch: gloo breaks the connection, torch's
// TORCH_DISTRIBUTED_DEBUG=DETAIL raises "Detected mismatch between
// collectives", and the ranks die of it, the first one inside the very
// call. When the first to die (the dead_rank hypothesis's culprit) died in
// a collective the rings show mismatched, or says so itself, the mismatch
// is the cause: it comes first, its culprits the minority side (or, when
// the sides are even, the side of the first death), and the deaths stay as
// the next hypothesis.
func mismatchDeaths(hs []Hypothesis, in Input, ms []Mismatch) []Hypothesis {
	di := -1
	for i, h := range hs {
		if h.Category == CatDeadRank && len(h.culprits) == 1 {
			di = i
			break
		}
	}
	if di < 0 {
		return hs
	}
	c := hs[di].culprits[0]
	f := in.Ranks[c]
	if f == nil || f.Alive {
		return hs
	}
	said := ""
	if f.Record != nil && f.Record.Exception != nil && strings.Contains(f.Record.Exception.Message, "mismatch between collectives") {
		said = firstLine(f.Record.Exception.Message)
	}
	// The collective c was in last, per group.
	last := map[string]int64{}
	var lastTS int64
	lastGroup := ""
	groups := groupCache{}
	for _, r := range in.Comm {
		if r.Rank != c || r.GroupSeq <= 0 {
			continue
		}
		g, _, err := groups.of(r.Ranks, in.World)
		if err != nil {
			continue
		}
		last[g] = max(last[g], r.GroupSeq)
		if r.TimestampUS >= lastTS {
			lastTS, lastGroup = r.TimestampUS, g
		}
	}
	var m *Mismatch
	for i := range ms {
		if ms[i].Group == lastGroup && ms[i].Seq == last[lastGroup] && sideOf(ms[i], c) >= 0 {
			m = &ms[i]
		}
	}
	if m == nil && said == "" {
		return hs
	}
	var h Hypothesis
	if m != nil {
		h = mismatchHypothesis(*m, nil)
		even := len(m.Sides[0].Ranks) == len(m.Sides[1].Ranks)
		h.Evidence = h.Evidence[:1]
		if m.ByHistory {
			h.Evidence = append(h.Evidence, Evidence{"comm_rings", m.Why})
		}
		h.Evidence = append(h.Evidence, Evidence{"agent", fmt.Sprintf("rank %d died first, inside this very call: %s", c, endingWords(f))})
		h.Confidence = Medium
		switch {
		case even && !m.ByHistory:
			// Who died first does not say who called wrong: in gloo the
			// rank that receives the longer payload aborts first.
			h.Confidence = Low
			h.Evidence = append(h.Evidence, Evidence{"comm_rings", "the sides are even and their own histories do not tell which call changed: either side may be wrong (the first to die may be the one that received the wrong payload)"})
		case !even || m.ByHistory || said != "":
			h.Confidence = High
		}
	} else {
		h = Hypothesis{Category: CatMismatch, culprits: []int{c}, Confidence: Medium,
			Evidence: []Evidence{{"agent", fmt.Sprintf("rank %d died first, of torch's own mismatch check: %s", c, said)}},
			Confirm:  "the job's log: torch's CollectiveFingerPrint lines name each rank's op, shape and dtype",
			Refute:   "the ranks' calls at that sequence number agree"}
	}
	if said != "" && m != nil {
		h.Evidence = append(h.Evidence, Evidence{"agent", "torch itself said so: " + said})
	}
	if f.Record != nil {
		h.whereThread = exceptionThread(f.Record.Exception)
	}
	out := []Hypothesis{h}
	for i, o := range hs {
		if o.Category == CatMismatch && m != nil && strings.HasPrefix(o.Evidence[0].Text, fmt.Sprintf("collective #%d (rings' count) of group %s ", m.Seq, m.Group)) {
			continue // said above
		}
		if i == di && o.Confidence == High {
			o.Confidence = Medium // true, but the mismatch is why
		}
		out = append(out, o)
	}
	return out
}

func sideOf(m Mismatch, r int) int {
	for k, s := range m.Sides {
		for _, x := range s.Ranks {
			if x == r {
				return k
			}
		}
	}
	return -1
}
