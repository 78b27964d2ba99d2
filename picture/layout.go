package picture

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Geometry of the drawing, in SVG pixels.
const (
	nodeW, nodeH = 300, 96
	colGap       = 150
	rowGap       = 34
	margin       = 20
	laneW        = 1200
	laneLabelW   = 280
	laneH        = 30
	neverW       = 110 // the "never entered" zone at a lane's right end
	flameW       = 1200
	flameRowH    = 18
	charW        = 7 // an average glyph of the page's 12px font
)

// svgText is one line of text in a drawing.
type svgText struct {
	X, Y  int
	Text  string
	Class string
}

type svgNode struct {
	ID         int
	X, Y, W, H int
	Role       string
	Lines      []svgText
	Title      string
}

type svgEdge struct {
	From, To int
	D        string
	LX, LY   int
	Label    string
	Title    string
	Cycle    bool
}

type svgGraph struct {
	W, H  int
	Nodes []svgNode
	Edges []svgEdge
}

// fit cuts s to the characters that fit in px pixels.
func fit(s string, px int) string {
	n := max(px/charW, 2)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// layoutGraph places the nodes left to right in layers: each node one
// column right of the nodes that wait for it (the longest path from a
// rank nobody waits for), so the culprits stand at the right end; the
// edges that close a cycle are drawn as arcs below. Nodes in no wait are
// a last column of their own. Deterministic: layers from the node order.
func layoutGraph(g Graph) svgGraph {
	n := len(g.Nodes)
	out := make([][]int, n)
	in := make([]int, n)
	linked := make([]bool, n)
	// Back edges (those that close a cycle in a depth-first walk from
	// the nodes in order) are left out of the layering.
	state := make([]int, n)
	back := map[[2]int]bool{}
	adj := make([][]int, n)
	for _, e := range g.Edges {
		adj[e.From] = append(adj[e.From], e.To)
		linked[e.From], linked[e.To] = true, true
	}
	var dfs func(v int)
	dfs = func(v int) {
		state[v] = 1
		for _, w := range adj[v] {
			switch state[w] {
			case 0:
				dfs(w)
			case 1:
				back[[2]int{v, w}] = true
			}
		}
		state[v] = 2
	}
	for v := 0; v < n; v++ {
		if state[v] == 0 {
			dfs(v)
		}
	}
	for _, e := range g.Edges {
		if !back[[2]int{e.From, e.To}] {
			out[e.From] = append(out[e.From], e.To)
			in[e.To]++
		}
	}
	layer := make([]int, n)
	queue := []int{}
	for v := 0; v < n; v++ {
		if in[v] == 0 {
			queue = append(queue, v)
		}
	}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range out[v] {
			layer[w] = max(layer[w], layer[v]+1)
			if in[w]--; in[w] == 0 {
				queue = append(queue, w)
			}
		}
	}
	maxLayer, anyLinked := 0, false
	for v := 0; v < n; v++ {
		if linked[v] {
			maxLayer, anyLinked = max(maxLayer, layer[v]), true
		}
	}
	if anyLinked {
		for v := 0; v < n; v++ {
			if !linked[v] {
				layer[v] = maxLayer + 1
			}
		}
	}
	rows := map[int]int{}
	sg := svgGraph{}
	pos := make([][2]int, n)
	for v, nd := range g.Nodes {
		x := margin + layer[v]*(nodeW+colGap)
		y := margin + rows[layer[v]]*(nodeH+rowGap)
		rows[layer[v]]++
		pos[v] = [2]int{x, y}
		sg.W, sg.H = max(sg.W, x+nodeW+margin), max(sg.H, y+nodeH+margin)
		head := "rank " + nd.Ranks
		if nd.Count != 1 {
			head = "ranks " + nd.Ranks + " (" + strconv.Itoa(nd.Count) + " ranks)"
		}
		lines := []svgText{{X: x + 10, Y: y + 18, Text: fit(head, nodeW-20), Class: "nr"}}
		doing := []rune(nd.Doing)
		per := (nodeW - 20) / charW
		for i := 0; i < 2 && len(doing) > 0; i++ {
			cut := min(len(doing), per)
			if i == 1 && len(doing) > per {
				cut = per - 1
			}
			if i == 0 && cut < len(doing) {
				// Break the first line at a space, not inside a word.
				for j := cut; j > per/2; j-- {
					if doing[j] == ' ' {
						cut = j + 1
						break
					}
				}
			}
			t := string(doing[:cut])
			doing = doing[cut:]
			if i == 1 && len(doing) > 0 {
				t += "…"
			}
			lines = append(lines, svgText{X: x + 10, Y: y + 36 + 15*i, Text: t, Class: "nd"})
		}
		if nd.Where != "" {
			lines = append(lines, svgText{X: x + 10, Y: y + nodeH - 26, Text: fit("▶ "+nd.Where, nodeW-20), Class: "nw"})
			if nd.Source != "" {
				lines = append(lines, svgText{X: x + 10, Y: y + nodeH - 10, Text: fit("  "+nd.Source, nodeW-20), Class: "nw"})
			}
		}
		title := nd.Doing
		if nd.Where != "" {
			title += "\nat " + nd.Where
			if nd.Source != "" {
				title += "\n" + nd.Source
			}
		}
		sg.Nodes = append(sg.Nodes, svgNode{ID: nd.ID, X: x, Y: y, W: nodeW, H: nodeH, Role: nd.Role, Lines: lines,
			Title: clip("ranks "+nd.Ranks+": "+title, MaxTitle)})
	}
	for _, e := range g.Edges {
		a, b := pos[e.From], pos[e.To]
		label := e.Label
		if e.More > 0 {
			label += fmt.Sprintf(" +%d more", e.More)
		}
		se := svgEdge{From: e.From, To: e.To, Cycle: e.Cycle, Label: fit(label, colGap+nodeW/2),
			Title: clip(fmt.Sprintf("%s: %d wait(s) in %s", g.Nodes[e.From].Ranks+" wait for "+g.Nodes[e.To].Ranks, e.Count, label), MaxTitle)}
		if b[0] > a[0] {
			x1, y1, x2, y2 := a[0]+nodeW, a[1]+nodeH/2, b[0], b[1]+nodeH/2
			mx := (x1 + x2) / 2
			se.D = fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, mx, y1, mx, y2, x2-6, y2)
			se.LX, se.LY = x1+8, y1-6
		} else {
			// Back to an earlier (or the same) column: an arc below both,
			// as a cycle is drawn.
			x1, y1, x2, y2 := a[0]+nodeW/2, a[1]+nodeH, b[0]+nodeW/2+14, b[1]+nodeH+6
			low := max(y1, y2) + 36
			se.D = fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, x1, low, x2, low, x2, y2)
			se.LX, se.LY = (x1+x2)/2-40, low-4
			sg.H = max(sg.H, low+margin)
		}
		sg.Edges = append(sg.Edges, se)
	}
	return sg
}

