package picture

import (
	"sort"

	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// trie is the merged stacks of some ranks: each node a frame shared by
// count of them, its children the frames called from it.
type trie struct {
	text     string
	count    int
	children map[string]*trie
	first    int // the first rank that reached it: a stable order
}

// maxTrieNodes bounds a flame's work whatever the stacks: a thousand
// distinct frames is already past reading.
const maxTrieNodes = 4096

// flameOf merges the stacks (frames as text, outermost first) of ranks
// into bars, row by row from the outermost frame; under each frame its
// callees are drawn smallest first, so the odd ones out lead.
func flameOf(title string, ranks []int, stackOf func(r int) []string) (Flame, bool) {
	root := &trie{children: map[string]*trie{}}
	nodes, with := 0, []int{}
	for _, r := range ranks {
		frames := stackOf(r)
		if len(frames) == 0 {
			continue
		}
		with = append(with, r)
		root.count++
		t := root
		for d, f := range frames {
			if d == MaxFlameRows {
				break
			}
			c := t.children[f]
			if c == nil {
				if nodes >= maxTrieNodes {
					break
				}
				nodes++
				c = &trie{text: f, children: map[string]*trie{}, first: r}
				t.children[f] = c
			}
			c.count++
			t = c
		}
	}
	if root.count == 0 {
		return Flame{}, false
	}
	fl := Flame{Title: title, Ranks: rankset.Short(rankset.Format(with)), Count: root.count}
	type at struct {
		t *trie
		x float64
	}
	level := []at{{root, 0}}
	for len(level) > 0 && len(fl.Rows) < MaxFlameRows {
		var row []Bar
		var next []at
		for _, p := range level {
			kids := make([]*trie, 0, len(p.t.children))
			most := 0
			for _, c := range p.t.children {
				kids = append(kids, c)
				most = max(most, c.count)
			}
			sort.Slice(kids, func(i, j int) bool {
				if kids[i].count != kids[j].count {
					return kids[i].count < kids[j].count
				}
				return kids[i].first < kids[j].first
			})
			x := p.x
			for _, c := range kids {
				w := float64(c.count) / float64(root.count)
				row = append(row, Bar{X: x, W: w, Text: clip(c.text, MaxText), Count: c.count, Odd: c.count < most})
				next = append(next, at{c, x})
				x += w
			}
		}
		if len(row) == 0 {
			break
		}
		fl.Rows = append(fl.Rows, row)
		level = next
	}
	return fl, true
}
