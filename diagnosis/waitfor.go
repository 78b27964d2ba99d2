// Package diagnosis turns the evidence about a job into a verdict. This
// file is its core: the wait-for graph across process groups, whose sinks
// are the culprits. It is pure logic over a Model, so that every source
// of evidence (the comm rings, the Flight Recorder, the stacks) feeds the
// same rule, and it never ranks by how old a pending collective is.
package diagnosis

import (
	"fmt"
	"slices"
	"sort"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// Op is one collective a rank entered: the group's own sequence number
// (group_seq, or the Flight Recorder's collective_seq_id) and its name.
type Op struct {
	Group string
	Seq   int64
	Name  string
}

// fromStack: seen in the rank's stack, not recorded (stackwaits.go): no
// sequence number, the whole job as its group.
func (o Op) fromStack() bool { return o.Group == stackGroup }

// String names the op in a line. Its name and group are what the job's
// rings or stacks said: shown as is when a plain word (all_reduce), else
// quoted (jobtext).
func (o Op) String() string {
	name := jobtext.Token(o.Name, jobtext.Name)
	if o.fromStack() {
		return name + " (seen in its stack)"
	}
	if o.Group == p2pAnyGroup {
		return name + " from any rank"
	}
	if src, dst, ok := p2pChannel(o.Group); ok {
		switch {
		case recvOps[o.Name]:
			return fmt.Sprintf("%s #%d from rank %d (%s)", name, o.Seq, src, ringsCount)
		case o.Name == "send" || o.Name == "isend":
			return fmt.Sprintf("%s #%d to rank %d (%s)", name, o.Seq, dst, ringsCount)
		}
		return fmt.Sprintf("message #%d from rank %d to rank %d (%s)", o.Seq, src, dst, ringsCount)
	}
	// The rings' number: this process's count of its calls on the group,
	// not the Flight Recorder's seq (story.go).
	return fmt.Sprintf("%s #%d on group %s (%s)", name, o.Seq, jobtext.Token(o.Group, jobtext.Name), ringsCount)
}

// Status is what a rank is doing.
type Status int

const (
	// Running: not inside any collective (computing, loading data, stuck
	// on the CPU side).
	Running Status = iota
	// InCollective: entered In and has not left it.
	InCollective
	// Dead: the process is gone.
	Dead
	// NoEvidence: nothing says what the rank is doing (no agent answered,
	// no ring, no dump).
	NoEvidence
)

// Rank is one rank's part of the picture.
type Rank struct {
	Rank   int
	Status Status
	In     *Op // when InCollective
	// Issued is, per group, the highest sequence number the rank entered.
	Issued map[string]int64
	// History is the collectives it entered, oldest first (recent ones are
	// enough): the program order that a divergence breaks.
	History []Op
}

// Model is the job as the evidence shows it: its process groups (every
// member listed, from the job's membership, not from who left evidence)
// and its ranks.
type Model struct {
	Groups map[string][]int
	Ranks  map[int]*Rank
}

// Edge says that From waits for To: From is in Seq of Group, which To has
// not entered.
type Edge struct {
	From, To int
	Group    string
	Seq      int64
}

// Sink kinds: why the ranks at the end of the wait-for chains do not move.
const (
	SinkCPU       = "cpu_side"          // not in any collective
	SinkDiverged  = "diverged"          // in a collective, out of its own program order
	SinkDead      = "dead"              // the process is gone
	SinkNoData    = "no_evidence"       // nothing says what it does
	SinkAllIn     = "all_in_collective" // every member entered the same collective
	SinkUndecided = "cycle"             // waiting on each other, and the order cannot tell who broke it
)

// Sink is one end of the wait-for chains.
type Sink struct {
	Kind  string
	Ranks []int // the culprit(s)
	// At is the collective a diverged or all-in sink is in.
	At *Op
	// Skipped: for a diverged sink, the collective its peers wait for in
	// it, which it moved past.
	Skipped *Op
	Why     string
}

// Graph is the wait-for graph and what it concludes.
type Graph struct {
	Edges []Edge
	Sinks []Sink
	// Collateral: ranks that wait, directly or not, for a sink.
	Collateral []int
	// Waiting: the ranks in a collective that wait for someone.
	Waiting int
	// P2P: some edge is a point-to-point channel's.
	P2P bool
}

// WaitFor builds the graph: a rank in collective #s of group g waits for
// every member of g that has not entered #s. Following the edges across
// groups leads to the sinks: ranks outside any collective, dead ranks,
// ranks without evidence, or a set of ranks waiting on each other in
// different groups, where the one whose program order changed is the
// culprit (a rank skipped a sub-group's collective and went on to the
// next one of another group, where its partner, still in the sub-group's,
// never comes).
func WaitFor(m Model) Graph {
	var g Graph
	out := map[int][]Edge{}
	for _, r := range sortedRanks(m) {
		if r.Status != InCollective || r.In == nil {
			continue
		}
		for _, q := range m.Groups[r.In.Group] {
			if q == r.Rank {
				continue
			}
			qr := m.Ranks[q]
			if qr == nil || qr.Status == Dead || qr.Status == NoEvidence || qr.Issued[r.In.Group] < r.In.Seq {
				e := Edge{From: r.Rank, To: q, Group: r.In.Group, Seq: r.In.Seq}
				out[r.Rank] = append(out[r.Rank], e)
				g.Edges = append(g.Edges, e)
				if !g.P2P {
					_, _, g.P2P = p2pChannel(e.Group)
				}
			}
		}
		if len(out[r.Rank]) > 0 {
			g.Waiting++
		} else {
			out[r.Rank] = nil // in a collective nobody is missing from: a node too
		}
	}
	// Terminal strongly connected components, and cycles, are the sinks.
	comps := tarjan(m, out)
	compOf := map[int]int{}
	for i, c := range comps {
		for _, r := range c {
			compOf[r] = i
		}
	}
	reach := map[int]bool{} // components some waiting rank reaches
	var visit func(r int)
	visit = func(r int) {
		for _, e := range out[r] {
			if !reach[e.To] {
				reach[e.To] = true
				visit(e.To)
			}
		}
	}
	for r := range out {
		visit(r)
	}
	culprit := map[int]bool{}
	for i, c := range comps {
		terminal := true
		for _, r := range c {
			for _, e := range out[r] {
				if compOf[e.To] != i {
					terminal = false
				}
			}
		}
		// A cycle never resolves, whoever else its members also wait for:
		// it is a sink even when not terminal.
		if !terminal && len(c) == 1 {
			continue
		}
		s, ok := sinkOf(m, c, out, reach)
		if !ok {
			continue
		}
		for _, r := range s.Ranks {
			culprit[r] = true
		}
		// Every member inside the same collective is one sink, not one per
		// rank.
		if s.Kind == SinkAllIn {
			if k := slices.IndexFunc(g.Sinks, func(o Sink) bool { return o.Kind == SinkAllIn && *o.At == *s.At }); k >= 0 {
				g.Sinks[k].Ranks = append(g.Sinks[k].Ranks, s.Ranks...)
				sort.Ints(g.Sinks[k].Ranks)
				continue
			}
		}
		g.Sinks = append(g.Sinks, s)
	}
	for r := range out {
		if !culprit[r] {
			g.Collateral = append(g.Collateral, r)
		}
	}
	sort.Ints(g.Collateral)
	sort.Slice(g.Sinks, func(i, j int) bool { return g.Sinks[i].Ranks[0] < g.Sinks[j].Ranks[0] })
	return g
}

// sinkOf explains a terminal component; ok is false for ranks nobody
// waits for that are not in a collective themselves (the job's other
// ranks, not part of any chain).
func sinkOf(m Model, c []int, out map[int][]Edge, reach map[int]bool) (Sink, bool) {
	sort.Ints(c)
	if len(c) == 1 {
		r := c[0]
		rk := m.Ranks[r]
		switch {
		case rk == nil || rk.Status == NoEvidence:
			return Sink{Kind: SinkNoData, Ranks: c, Why: fmt.Sprintf("rank %d left no evidence of what it does", r)}, reach[r]
		case rk.Status == Dead:
			return Sink{Kind: SinkDead, Ranks: c, Why: fmt.Sprintf("rank %d is dead", r)}, reach[r]
		case rk.Status == Running:
			return Sink{Kind: SinkCPU, Ranks: c, Why: fmt.Sprintf("rank %d is not in any collective", r)}, reach[r]
		case rk.In != nil && rk.In.Group == p2pAnyGroup:
			return Sink{Kind: SinkUndecided, Ranks: c, Why: fmt.Sprintf("rank %d waits in a %s: whom it waits for is not recorded", r, rk.In)}, reach[r]
		case len(out[r]) == 0:
			// In a collective every member entered: nobody is missing.
			at := *rk.In
			return Sink{Kind: SinkAllIn, Ranks: c, At: &at, Why: fmt.Sprintf("every member of group %s entered %s", at.Group, at)}, true
		}
		return Sink{}, false
	}
	// Ranks waiting on each other in different groups: the one that broke
	// its own order (entered its current collective without the one its
	// peer waits for, though in its history that one came first).
	var diverged []int
	var at, skipped *Op
	for _, r := range c {
		rk := m.Ranks[r]
		for _, q := range c {
			for _, e := range out[q] {
				if e.To != r || rk.In == nil || e.Group == rk.In.Group {
					continue
				}
				if skippedAhead(rk.History, *rk.In, e.Group, e.Seq) && !slices.Contains(diverged, r) {
					diverged = append(diverged, r)
					a, s := *rk.In, Op{Group: e.Group, Seq: e.Seq, Name: skippedName(e.Group, r, m.Ranks[q])}
					at, skipped = &a, &s
				}
			}
		}
	}
	if len(diverged) == 1 {
		r := diverged[0]
		why := fmt.Sprintf("rank %d entered %s without %s, which its peers wait for and which came first in its own earlier order", r, at, skipped)
		if src, dst, ok := p2pChannel(skipped.Group); ok {
			// Said as the counts per pair, which a reader can check.
			sent, peer, verb := m.Ranks[r].Issued[skipped.Group], dst, "sent"
			if dst == r {
				peer, verb = src, "received"
			}
			why = fmt.Sprintf("rank %d entered %s having %s %d message(s) to or from rank %d, while rank %d waits for message #%d (rings' count), which in rank %d's earlier steps came before this point",
				r, at, verb, sent, peer, peer, skipped.Seq, r)
			if verb == "sent" {
				why = fmt.Sprintf("rank %d entered %s having sent rank %d %d message(s), while rank %d waits for #%d (rings' count), which in rank %d's earlier steps it sent before this point",
					r, at, peer, sent, peer, skipped.Seq, r)
			}
		}
		return Sink{Kind: SinkDiverged, Ranks: diverged, At: at, Skipped: skipped, Why: why}, true
	}
	return Sink{Kind: SinkUndecided, Ranks: c,
		Why: fmt.Sprintf("ranks %v wait for each other in different groups and their order does not tell who diverged", c)}, true
}

// skippedName names the call rank r skipped in group g: its own side of a
// point-to-point channel, else the collective its peer waits in.
func skippedName(g string, r int, peer *Rank) string {
	if src, _, ok := p2pChannel(g); ok {
		if src == r {
			return "send"
		}
		return "recv"
	}
	return opName(peer)
}

func opName(r *Rank) string {
	if r != nil && r.In != nil {
		return r.In.Name
	}
	return "collective"
}

// skippedAhead reports whether a rank now in cur went past #t of group
// other against its own program order. Its history says how far it had
// got in other each time it entered cur's group before; over its last
// three entries that must have advanced at one steady rate (say one
// collective of other per collective of cur's group), which tells where
// other should stand when #cur.Seq is entered. Short of that, and short
// of t, it skipped t. Without three earlier entries at a steady rate,
// nothing is claimed: a wrong accusation is worse than none.
func skippedAhead(h []Op, cur Op, other string, t int64) bool {
	type at = struct{ i, j int64 }
	var past []at
	otherAt, now := int64(-1), int64(-1)
	for _, op := range h {
		switch op.Group {
		case other:
			otherAt = max(otherAt, op.Seq)
		case cur.Group:
			switch {
			case op.Seq == cur.Seq:
				now = otherAt
			case op.Seq < cur.Seq && otherAt >= 0:
				past = append(past, at{op.Seq, otherAt})
			}
		}
	}
	if now < 0 {
		now = otherAt // the current entry is not in the history
	}
	if len(past) < 3 || now < 0 {
		return false
	}
	a, b, c := past[len(past)-3], past[len(past)-2], past[len(past)-1]
	if b.i <= a.i || c.i <= b.i || (b.j-a.j)*(c.i-b.i) != (c.j-b.j)*(b.i-a.i) || ((c.j-b.j)*(cur.Seq-c.i))%(c.i-b.i) != 0 {
		return periodicSkip(past, cur.Seq, now, t)
	}
	expected := c.j + (c.j-b.j)*(cur.Seq-c.i)/(c.i-b.i)
	if now < expected && t <= expected {
		return true
	}
	return periodicSkip(past, cur.Seq, now, t)
}

// maxPeriod bounds the step lengths periodicSkip tries.
const maxPeriod = 64

// periodicSkip is skippedAhead for a program whose rates change within a
// step (a pipeline stage receives every micro-batch's activations, then
// sends every gradient back): entries one step apart stand in the same
// place of their steps. A period p counts when every entry of the last
// three periods before cur is there and each advanced the other group by
// the same amount D > 0 over the one p before it: then the other group
// should stand at cur-p's place plus D; short of that, and short of t,
// the rank skipped t. The shortest such period is the step (a shorter
// one that fits only its three sampled points is not accepted). Without
// it nothing is claimed.
func periodicSkip(past []struct{ i, j int64 }, cur, now, t int64) bool {
	at := make(map[int64]int64, len(past))
	for _, e := range past {
		at[e.i] = e.j
	}
	for p := int64(1); p <= maxPeriod; p++ {
		c, ok := at[cur-p]
		b, okB := at[cur-2*p]
		if !ok || !okB || c-b <= 0 {
			continue
		}
		d := c - b
		steady := true
		for i := cur - 3*p; i < cur-p && steady; i++ {
			x, okX := at[i]
			y, okY := at[i+p]
			steady = okX && okY && y-x == d
		}
		if !steady {
			continue
		}
		expected := c + d
		return now < expected && t <= expected
	}
	return false
}

func sortedRanks(m Model) []*Rank {
	rs := make([]*Rank, 0, len(m.Ranks))
	for _, r := range m.Ranks {
		rs = append(rs, r)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Rank < rs[j].Rank })
	return rs
}

// tarjan returns the strongly connected components of the ranks that
// take part in some edge.
func tarjan(m Model, out map[int][]Edge) [][]int {
	nodes := map[int]bool{}
	for r, es := range out {
		nodes[r] = true
		for _, e := range es {
			nodes[e.To] = true
		}
	}
	var order []int
	for r := range nodes {
		order = append(order, r)
	}
	sort.Ints(order)
	index, low := map[int]int{}, map[int]int{}
	on := map[int]bool{}
	var stack []int
	var comps [][]int
	n := 0
	var strong func(v int)
	strong = func(v int) {
		index[v], low[v] = n, n
		n++
		stack = append(stack, v)
		on[v] = true
		for _, e := range out[v] {
			w := e.To
			if _, seen := index[w]; !seen {
				strong(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var c []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				on[w] = false
				c = append(c, w)
				if w == v {
					break
				}
			}
			comps = append(comps, c)
		}
	}
	for _, v := range order {
		if _, seen := index[v]; !seen {
			strong(v)
		}
	}
	return comps
}