type svgOp struct {
	X, Y, W, H int
	State      string
	Stuck      bool
	Text       svgText
	Title      string
}

type svgLane struct {
	Y     int
	Role  string
	Node  int
	Label svgText
	Title string
	Ops   []svgOp
}

type svgLanes struct {
	W, H  int
	Lanes []svgLane
	Ticks []svgText
	Axis  string
	// NeverX is where the "never entered" zone begins.
	NeverX int
}

// layoutLanes puts every lane's ops on one axis: time (Unix ns, the
// ends of ops still inside drawn to the latest time seen) or, without
// times, the order of the ops.
func layoutLanes(ls []Lane, axis string) svgLanes {
	x0, x1 := laneLabelW, laneW-neverW-margin
	sl := svgLanes{W: laneW, Axis: axis, NeverX: x1 + 10}
	var t0, t1 int64
	for _, l := range ls {
		for _, o := range l.Ops {
			if o.State == OpNever || o.Start <= 0 {
				continue
			}
			if t0 == 0 || o.Start < t0 {
				t0 = o.Start
			}
			t1 = max(t1, o.Start, o.End)
		}
	}
	timed := axis == "time" && t1 > t0
	last := t1
	if timed {
		t1 += (t1 - t0) / 8 // room for the ops still inside
	}
	xOf := func(t int64) int { return x0 + int(float64(t-t0)/float64(t1-t0)*float64(x1-x0)) }
	slot := (x1 - x0) / (MaxLaneOps + 1)
	for i, l := range ls {
		y := 30 + i*laneH
		lane := svgLane{Y: y, Role: l.Role, Node: l.Node,
			Label: svgText{X: 8, Y: y + 19, Text: fit(laneName(l), laneLabelW-16), Class: "ll"},
			Title: clip("ranks "+l.Ranks+": the collectives of rank "+strconv.Itoa(l.Rank), MaxTitle)}
		k := 0
		for _, o := range l.Ops {
			var x, w int
			switch {
			case o.State == OpNever:
				x, w = sl.NeverX, neverW-10
			case timed && o.Start > 0:
				x = xOf(o.Start)
				end := o.End
				if o.State == OpInside || end <= 0 {
					end = t1
				}
				w = max(xOf(end)-x, 4)
			default:
				x, w = x0+k*slot, slot-6
				k++
			}
			op := svgOp{X: x, Y: y + 4, W: w, H: laneH - 8, State: o.State, Stuck: o.Stuck,
				Title: clip(o.Label+": "+opWords(o), MaxTitle)}
			if w > 3*charW {
				op.Text = svgText{X: x + 3, Y: y + 19, Text: fit(o.Label, w-6), Class: "lo"}
			}
			lane.Ops = append(lane.Ops, op)
		}
		sl.Lanes = append(sl.Lanes, lane)
	}
	sl.H = 40 + len(ls)*laneH
	if timed {
		for i := 0; i < 4; i++ {
			t := t0 + (last-t0)*int64(i)/4
			sl.Ticks = append(sl.Ticks, svgText{X: xOf(t), Y: 16, Text: "−" + dur(time.Duration(last-t)), Class: "tk"})
		}
		sl.Ticks = append(sl.Ticks, svgText{X: xOf(last), Y: 16, Text: "last event", Class: "tk end"})
	} else {
		sl.Ticks = append(sl.Ticks, svgText{X: x0, Y: 16, Text: "oldest → newest (no times recorded: in order)", Class: "tk"})
	}
	sl.Ticks = append(sl.Ticks, svgText{X: sl.NeverX + 4, Y: 16, Text: "never entered", Class: "tk"})
	return sl
}

