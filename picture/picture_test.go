package picture

import (
	"bytes"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// artifactDir is where pages and screenshots are kept for a person to
// look at: $PROBING_TEST_ARTIFACTS/picture, else the test's temp dir.
func artifactDir(t testing.TB) string {
	if d := os.Getenv("PROBING_TEST_ARTIFACTS"); d != "" {
		dir := filepath.Join(d, "picture")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

var (
	textRe  = regexp.MustCompile(`>([^<]*)<`)
	titleRe = regexp.MustCompile(`<title>([^<]*)</title>`)
)

// TestPages renders every case and checks the page as text: one
// document, no network load possible, the culprit node highlighted when
// there is one, the case's words said, job text escaped and clipped.
func TestPages(t *testing.T) {
	for _, c := range cases() {
		t.Run(c.name, func(t *testing.T) {
			p := c.page(t)
			page, err := HTML(p, Options{})
			if err != nil {
				t.Fatal(err)
			}
			s := string(page)
			if !strings.HasPrefix(s, "<!DOCTYPE html>") || !strings.Contains(s, "</html>") {
				t.Fatalf("not one HTML document:\n%.300s", s)
			}
			if !strings.Contains(html.UnescapeString(s), `default-src 'none'`) {
				t.Error("no Content-Security-Policy forbidding loads")
			}
			for _, bad := range []string{"http://", "https://", "<link", "<img", "<iframe", "<object", "<embed"} {
				if i := strings.Index(s, bad); i >= 0 && !strings.Contains(s[max(0, i-60):i], "xmlns=") {
					t.Errorf("page holds %q: %s", bad, s[max(0, i-60):min(len(s), i+60)])
				}
			}
			if strings.Count(s, "<script") != 1 {
				t.Errorf("%d script elements, want the page's one", strings.Count(s, "<script"))
			}
			hasCulprit := strings.Contains(s, `class="node culprit"`)
			if hasCulprit != c.culprit {
				t.Errorf("culprit node drawn: %v, want %v", hasCulprit, c.culprit)
			}
			for _, w := range c.says {
				if !strings.Contains(s, w) {
					t.Errorf("page does not say %q", w)
				}
			}
			// Every text node and title is bounded: job text is clipped.
			for _, re := range []*regexp.Regexp{textRe, titleRe} {
				for _, m := range re.FindAllStringSubmatch(s, -1) {
					if n := utf8.RuneCountInString(m[1]); n > 4*MaxTitle && !strings.Contains(m[1], "{") {
						t.Errorf("a text of %d characters: %.80s…", n, m[1])
					}
				}
			}
			if len(page) > 1<<20 {
				t.Errorf("page is %d bytes", len(page))
			}
			if c.culprit && len(p.Graph.Edges) == 0 && !strings.HasPrefix(c.name, "capture_") {
				t.Errorf("no edge drawn to the culprit")
			}
			if err := os.WriteFile(filepath.Join(artifactDir(t), c.name+".html"), page, 0o644); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHostileEscaped: markup in the job's names never reaches the page as
// markup, and the 20 KB names are clipped.
func TestHostileEscaped(t *testing.T) {
	p := diagnosed(stalledJob(8, 5, hostile, hostile))
	html, err := HTML(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(html, []byte(`<script>alert`)) || bytes.Contains(html, []byte("<img")) {
		t.Fatal("job text reached the page as markup")
	}
	if bytes.Contains(html, []byte(strings.Repeat("A", MaxTitle+1))) {
		t.Fatal("a 20 KB name is not clipped")
	}
	if !bytes.Contains(html, []byte("&lt;script&gt;")) {
		t.Fatal("the hostile name is not shown escaped")
	}
}

// TestCycleDrawn: waits that close a cycle between rank groups are marked
// and drawn as arcs back.
func TestCycleDrawn(t *testing.T) {
	var es edgeSet
	es.add(0, 1, "a #1")
	es.add(1, 2, "b #2")
	es.add(2, 0, "c #3")
	es.add(3, 0, "a #1")
	g := Graph{Nodes: []Node{{ID: 0, Ranks: "0"}, {ID: 1, Ranks: "1"}, {ID: 2, Ranks: "2"}, {ID: 3, Ranks: "3"}}}
	g.Edges = es.done(4)
	cycle := 0
	for _, e := range g.Edges {
		if e.Cycle {
			cycle++
		}
		if e.From == 3 && e.Cycle {
			t.Error("the edge into the cycle is not part of it")
		}
	}
	if cycle != 3 {
		t.Fatalf("%d cycle edges, want 3: %+v", cycle, g.Edges)
	}
	html, err := HTML(Page{Title: "t", State: "stalled", Graph: g}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(html), `class="edge cycle"`); n != 3 {
		t.Fatalf("%d cycle edges drawn, want 3", n)
	}
}

// TestGrouped4096: 4096 ranks are a few nodes and lanes, never one per
// rank.
func TestGrouped4096(t *testing.T) {
	p := diagnosed(stalledJob(4096, 1234, "all_reduce", "load_batch"))
	if len(p.Graph.Nodes) > 3 || len(p.Lanes) > 3 {
		t.Fatalf("%d nodes, %d lanes for 4096 ranks", len(p.Graph.Nodes), len(p.Lanes))
	}
	if p.Graph.Nodes[0].Role != RoleCulprit || p.Graph.Nodes[0].Ranks != "1234" || p.Graph.Nodes[0].Where == "" {
		t.Fatalf("first node %+v, want culprit 1234 with its line", p.Graph.Nodes[0])
	}
	var stuck, never bool
	for _, l := range p.Lanes {
		for _, o := range l.Ops {
			stuck = stuck || o.Stuck
			never = never || o.State == OpNever
		}
	}
	if !stuck || !never {
		t.Fatalf("lanes mark stuck %v, never entered %v: %+v", stuck, never, p.Lanes)
	}
	if len(p.Flames) != 2 || p.Flames[0].Count != 1 || p.Flames[1].Count != 4095 {
		t.Fatalf("flames: %+v", p.Flames)
	}
	if last := p.Flames[0].Rows[len(p.Flames[0].Rows)-1]; len(last) != 1 || !strings.HasPrefix(last[0].Text, "load_batch") {
		t.Errorf("the culprit's innermost frame: %+v", last)
	}
}

// TestOddOnesOutFirst: under a frame, the callee fewer ranks share is
// drawn first and marked.
func TestOddOnesOutFirst(t *testing.T) {
	stack := map[int][]string{0: {"main", "step", "all_reduce"}, 1: {"main", "step", "all_reduce"}, 2: {"main", "step", "load"}}
	f, ok := flameOf("t", []int{0, 1, 2}, func(r int) []string { return stack[r] })
	if !ok || len(f.Rows) != 3 {
		t.Fatalf("%+v", f)
	}
	row := f.Rows[2]
	if len(row) != 2 || row[0].Text != "load" || !row[0].Odd || row[1].Odd || row[1].X <= row[0].X || row[0].Count != 1 || row[1].Count != 2 {
		t.Errorf("innermost row %+v, want load (odd, first) then all_reduce", row)
	}
}

// TestRecordedRefusals: what the history holds that is no verdict gets
// an error naming it, never a page that pretends.
func TestRecordedRefusals(t *testing.T) {
	for _, c := range []struct{ kind, body, want string }{
		{"watch", "", "kept no report"},
		{"watch", "[1,2]", "not a verdict"},
		{"flight_recorder", "{", "not an analysis"},
		{"<b>other</b>", "{}", "has no picture"},
		{"watch", "\"" + strings.Repeat("x", maxRecordedBytes) + "\"", "over the"},
	} {
		if _, err := FromRecorded(c.kind, []byte(c.body)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %.20q: %v, want %q", c.kind, c.body, err, c.want)
		}
	}
}

// TestNodesBounded: however many distinct things 4096 ranks do, culprits
// included, the graph has at most MaxNodes nodes and every rank is in one.
func TestNodesBounded(t *testing.T) {
	doing := map[int]string{}
	for r := 0; r < 4096; r++ {
		doing[r] = "waits in group " + strconv.Itoa(r)
	}
	nodes, of, merged := groupNodes(doing, func(r int) string {
		switch r % 3 {
		case 0:
			return RoleCulprit
		case 1:
			return RoleVictim
		}
		return RoleOther
	})
	if len(nodes) > MaxNodes || len(of) != 4096 || merged == 0 {
		t.Fatalf("%d nodes, %d ranks placed, %d merged", len(nodes), len(of), merged)
	}
	if nodes[0].Role != RoleCulprit {
		t.Errorf("first node %+v, want a culprit", nodes[0])
	}
}

// TestIndex: the index lists its entries, escapes and clips their text
// and says when a section is empty.
func TestIndex(t *testing.T) {
	var b bytes.Buffer
	err := RenderIndex(&b, []Section{
		{Title: "mine", Entries: []Entry{{Href: "call-1.html", Kind: "diagnose_hang", State: "stalled", Summary: hostile}}},
		{Title: "history", Empty: "nothing kept"},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{`href="call-1.html"`, "sev-bad", "&lt;script&gt;", "nothing kept", `default-src &#39;none&#39;`} {
		if !strings.Contains(s, want) {
			t.Errorf("index lacks %q", want)
		}
	}
	if strings.Contains(s, "<script") || strings.Contains(s, strings.Repeat("A", 2*MaxText+1)) {
		t.Error("the index holds a script or an unclipped summary")
	}
}
