package picture

import (
	"path"
	"sort"
	"strconv"

	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// FromDiagnosis is the page of a diagnose_hang verdict. A report made by
// diagnosis.Diagnose here carries what it was drawn from (its Picture):
// the graph's edges name the collective each wait is in. One read back
// from JSON (the history's) has only its rank groups and hypotheses: its
// edges say "waits for", and the page says so.
func FromDiagnosis(rep *diagnosis.Report) Page {
	p := Page{Title: "Diagnosis", From: "the diagnose_hang verdict", State: rep.State, StateWhy: clipLine(rep.StateWhy), Summary: clipLine(rep.Summary)}
	var top *diagnosis.Hypothesis
	if len(rep.Hypotheses) > 0 && rep.Hypotheses[0].Category != diagnosis.CatHealthy {
		top = &rep.Hypotheses[0]
	}
	culprit, victim := map[int]bool{}, map[int]bool{}
	if top != nil {
		for _, r := range rankset.Known(top.Culprits) {
			culprit[r] = true
		}
		for _, r := range rankset.Known(top.Collateral) {
			victim[r] = true
		}
	}
	pic := rep.Picture()
	if pic != nil && pic.Graph != nil {
		for _, r := range pic.Graph.Collateral {
			victim[r] = true
		}
	}
	role := func(r int) string {
		switch {
		case culprit[r]:
			return RoleCulprit
		case victim[r]:
			return RoleVictim
		}
		return RoleOther
	}
	doing := map[int]string{}
	if pic != nil && pic.Doing != nil {
		doing = pic.Doing
	} else {
		// Read back from JSON: the report's own (bounded) rank groups.
		p.From = "a recorded verdict (its rank groups and hypotheses; the collectives of each wait were not recorded)"
		for _, g := range rep.Ranks {
			for _, r := range rankset.Known(g.Ranks) {
				doing[r] = g.Doing
			}
		}
	}
	nodes, of, merged := groupNodes(clipped(doing), role)
	if top != nil && top.Where != nil {
		for i := range nodes {
			if nodes[i].Role == RoleCulprit {
				nodes[i].Where = clip(path.Base(top.Where.File)+":"+strconv.Itoa(top.Where.Line)+" ("+top.Where.Function+")", MaxText)
				nodes[i].Source = clip(top.Where.Source, MaxText)
			}
		}
	}
	var es edgeSet
	switch {
	case pic != nil && pic.Graph != nil:
		for _, e := range pic.Graph.Edges {
			from, okF := of[e.From]
			to, okT := of[e.To]
			if okF && okT {
				es.add(from, to, waitLabel(pic.Model, e))
			}
		}
	case top != nil:
		if cs := rankset.Known(top.Culprits); len(cs) > 0 {
			for _, r := range rankset.Known(top.Collateral) {
				if f, ok := of[r]; ok {
					es.add(f, of[cs[0]], "waits for (from the verdict)")
				}
			}
		}
	}
	p.Graph = Graph{Nodes: nodes, Edges: es.done(len(nodes)), Merged: merged}
	switch {
	case len(nodes) == 0:
		p.Shows = append(p.Shows, "No rank was found: there is no graph, no lane and no stack to draw.")
	case len(p.Graph.Edges) == 0:
		p.Shows = append(p.Shows, "No rank waits for another: the graph is the rank groups alone, without edges ("+stateWords(rep.State)+").")
	}
	if pic != nil {
		p.Lanes, p.LaneAxis = diagnosisLanes(nodes, pic)
		if len(p.Lanes) == 0 && len(nodes) > 0 {
			p.Shows = append(p.Shows, "No collective was recorded (no comm ring row, no Flight Recorder entry): no lanes.")
		}
		p.Flames = diagnosisFlames(nodes, pic)
		if len(p.Flames) == 0 && len(nodes) > 0 {
			p.Shows = append(p.Shows, "No main-thread stack was captured: no merged stacks.")
		}
	} else {
		p.Shows = append(p.Shows, "Drawn from a recorded verdict: no lanes and no stacks (the evidence was not kept with it).")
	}
	for _, h := range rep.Hypotheses {
		head := h.Category + " (" + h.Confidence + ")"
		if h.Culprits != "" {
			head += ": culprit " + rankset.Words(h.Culprits)
		}
		if h.Where != nil {
			head += " at " + h.Where.String()
		}
		p.Evidence = append(p.Evidence, Line{Source: "verdict", Text: clipLine(head), Head: true})
		for _, e := range h.Evidence {
			p.Evidence = append(p.Evidence, Line{Source: clip(e.Source, 40), Text: clipLine(e.Text)})
		}
		if len(p.Evidence) >= MaxLines {
			p.Evidence = p.Evidence[:MaxLines]
			break
		}
	}
	p.DataQuality = lines(append(append([]string(nil), rep.DataQuality...), rep.Omitted...))
	return p
}

// clipped is each rank's line clipped: a line is a node's label.
func clipped(doing map[int]string) map[int]string {
	out := make(map[int]string, len(doing))
	for r, d := range doing {
		out[r] = clip(d, MaxText)
	}
	return out
}

func stateWords(state string) string {
	switch state {
	case diagnosis.StateHealthy, diagnosis.StateProgressing:
		return "the job moves"
	case diagnosis.StateUnknown:
		return "the state is unknown"
	}
	return "state " + state
}

// waitLabel names the collective an edge waits in: its op, its group and
// its sequence number, as the rings count them.
func waitLabel(m *diagnosis.Model, e diagnosis.Edge) string {
	name := "collective"
	if m != nil {
		if rk := m.Ranks[e.From]; rk != nil && rk.In != nil {
			name = clip(rk.In.Name, 40)
		}
	}
	if src, dst, ok := diagnosis.IsP2P(e.Group); ok {
		return name + " #" + strconv.FormatInt(e.Seq, 10) + " p2p " + strconv.Itoa(src) + "→" + strconv.Itoa(dst)
	}
	if e.Seq <= 0 {
		return name + " (seen in its stack)"
	}
	return name + " #" + strconv.FormatInt(e.Seq, 10) + " group " + rankset.ShortTo(e.Group, 40)
}

// diagnosisLanes draws, per node, one rank's last collectives from the
// comm rings (else the Flight Recorder's tails).
func diagnosisLanes(nodes []Node, pic *diagnosis.WaitPicture) ([]Lane, string) {
	byRank := map[int][]evidence.CommRow{}
	for _, row := range pic.Comm {
		byRank[row.Rank] = append(byRank[row.Rank], row)
	}
	if len(byRank) == 0 {
		if pic.FR != nil && pic.FR.Recent != nil {
			return recentLanes(nodes, pic.FR.Recent, nil)
		}
		return nil, ""
	}
	// The collective each victim node waits in: a culprit node's ghost.
	awaited := map[int]LaneOp{}
	if pic.Graph != nil {
		for _, e := range pic.Graph.Edges {
			awaited[e.To] = LaneOp{Label: waitLabel(pic.Model, e), State: OpNever}
		}
	}
	var lanes []Lane
	for _, n := range nodes {
		if len(lanes) == MaxLanes {
			break
		}
		rep, rows := -1, []evidence.CommRow(nil)
		for _, r := range n.ranks {
			if len(byRank[r]) > 0 {
				rep, rows = r, byRank[r]
				break
			}
		}
		if rep < 0 {
			continue
		}
		sort.SliceStable(rows, func(i, j int) bool { return rows[i].TimestampUS < rows[j].TimestampUS })
		rows = rows[max(0, len(rows)-MaxLaneOps):]
		l := Lane{Node: n.ID, Ranks: n.Ranks, Role: n.Role, Rank: rep}
		for _, row := range rows {
			op := LaneOp{Label: clip(row.Op, 40) + " #" + strconv.FormatInt(row.GroupSeq, 10), Start: row.TimestampUS * 1000, State: OpLeft}
			if row.DurationMS < 0 {
				op.State, op.Stuck = OpInside, n.Role != RoleCulprit
			} else {
				op.End = op.Start + int64(row.DurationMS*1e6)
			}
			l.Ops = append(l.Ops, op)
		}
		if n.Role == RoleCulprit {
			for _, r := range n.ranks {
				if g, ok := awaited[r]; ok {
					l.Ops = append(l.Ops, g)
					break
				}
			}
		}
		lanes = append(lanes, l)
	}
	return lanes, "time"
}

// diagnosisFlames merges the main-thread stacks of the culprit node and
// of the largest node.
func diagnosisFlames(nodes []Node, pic *diagnosis.WaitPicture) []Flame {
	stackOf := func(r int) []string {
		fs := pic.Main[r]
		out := make([]string, 0, len(fs))
		for i := len(fs) - 1; i >= 0; i-- {
			out = append(out, frameText(fs[i]))
		}
		return out
	}
	var out []Flame
	largest := -1
	for i, n := range nodes {
		if n.Role == RoleCulprit && len(out) == 0 {
			if f, ok := flameOf("Culprit: "+rankset.Words(n.Ranks), n.ranks, stackOf); ok {
				out = append(out, f)
			}
			continue
		}
		if largest < 0 || n.Count > nodes[largest].Count {
			largest = i
		}
	}
	if largest >= 0 {
		n := nodes[largest]
		if f, ok := flameOf("Largest group: "+rankset.Words(n.Ranks), n.ranks, stackOf); ok {
			out = append(out, f)
		}
	}
	return out
}

func frameText(f stacks.Frame) string {
	return f.Function + " (" + path.Base(f.File) + ":" + strconv.Itoa(f.Line) + ")"
}
