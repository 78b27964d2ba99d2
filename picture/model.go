// Package picture draws a diagnosis as one self-contained HTML page: the
// wait-for graph across process groups (rank groups as nodes, the culprit
// highlighted with its line of code), a lane per rank group of its last
// collectives on a shared time axis, the merged stacks of the culprit and
// of the largest group, and the evidence and data-quality lines as the
// text answer has them. The page is a model built from what the verdict
// or the Flight Recorder analysis already computed, laid out in Go and
// rendered by html/template: no network, no script fed with job text.
package picture

import (
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Roles of a node.
const (
	RoleCulprit = "culprit"
	RoleVictim  = "victim" // waits, directly or not, for a culprit
	RoleOther   = "other"
)

// Bounds: the page stays readable and small at any job size. Ranks are
// grouped, never drawn one by one.
const (
	MaxNodes     = 24  // graph nodes; the rest merged per role
	MaxLanes     = 16  // lanes, one per node, culprits first
	MaxLaneOps   = 8   // collectives per lane
	MaxFlameRows = 40  // frames per flame
	MaxLines     = 60  // evidence and data-quality lines each
	MaxText      = 200 // characters of job text shown
	MaxTitle     = 400 // characters of job text in a title attribute
)

// Page is one diagnosis as the page shows it.
type Page struct {
	Title string
	// From says what the page was drawn from.
	From     string
	State    string
	StateWhy string
	Summary  string
	// Shows says what the page shows, and what it cannot (no graph for a
	// moving job, lanes without times, missing dumps).
	Shows       []string
	Graph       Graph
	Lanes       []Lane
	LaneAxis    string // "time" or "order"
	Flames      []Flame
	Evidence    []Line
	DataQuality []string
}

// Line is one line of proof and where it came from; Head marks a
// hypothesis' own line (its category, confidence and culprits).
type Line struct {
	Source string
	Text   string
	Head   bool
}

// Node is a group of ranks doing the same thing.
type Node struct {
	ID    int
	Ranks string
	Count int
	Doing string
	Role  string
	// Where is the culprit's line of code ("file:line (function)") and
	// Source the line itself, when known.
	Where, Source string
	ranks         []int
}

// Edge says that the ranks of From wait for those of To, in the
// collective Label names (its group and sequence number).
type Edge struct {
	From, To int
	Label    string
	// Count is how many waits (rank pairs) the edge stands for; More how
	// many other collectives they wait in besides Label's.
	Count, More int
	Cycle       bool
}

// Graph is the wait-for graph between rank groups.
type Graph struct {
	Nodes []Node
	Edges []Edge
	// Merged says how many rank groups were merged into the "other" nodes.
	Merged int
}

// Lane is one rank group's last collectives, as one of its ranks
// recorded them.
type Lane struct {
	Node  int
	Ranks string
	Role  string
	Rank  int // whose collectives are drawn
	Ops   []LaneOp
}

// Lane op states.
const (
	OpLeft   = "left"
	OpInside = "inside"
	OpNever  = "never" // peers wait in it, this group never entered it
)

// LaneOp is one collective on a lane: Start and End in Unix ns (End 0
// while inside), or positions on the order axis.
type LaneOp struct {
	Label      string
	Start, End int64
	State      string
	Stuck      bool
}

// Flame is the merged stacks of a set of ranks, outermost frame first.
type Flame struct {
	Title string
	Ranks string
	Count int
	Rows  [][]Bar
}

// Bar is one frame shared by Count of the flame's ranks; X and W are
// fractions of the flame's width. Odd: fewer ranks than its siblings
// (the odd ones out, drawn first).
type Bar struct {
	X, W  float64
	Text  string
	Count int
	Odd   bool
}

// clip makes job text safe to show: invisible and control runes escaped,
// one line, at most n characters with an ellipsis.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(jobtext.Clean(s)), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// nodeKey groups ranks: by role first, so a culprit never shares a node
// with the ranks that wait for it, then by what they do.
type nodeKey struct{ role, doing string }

// groupNodes makes the nodes from each rank's line and role: culprits
// first, then victims, then the rest, the largest first within a role;
// past MaxNodes the smallest are merged per role.
func groupNodes(doing map[int]string, role func(int) string) ([]Node, map[int]int, int) {
	by := map[nodeKey][]int{}
	for r, d := range doing {
		k := nodeKey{role(r), d}
		by[k] = append(by[k], r)
	}
	keys := make([]nodeKey, 0, len(by))
	for k, rs := range by {
		sort.Ints(rs)
		keys = append(keys, k)
	}
	order := map[string]int{RoleCulprit: 0, RoleVictim: 1, RoleOther: 2}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if order[a.role] != order[b.role] {
			return order[a.role] < order[b.role]
		}
		if len(by[a]) != len(by[b]) {
			return len(by[a]) > len(by[b])
		}
		return by[a][0] < by[b][0]
	})
	var nodes []Node
	merged := 0
	rest := map[string][]int{}
	for i, k := range keys {
		// Past the bound the smallest groups of each role are merged, one
		// node a role (culprits come first, so they keep the most nodes).
		if i >= MaxNodes-3 {
			rest[k.role] = append(rest[k.role], by[k]...)
			merged++
			continue
		}
		nodes = append(nodes, Node{Role: k.role, Doing: k.doing, ranks: by[k]})
	}
	for _, role := range []string{RoleCulprit, RoleVictim, RoleOther} {
		if rs := rest[role]; len(rs) > 0 {
			sort.Ints(rs)
			what := map[string]string{RoleCulprit: "other culprits", RoleVictim: "other waiting ranks", RoleOther: "other ranks"}[role]
			nodes = append(nodes, Node{Role: role, Doing: what + ", doing various things (the per-rank listing of the text answer has each)", ranks: rs})
		}
	}
	of := map[int]int{}
	for i := range nodes {
		n := &nodes[i]
		n.ID, n.Count, n.Ranks = i, len(n.ranks), rankset.Short(rankset.Format(n.ranks))
		for _, r := range n.ranks {
			of[r] = i
		}
	}
	return nodes, of, merged
}

