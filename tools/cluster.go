package tools

import (
	"context"
	"fmt"
	"strings"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// CoverageView says, in a whole-job answer, which nodes answered and
// why the others did not.
type CoverageView struct {
	Text     string   `json:"text"`
	Asked    int      `json:"nodes_asked"`
	Answered int      `json:"nodes_answered"`
	Missing  []string `json:"missing,omitempty"`
	Problems []string `json:"problems,omitempty"`
	raw      evidence.Coverage
}

// maxCoverageLines bounds the missing nodes and problems listed.
const maxCoverageLines = 20

// coverageView is a whole-job answer's coverage, bounded; nil (a node's
// answer) is nil.
func coverageView(c *evidence.Coverage) *CoverageView {
	if c == nil {
		return nil
	}
	v := &CoverageView{Text: c.Text(), Asked: c.Asked, Answered: c.Answered, raw: *c}
	for i, m := range c.Missing {
		if i == maxCoverageLines {
			v.Missing = append(v.Missing, fmt.Sprintf("… and %d more (truncated)", len(c.Missing)-i))
			break
		}
		v.Missing = append(v.Missing, m.Words())
	}
	for i, p := range c.Problems {
		if i == maxCoverageLines {
			v.Problems = append(v.Problems, fmt.Sprintf("… and %d more (truncated)", len(c.Problems)-i))
			break
		}
		v.Problems = append(v.Problems, p)
	}
	return v
}

// ListClusterNodesParams are the arguments of list_cluster_nodes.
type ListClusterNodesParams struct {
	Status string `json:"status,omitempty" jsonschema:"enum=ok,enum=timeout,enum=unreachable,enum=auth,enum=garbage,enum=refused,enum=not_daemon" jsonschema_description:"Only nodes with this status (ok, timeout, unreachable, auth, garbage, refused, not_daemon); default every node"`
	Offset int    `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"First node (default 0)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"minimum=0,maximum=1000" jsonschema_description:"Nodes per page (default 100)"`
}

// ListClusterNodesResult is the job's nodes, paged.
type ListClusterNodesResult struct {
	Summary    string              `json:"summary"`
	Nodes      []fanout.NodeStatus `json:"nodes"`
	Total      int                 `json:"total"`
	NextOffset *int                `json:"next_offset,omitempty"`
	Coverage   *CoverageView       `json:"coverage"`
}

// ModelText is one line per node, the failing ones first.
func (r ListClusterNodesResult) ModelText() string {
	var b strings.Builder
	b.WriteString(r.Summary + "\n")
	for _, n := range r.Nodes {
		fmt.Fprintf(&b, "  %s %s node_rank %d ranks %s: %s", jobtext.Quote(n.Host, jobtext.Name), jobtext.Word(n.Addr), n.NodeRank, rankText(n.Ranks), jobtext.Word(n.Status))
		if n.Why != "" {
			b.WriteString(" (" + clip(n.Why, jobtext.Line) + ")")
		}
		if n.Dead != "" {
			b.WriteString("; dead ranks " + n.Dead)
		}
		if n.ClockOffsetMS != 0 {
			fmt.Fprintf(&b, "; clock %+d ms from the coordinator's", n.ClockOffsetMS)
		}
		b.WriteString("\n")
	}
	if r.NextOffset != nil {
		fmt.Fprintf(&b, "More nodes: call again with offset %d.\n", *r.NextOffset)
	}
	if r.Coverage != nil {
		for _, p := range r.Coverage.Problems {
			b.WriteString("Membership: " + clip(p, jobtext.Line) + "\n")
		}
	}
	return b.String()
}

func listClusterNodes(env *Env) Def {
	tool := mcplib.NewTool("list_cluster_nodes",
		mcplib.WithToolTitle("List the job's nodes"),
		mcplib.WithDescription("Use to see the job's nodes: each daemon's address, node rank, ranks, live and dead ranks, status (ok, or why it did not answer) and last seen. Failing nodes first."),
		schemas[ListClusterNodesParams, ListClusterNodesResult](env),
		hints(true, false, true, false),
	)
	h, call := typed(func(ctx context.Context, p ListClusterNodesParams) (ListClusterNodesResult, error) {
		if p.Limit == 0 {
			p.Limit = 100
		}
		ns, cov, err := env.Cluster.Nodes(ctx)
		if err != nil {
			return ListClusterNodesResult{}, &UserError{msg: err.Error()}
		}
		var sel []fanout.NodeStatus
		statuses := map[string]int{}
		for _, n := range ns {
			statuses[n.Status]++
			if p.Status == "" || n.Status == p.Status {
				sel = append(sel, n)
			}
		}
		if p.Status != "" && len(sel) == 0 {
			return ListClusterNodesResult{}, userErrorf("no node has status %q; the statuses now: %v", p.Status, statuses)
		}
		// Failing nodes first: they are what the caller looks for.
		var bad, good []fanout.NodeStatus
		for _, n := range sel {
			if n.Status == "ok" {
				good = append(good, n)
			} else {
				bad = append(bad, n)
			}
		}
		sel = append(bad, good...)
		res := ListClusterNodesResult{Total: len(sel), Coverage: coverageView(&cov),
			Summary: fmt.Sprintf("%d node(s): %d answered, %d did not.", len(ns), cov.Answered, len(ns)-cov.Answered)}
		end := min(len(sel), p.Offset+p.Limit)
		if p.Offset < end {
			res.Nodes = sel[p.Offset:end]
		}
		if end < len(sel) {
			res.NextOffset = &end
		}
		return res, nil
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "the job's nodes (daemon address, ranks as ranges, status, last seen), the failing ones first",
		Doc:     "Whole-job scope only (`serve --job/--peers`): the job's nodes, each daemon's address, node rank, ranks as ranges, live and dead ranks, status (`ok`, or why it did not answer), clock offset; the failing nodes first, paged."}
}