func opWords(o LaneOp) string {
	switch o.State {
	case OpInside:
		if o.Stuck {
			return "entered, still inside: stuck here"
		}
		return "entered, still inside"
	case OpNever:
		return "its peers wait in it; these ranks never entered it"
	}
	if o.End > o.Start && o.Start > 0 {
		return "entered and left (" + dur(time.Duration(o.End-o.Start)) + ")"
	}
	return "entered and left"
}

func dur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.String()
}

type svgBar struct {
	X, Y, W, H int
	Odd        bool
	Text       svgText
	Title      string
}

type svgFlame struct {
	Title string
	W, H  int
	Bars  []svgBar
}

func layoutFlame(f Flame) svgFlame {
	sf := svgFlame{Title: clip(f.Title+" ("+strconv.Itoa(f.Count)+" with a stack)", MaxText), W: flameW, H: len(f.Rows)*flameRowH + 4}
	for d, row := range f.Rows {
		y := d * flameRowH
		for _, b := range row {
			x, w := int(b.X*flameW), max(int(b.W*flameW)-1, 1)
			bar := svgBar{X: x, Y: y, W: w, H: flameRowH - 2, Odd: b.Odd,
				Title: clip(b.Text+": "+strconv.Itoa(b.Count)+" of "+strconv.Itoa(f.Count)+" ranks", MaxTitle)}
			if w > 3*charW {
				bar.Text = svgText{X: x + 3, Y: y + 12, Text: fit(b.Text, w-6), Class: "ft"}
			}
			sf.Bars = append(sf.Bars, bar)
		}
	}
	return sf
}

// laneName names a lane's ranks and the one drawn.
func laneName(l Lane) string {
	if l.Ranks == strconv.Itoa(l.Rank) {
		return "rank " + l.Ranks
	}
	return "ranks " + l.Ranks + " (rank " + strconv.Itoa(l.Rank) + " shown)"
}
