package membership

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Bounds of Merge's conflict check: ranks parsed over all nodes, and
// conflicts said (past it, one line says more were not listed).
const (
	maxMergeRanks = 1 << 22
	maxConflicts  = 64
)

// Merge folds lists from several sources into one entry per Addr, in
// first-seen order: the newest LastSeen, the first non-empty Host,
// Ranks, Kind and known NodeRank, and every source joined ("store+peers").
// Addresses are never rewritten. Different addresses that claim
// overlapping ranks, or nodes of one kind that claim the same Host and
// NodeRank, are conflicts said in words; both are kept.
func Merge(lists ...[]cluster.Node) ([]cluster.Node, []string) {
	var (
		out      []cluster.Node
		problems []string
		at       = map[string]int{}
		sources  = map[string]map[string]bool{}
	)
	for _, l := range lists {
		for _, n := range l {
			i, ok := at[n.Addr]
			if !ok {
				if len(out) >= MaxNodes {
					problems = append(problems, fmt.Sprintf("more than %d nodes across the sources; %s and later ones left out", MaxNodes, n.Addr))
					return out, problems
				}
				at[n.Addr] = len(out)
				sources[n.Addr] = map[string]bool{n.Source: true}
				out = append(out, n)
				continue
			}
			m := &out[i]
			if n.LastSeen.After(m.LastSeen) {
				m.LastSeen = n.LastSeen
			}
			if m.Host == "" {
				m.Host = n.Host
			}
			if m.Ranks == "" {
				m.Ranks = n.Ranks
			}
			if m.Kind == "" {
				m.Kind = n.Kind
			}
			if m.NodeRank < 0 {
				m.NodeRank = n.NodeRank
			}
			if n.Source != "" && !sources[n.Addr][n.Source] {
				sources[n.Addr][n.Source] = true
				if m.Source == "" {
					m.Source = n.Source
				} else {
					m.Source += "+" + n.Source
				}
			}
		}
	}
	problems = append(problems, rankConflicts(out)...)
	problems = append(problems, nodeRankConflicts(out)...)
	return out, problems
}

func label(n cluster.Node) string {
	addr := jobtext.Token(n.Addr, jobtext.Name)
	if n.Host == "" {
		return addr
	}
	return jobtext.Quote(n.Host, jobtext.Name) + " (" + addr + ")"
}

type ival struct{ lo, hi, node int }

// rankConflicts sweeps every node's rank ranges in order of their start:
// an active range that reaches the new one's start overlaps it. Work is
// bounded by the ranks parsed and the conflicts said.
func rankConflicts(ns []cluster.Node) []string {
	var (
		ivs      []ival
		problems []string
		budget   = maxMergeRanks
	)
	for i, n := range ns {
		if strings.TrimSpace(n.Ranks) == "" {
			continue
		}
		rs, err := rankset.Parse(n.Ranks)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: ranks %s: %v; its ranks were not checked", label(n), jobtext.Quote(n.Ranks, jobtext.Name), err))
			continue
		}
		if budget -= len(rs); budget < 0 {
			problems = append(problems, fmt.Sprintf("more than %d ranks across the nodes; overlaps were checked only among the nodes before %s", maxMergeRanks, label(n)))
			break
		}
		for j := 0; j < len(rs); {
			k := j
			for k+1 < len(rs) && rs[k+1] == rs[k]+1 {
				k++
			}
			ivs = append(ivs, ival{rs[j], rs[k], i})
			j = k + 1
		}
	}
	sort.Slice(ivs, func(a, b int) bool { return ivs[a].lo < ivs[b].lo })
	type pair struct{ a, b int }
	overlaps := map[pair][][2]int{}
	var order []pair
	var active []ival
	found := 0
sweep:
	for _, cur := range ivs {
		kept := active[:0]
		for _, a := range active {
			if a.hi >= cur.lo {
				kept = append(kept, a)
			}
		}
		active = kept
		for _, a := range active {
			if found++; found > maxConflicts*16 {
				break sweep
			}
			p := pair{min(a.node, cur.node), max(a.node, cur.node)}
			if _, ok := overlaps[p]; !ok {
				order = append(order, p)
			}
			overlaps[p] = append(overlaps[p], [2]int{cur.lo, min(a.hi, cur.hi)})
		}
		active = append(active, cur)
	}
	for i, p := range order {
		if i == maxConflicts {
			problems = append(problems, fmt.Sprintf("%d more rank conflicts not listed", len(order)-i))
			break
		}
		problems = append(problems, fmt.Sprintf("ranks %s claimed by %s and %s", formatIvals(overlaps[p]), label(ns[p.a]), label(ns[p.b])))
	}
	if found > maxConflicts*16 {
		problems = append(problems, "the rank conflict check stopped early: too many overlapping claims")
	}
	return problems
}

// formatIvals writes ranges as "8-15,20", merging adjacent ones.
func formatIvals(iv [][2]int) string {
	sort.Slice(iv, func(a, b int) bool { return iv[a][0] < iv[b][0] })
	var b strings.Builder
	for i := 0; i < len(iv); {
		lo, hi := iv[i][0], iv[i][1]
		j := i + 1
		for j < len(iv) && iv[j][0] <= hi+1 {
			hi = max(hi, iv[j][1])
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(lo))
		if hi > lo {
			b.WriteString("-" + strconv.Itoa(hi))
		}
		i = j
	}
	return b.String()
}

// nodeRankConflicts: two endpoints of one kind (a Probing agent and our
// daemon on one node legitimately share host and node rank) claiming the
// same host and node rank.
func nodeRankConflicts(ns []cluster.Node) []string {
	type key struct {
		host, kind string
		rank       int
	}
	first := map[key]int{}
	var problems []string
	for i, n := range ns {
		if n.Host == "" || n.NodeRank < 0 {
			continue
		}
		k := key{n.Host, n.Kind, n.NodeRank}
		j, ok := first[k]
		if !ok {
			first[k] = i
			continue
		}
		if len(problems) == maxConflicts {
			problems = append(problems, "more node rank conflicts not listed")
			break
		}
		problems = append(problems, fmt.Sprintf("node rank %d on host %s claimed by %s and %s", n.NodeRank, jobtext.Quote(n.Host, jobtext.Name), jobtext.Token(ns[j].Addr, jobtext.Name), jobtext.Token(n.Addr, jobtext.Name)))
	}
	return problems
}
