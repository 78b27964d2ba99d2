package picture

import (
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// FromFlightRecorder is the page of a Flight Recorder analysis (probing-
// mcp analyze, analyze_flight_recorder): the waits read across the
// groups (Across) are the graph's edges, each dumped rank's last ops
// (Report.Recent) the lanes, the culprit's recorded stack the flame. A
// report read back from JSON has neither Recent nor the waits: the page
// says what it lacks.
func FromFlightRecorder(rep *fr.Report) Page {
	v := rep.View(fr.ViewOptions{Full: true, Limit: 16})
	p := Page{Title: "Flight Recorder analysis", From: "Flight Recorder dumps of ranks " + rankset.Short(rep.Ranks.DumpedText),
		State: rep.Verdict, Summary: clipLine(rep.Summary)}
	if rep.Ranks.MissingText != "" {
		p.Shows = append(p.Shows, clip("No dump from ranks "+rep.Ranks.MissingText+": they are drawn from what their peers recorded (whom they were waited for by), with no lane and no stack.", 2*MaxText))
	}
	culprit, waiting := map[int]bool{}, map[int]string{}
	waits := rep.Across.Waits()
	for _, w := range waits {
		label := clip(opName(w.Op), 40) + " #" + strconv.FormatInt(w.Seq, 10) + " on pg " + clip(w.PGName, 40)
		for _, r := range w.Waiting {
			waiting[r] = label
		}
	}
	if rep.Across != nil {
		for _, r := range rep.Across.Culprits {
			culprit[r] = true
		}
	} else if len(rep.ProcessGroups) > 0 && rep.Verdict != fr.VerdictOK {
		for _, r := range rep.ProcessGroups[0].CulpritRanks {
			culprit[r] = true
		}
	}
	missing := map[int]bool{}
	for _, r := range rep.Ranks.MissingDump {
		missing[r] = true
	}
	doing := map[int]string{}
	world := rep.Ranks.Expected
	for _, r := range rep.Ranks.Dumped {
		world = max(world, r+1)
	}
	top := PGTop(rep)
	for r := 0; r < world; r++ {
		switch {
		case waiting[r] != "":
			doing[r] = "waits in " + waiting[r]
		case missing[r]:
			doing[r] = "left no dump"
		case culprit[r] && top != nil && slices.Contains(top.MissingRanks, r):
			doing[r] = clip("never entered #"+strconv.FormatInt(top.CollectiveSeqID, 10)+" "+opName(top.ProfilingName)+" on pg "+top.PGName, MaxText)
		case culprit[r] && top != nil:
			doing[r] = clip(strings.ToLower(top.Finding.Kind)+" at #"+strconv.FormatInt(top.CollectiveSeqID, 10)+" on pg "+top.PGName, MaxText)
		default:
			doing[r] = "waits for no one" + lastOp(rep.Recent[r])
		}
	}
	role := func(r int) string {
		switch {
		case culprit[r]:
			return RoleCulprit
		case waiting[r] != "":
			return RoleVictim
		}
		return RoleOther
	}
	nodes, of, merged := groupNodes(doing, role)
	var es edgeSet
	for _, w := range waits {
		label := clip(opName(w.Op), 40) + " #" + strconv.FormatInt(w.Seq, 10) + " pg " + clip(w.PGName, 40)
		// Per node pair, not per rank pair: a million-member group's
		// waits are a few edges.
		from := map[int]int{}
		for _, r := range w.Waiting {
			from[of[r]]++
		}
		to := map[int]bool{}
		for _, r := range w.For {
			if n, ok := of[r]; ok {
				to[n] = true
			}
		}
		for _, f := range sortedKeys(from) {
			for _, t := range sortedKeys(to) {
				for i := 0; i < from[f]; i++ {
					es.add(f, t, label)
				}
			}
		}
	}
	if rep.Across == nil && top != nil && len(top.CulpritRanks) > 0 {
		// No rank waits (a mismatch with every member inside, a healthy
		// job): the group's verdict links its members to its culprits.
		label := "#" + strconv.FormatInt(top.CollectiveSeqID, 10) + " pg " + clip(top.PGName, 40) + ": " + strings.ToLower(top.Finding.Kind)
		cs := map[int]bool{}
		for _, r := range top.CulpritRanks {
			cs[of[r]] = true
		}
		for _, r := range top.Members {
			if f, ok := of[r]; ok && !culprit[r] {
				for _, t := range sortedKeys(cs) {
					es.add(f, t, label)
				}
			}
		}
	}
	if top != nil && len(top.CulpritFrames) > 0 {
		f := top.CulpritFrames[0]
		for i := range nodes {
			if nodes[i].Role == RoleCulprit {
				nodes[i].Where = clip(path.Base(f.Filename)+":"+strconv.FormatInt(f.Line, 10)+" ("+f.Name+")", MaxText)
			}
		}
	}
	p.Graph = Graph{Nodes: nodes, Edges: es.done(len(nodes)), Merged: merged}
	if len(p.Graph.Edges) == 0 {
		p.Shows = append(p.Shows, "No rank waits for another in these dumps: the graph is the rank groups alone.")
	}
	if rep.Recent != nil {
		p.Lanes, p.LaneAxis = recentLanes(nodes, rep.Recent, top)
	} else {
		p.Shows = append(p.Shows, "No lanes: the analysis kept no per-rank tails (a report read back from JSON, or more dumps than a picture draws).")
	}
	if top != nil {
		if fl, ok := framesFlame("Culprit's recorded stack (pg "+clip(top.PGName, 40)+")", top.CulpritFrames, top.CulpritRanks); ok {
			p.Flames = append(p.Flames, fl)
		}
		if fl, ok := framesFlame("Its peers' recorded stack", top.PeerFrames, nil); ok {
			p.Flames = append(p.Flames, fl)
		}
	}
	if len(p.Flames) == 0 {
		p.Shows = append(p.Shows, "The dumps recorded no stack for the verdict's collective: no merged stacks.")
	}
	viewLines(&p, v)
	return p
}

// PGTop is the report's first (worst) group, nil when none has a
// problem.
func PGTop(rep *fr.Report) *fr.PGReport {
	if len(rep.ProcessGroups) == 0 || rep.ProcessGroups[0].Verdict == fr.VerdictOK {
		return nil
	}
	return &rep.ProcessGroups[0]
}

// opName is a profiling name without its backend ("nccl:all_reduce").
func opName(s string) string {
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// lastOp says a rank's last recorded op without its sequence number, so
// that ranks a collective apart share a node.
func lastOp(ops []fr.RecentOp) string {
	if len(ops) == 0 {
		return ""
	}
	o := ops[len(ops)-1]
	state := "finished"
	if !o.Done {
		state = "not finished"
	}
	return " " + clip("(last recorded: "+opName(o.Op)+" on pg "+o.PGName+", "+state+")", MaxText)
}

func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// recentLanes draws, per node, one dumped rank's last ops; a culprit that
// never entered the verdict's collective gets it as a ghost.
func recentLanes(nodes []Node, recent map[int][]fr.RecentOp, top *fr.PGReport) ([]Lane, string) {
	var lanes []Lane
	timed := false
	for _, n := range nodes {
		if len(lanes) == MaxLanes {
			break
		}
		rep := -1
		for _, r := range n.ranks {
			if len(recent[r]) > 0 {
				rep = r
				break
			}
		}
		if rep < 0 {
			continue
		}
		l := Lane{Node: n.ID, Ranks: n.Ranks, Role: n.Role, Rank: rep}
		ops := recent[rep]
		ops = ops[max(0, len(ops)-MaxLaneOps):]
		for i, o := range ops {
			op := LaneOp{Label: clip(opName(o.Op), 40) + " #" + strconv.FormatInt(o.Seq, 10) + " pg " + clip(o.PGName, 24), Start: o.CreatedNs, State: OpLeft}
			switch {
			case !o.Done:
				op.State, op.Stuck = OpInside, n.Role != RoleCulprit
			case o.CompletedNs > 0:
				op.End = max(o.CompletedNs, o.CreatedNs)
			case i+1 < len(ops):
				// No completion time (timing off): left by the next one.
				op.End = max(ops[i+1].CreatedNs, o.CreatedNs)
			default:
				op.End = o.CreatedNs
			}
			timed = timed || o.CreatedNs > 0
			l.Ops = append(l.Ops, op)
		}
		if n.Role == RoleCulprit && top != nil && slices.Contains(top.MissingRanks, rep) {
			l.Ops = append(l.Ops, LaneOp{Label: clip(opName(top.ProfilingName), 40) + " #" + strconv.FormatInt(top.CollectiveSeqID, 10) + " pg " + clip(top.PGName, 24), State: OpNever})
		}
		lanes = append(lanes, l)
	}
	if !timed {
		return lanes, "order"
	}
	return lanes, "time"
}

// framesFlame is one recorded stack (innermost first) as a flame.
func framesFlame(title string, frames []fr.Frame, ranks []int) (Flame, bool) {
	if len(frames) == 0 {
		return Flame{}, false
	}
	texts := make([]string, 0, len(frames))
	for i := len(frames) - 1; i >= 0; i-- {
		f := frames[i]
		texts = append(texts, f.Name+" ("+path.Base(f.Filename)+":"+strconv.FormatInt(f.Line, 10)+")")
	}
	if len(ranks) == 0 {
		ranks = []int{0}
	}
	fl, ok := flameOf(title, ranks[:1], func(int) []string { return texts })
	if ok {
		fl.Ranks = rankset.Short(rankset.Format(ranks))
	}
	return fl, ok
}

// viewLines adds the evidence and data-quality lines of the analysis as
// its text answer (fr.View) has them.
func viewLines(p *Page, v fr.View) {
	if v.Across != nil {
		p.Evidence = append(p.Evidence, Line{Source: "across groups", Text: clipLine(v.Across.Line), Head: true})
	}
	for _, g := range v.ProcessGroups {
		if len(p.Evidence) >= MaxLines {
			break
		}
		head := "pg " + clip(g.PGName, 40) + " (ranks " + g.Ranks + "): " + g.Verdict
		if g.Kind != "" {
			head += " (" + g.Kind + ", " + g.Confidence + " confidence)"
		}
		if g.CulpritRanks != "" {
			head += "; culprits " + g.CulpritRanks
		}
		p.Evidence = append(p.Evidence, Line{Source: "flight_recorder", Text: clipLine(head), Head: true})
		for _, l := range append(append([]string{g.Finding}, g.Lagging...), g.Evidence...) {
			if l != "" {
				p.Evidence = append(p.Evidence, Line{Source: "flight_recorder", Text: clipLine(l)})
			}
		}
	}
	if len(p.Evidence) > MaxLines {
		p.Evidence = p.Evidence[:MaxLines]
	}
	dq := append(append([]string(nil), v.DataQuality.FileProblems...), v.DataQuality.Warnings...)
	if v.FRTrace.Aborted != "" {
		dq = append(dq, "fr_trace (torch's analyzer) would stop on these dumps: "+v.FRTrace.Aborted)
	}
	p.DataQuality = lines(dq)
}