// edgeSet aggregates rank-to-rank waits into node-to-node edges: one per
// pair of nodes, labelled by the first collective waited in.
type edgeSet struct {
	idx    map[[2]int]int
	edges  []Edge
	labels []map[string]bool
}

func (s *edgeSet) add(from, to int, label string) {
	if from == to {
		return
	}
	if s.idx == nil {
		s.idx = map[[2]int]int{}
	}
	k := [2]int{from, to}
	i, ok := s.idx[k]
	if !ok {
		i = len(s.edges)
		s.idx[k] = i
		s.edges = append(s.edges, Edge{From: from, To: to, Label: label})
		s.labels = append(s.labels, map[string]bool{label: true})
	}
	s.edges[i].Count++
	if !s.labels[i][label] && len(s.labels[i]) < 1<<16 {
		s.labels[i][label] = true
		s.edges[i].More++
	}
}

// done marks the edges of cycles between nodes (each in a strongly
// connected component of more than one node) and returns them.
func (s *edgeSet) done(n int) []Edge {
	out := make([][]int, n)
	for _, e := range s.edges {
		out[e.From] = append(out[e.From], e.To)
	}
	comp := scc(n, out)
	size := map[int]int{}
	for _, c := range comp {
		size[c]++
	}
	for i := range s.edges {
		e := &s.edges[i]
		e.Cycle = comp[e.From] == comp[e.To] && size[comp[e.From]] > 1
	}
	return s.edges
}

// scc is each node's strongly connected component (Tarjan's).
func scc(n int, out [][]int) []int {
	index, low, comp := make([]int, n), make([]int, n), make([]int, n)
	for i := range index {
		index[i], comp[i] = -1, -1
	}
	var stack []int
	on := make([]bool, n)
	next, c := 0, 0
	var visit func(v int)
	visit = func(v int) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		on[v] = true
		for _, w := range out[v] {
			if index[w] < 0 {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				on[w] = false
				comp[w] = c
				if w == v {
					break
				}
			}
			c++
		}
	}
	for v := 0; v < n; v++ {
		if index[v] < 0 {
			visit(v)
		}
	}
	return comp
}

// lines clips a list of lines to MaxLines and MaxText each, saying what
// was left out.
func lines(in []string) []string {
	out := make([]string, 0, min(len(in), MaxLines+1))
	for i, l := range in {
		if i == MaxLines {
			out = append(out, clip("… and "+strconv.Itoa(len(in)-MaxLines)+" more lines (the text answer has them)", MaxText))
			break
		}
		out = append(out, clipLine(l))
	}
	return out
}

// clipLine bounds an evidence line: these are the answer's own lines,
// whose job text is already quoted and clipped; a line stays readable
// at twice MaxText.
func clipLine(s string) string { return clip(s, 2*MaxText) }
