package diagnosis

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// A rank's claimed place, as one part of a report says it: "none"
// (outside any collective), or an op with its numbering.
type claim struct {
	rank int
	what string // "none", or "op@group#seq (numbering)"
	part string
}

var (
	claimNone = regexp.MustCompile(`\b(ranks?) ([0-9][0-9,\-]*) (?:is|are) (?:not in any collective|outside any collective|in no collective)( the rings record)?`)
	claimOp   = regexp.MustCompile(`\b(ranks?) ([0-9][0-9,\-]*) (?:is|are|waits?) in ([A-Za-z_⟦⟧]+) #(\d+) on group (\S+) \((rings' count|Flight Recorder's seq)\)`)
	// The recorder's own unlabelled form ("ranks 0-1,3 are in #20
	// all_reduce"): a claim whose numbering no one can tell.
	claimBare = regexp.MustCompile(`\b(ranks?) ([0-9][0-9,\-]*) (?:is|are) in #(\d+) (\S+)`)
	doingOp   = regexp.MustCompile(`^in ([A-Za-z_⟦⟧]+) #(\d+) on group (\S+) \((rings' count|Flight Recorder's seq)\)`)
	doingBoth = regexp.MustCompile(`^in ([A-Za-z_⟦⟧]+) on group (\S+) \(#(\d+) by the Flight Recorder's seq, #(\d+) by the rings' count\)`)
	seqRef    = regexp.MustCompile(`#\d+`)
)

func ranksOf(set string) []int {
	rs, err := rankset.Parse(set)
	if err != nil {
		return nil
	}
	return rs
}

// claims extracts every rank's claimed place from every part of a report:
// its rank groups, its per-rank lines, its hypotheses' evidence and its
// summary.
func claims(rep Report) []claim {
	var out []claim
	add := func(set, what, part string) {
		for _, r := range ranksOf(set) {
			out = append(out, claim{r, what, part})
		}
	}
	text := func(s, part string) {
		for _, m := range claimNone.FindAllStringSubmatch(s, -1) {
			if m[3] == "" { // "in no collective the rings record" is a narrower claim
				add(m[2], "none", part)
			}
		}
		for _, m := range claimOp.FindAllStringSubmatch(s, -1) {
			add(m[2], fmt.Sprintf("%s@%s#%s (%s)", m[3], m[5], m[4], m[6]), part)
		}
		for _, m := range claimBare.FindAllStringSubmatch(s, -1) {
			add(m[2], "#"+m[3]+" unlabelled", part)
		}
	}
	doing := func(set, d, part string) {
		switch {
		case strings.HasPrefix(d, "outside any collective"):
			add(set, "none", part)
		case doingBoth.MatchString(d):
			m := doingBoth.FindStringSubmatch(d)
			add(set, fmt.Sprintf("%s@%s#%s (Flight Recorder's seq)", m[1], m[2], m[3]), part)
			add(set, fmt.Sprintf("%s@%s#%s (rings' count)", m[1], m[2], m[4]), part)
		case doingOp.MatchString(d):
			m := doingOp.FindStringSubmatch(d)
			add(set, fmt.Sprintf("%s@%s#%s (%s)", m[1], m[3], m[2], m[4]), part)
		}
	}
	text(rep.Summary, "summary")
	for i, h := range rep.Hypotheses {
		for _, e := range h.Evidence {
			text(e.Text, fmt.Sprintf("hypothesis %d", i+1))
		}
	}
	for _, g := range rep.Ranks {
		doing(g.Ranks, g.Doing, "ranks")
	}
	for r, d := range rep.doing {
		doing(fmt.Sprint(r), d, "per-rank listing")
	}
	return out
}

// disagreements are the ranks two parts of a report place differently:
// in no collective and in one, or in two under one numbering; and every
// sequence number whose numbering the line does not say.
func disagreements(rep Report) []string {
	by := map[int][]claim{}
	for _, c := range claims(rep) {
		by[c.rank] = append(by[c.rank], c)
	}
	var out []string
	for r, cs := range by {
		for i, a := range cs {
			for _, b := range cs[i+1:] {
				if a.what == b.what {
					continue
				}
				an, bn := numbering(a.what), numbering(b.what)
				if a.what == "none" || b.what == "none" || an == bn || an == "unlabelled" || bn == "unlabelled" {
					out = append(out, fmt.Sprintf("rank %d: %s says %q, %s says %q", r, a.part, a.what, b.part, b.what))
				}
			}
		}
	}
	for _, line := range strings.Split(rep.Text(), "\n") {
		if seqRef.MatchString(line) && !strings.Contains(line, ringsCount) && !strings.Contains(line, frSeq) && !strings.Contains(line, "(its seq)") &&
			!strings.Contains(line, "the rings count #") {
			out = append(out, "a sequence number without its numbering: "+line)
		}
	}
	// A dead job's verdict asks only what the dead left behind.
	for _, q := range rep.DataQuality {
		if !strings.HasPrefix(q, "post-mortem: every rank's process is gone") {
			continue
		}
		for i, h := range rep.Hypotheses {
			for _, w := range liveOnly {
				if strings.Contains(h.Confirm, w) {
					out = append(out, fmt.Sprintf("every process is gone, yet hypothesis %d's confirm asks %s: %s", i+1, w, h.Confirm))
				}
			}
		}
	}
	// A cap announced in data quality binds the verdict it speaks of.
	if len(rep.Hypotheses) > 0 && rep.Hypotheses[0].Confidence == High {
		for _, q := range rep.DataQuality {
			if strings.Contains(q, "no verdict from this is above medium") {
				out = append(out, "hypothesis 1 is high, but data quality says: "+q)
			}
		}
	}
	sort.Strings(out)
	return out
}

func numbering(what string) string {
	switch {
	case what == "none":
		return "none"
	case strings.HasSuffix(what, "unlabelled"):
		return "unlabelled"
	case strings.Contains(what, frSeq):
		return frSeq
	}
	return ringsCount
}

// Every report any test of this package makes is checked (onReport): the
// synthetic Inputs of every test, the real fixtures below.
var (
	storyMu     sync.Mutex
	storyFailed []string
	storySeen   int
)

func TestMain(m *testing.M) {
	onReport = func(rep Report) {
		d := disagreements(rep)
		storyMu.Lock()
		defer storyMu.Unlock()
		storySeen++
		if len(d) > 0 && len(storyFailed) < 20 {
			storyFailed = append(storyFailed, strings.Join(d, "\n  ")+"\nin:\n"+rep.Text())
		}
	}
	code := m.Run()
	if len(storyFailed) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d report(s) of %d disagree with themselves about a rank (story_test.go):\n%s\n", len(storyFailed), storySeen, strings.Join(storyFailed, "\n---\n"))
		code = 1
	}
	os.Exit(code)
}

// realBundle is a real job's evidence bundle (testdata/bundles, README
// there), its Flight Recorder dumps analysed as the service does.
func realBundle(t *testing.T, name string) *evidence.Bundle {
	raw, err := os.ReadFile(filepath.Join("testdata", "bundles", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var b evidence.Bundle
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	evidence.AnalyzeFR(context.Background(), &b)
	return &b
}

// TestOneStoryRealDDP: the two real DDP hangs, each rank said once. The
// ranks waiting in DDP's gradient all_reduce (issued from C++, in no
// ring) are in the Flight Recorder's all_reduce, not "outside any
// collective"; the barrier rank 0 holds the lock across carries both
// numbers, each said.
func TestOneStoryRealDDP(t *testing.T) {
	for _, c := range []struct {
		name, culprit string
		want          []string
	}{
		{"ddp_manifest_lock", "0", []string{
			"0: in barrier on group 0-3 (#22 by the Flight Recorder's seq, #5 by the rings' count), waiting for ranks 1-3",
			"1-3: outside any collective, main thread in ⟦ddp_job.py⟧:168 (⟦append_manifest⟧)",
			"then: kill the job and restart it: a deadlock does not end by itself; left alone, rank 0's barrier #22 on group 0-3 (Flight Recorder's seq) times out in about 29m55s",
		}},
		{"ddp_loader_stuck", "2", []string{
			"0-1,3: in all_reduce #20 on group 0-3 (Flight Recorder's seq), waiting for rank 2; main thread in ⟦ddp_job.py⟧:185 (⟦train_epoch⟧)",
			"2: outside any collective, main thread in ⟦ddp_job.py⟧:180 (⟦train_epoch⟧)",
			"then: unblock or kill pid 12172, what rank 2 waits for",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := Diagnose(FromBundle(realBundle(t, c.name), StateOptions{}))
			if d := disagreements(rep); len(d) > 0 {
				t.Errorf("disagreements:\n%s", strings.Join(d, "\n"))
			}
			text := rep.Text()
			if rep.Hypotheses[0].Culprits != c.culprit {
				t.Errorf("culprit %s\n%s", rep.Hypotheses[0].Culprits, text)
			}
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("no %q in\n%s", w, text)
				}
			}
		})
	}
}

// TestDisagreementsFound: the checker finds the contradiction the issue
// reported (ranks outside any collective in one part, in the recorder's
// #34 in another) and an unlabelled number: it can fail.
func TestDisagreementsFound(t *testing.T) {
	rep := Report{Summary: "rank 1 is the culprit.",
		Hypotheses: []Hypothesis{{Evidence: []Evidence{{"flight_recorder", "pg 0: rank 1 never joined #34; ranks 0,2-3 are in #34 all_reduce"}}}},
		Ranks:      []RankGroup{{Ranks: "0,2-3", Count: 3, Doing: "outside any collective, main thread in train.py:109 (train)"}}}
	d := disagreements(rep)
	if len(d) < 4 || !strings.Contains(strings.Join(d, "\n"), "rank 2: ") || !strings.Contains(strings.Join(d, "\n"), "without its numbering") {
		t.Errorf("%q", d)
	}
	ok := Report{Hypotheses: []Hypothesis{{Evidence: []Evidence{{"flight_recorder", "ranks 0,2-3 are in all_reduce #34 on group 0-3 (Flight Recorder's seq)"}}}},
		Ranks: []RankGroup{{Ranks: "0,2-3", Count: 3, Doing: "in all_reduce #34 on group 0-3 (Flight Recorder's seq), waiting for rank 1"}}}
	if d := disagreements(ok); len(d) > 0 {
		t.Errorf("one story flagged: %q", d)
	}
}

// TestNowNotThen: a rank that is gone shows the stack it left as it
// ended, said as such with its age, never as where it is now; a live
// rank's is its current one.
func TestNowNotThen(t *testing.T) {
	const now = int64(1_800_000_000_000_000_000)
	row := func(r int, seq int64, dur float64) evidence.CommRow {
		return evidence.CommRow{Rank: r, TimestampUS: now/1000 - 60_000_000 + seq*1000, Op: "all_reduce", Ranks: "[0, 1]", GroupSeq: seq, DurationMS: dur, Peer: -1}
	}
	main := &stacks.Thread{IsMain: true, Frames: []stacks.Frame{{File: "/job/train.py", Line: 10, Function: "load"}, {File: "/job/train.py", Line: 50, Function: "main"}}}
	in := Input{World: 2, Comm: []evidence.CommRow{row(0, 1, 2), row(0, 2, -1), row(1, 1, 2)}, Ranks: map[int]*RankFacts{
		0: {Rank: 0, NowNS: now, EndedNS: now - 7e9},
		1: {Rank: 1, NowNS: now, EndedNS: now - 5e9, Main: main},
	}}
	rep := Diagnose(in)
	want := "outside any collective, main thread was in ⟦train.py⟧:10 (⟦load⟧) as it ended, 5s before this read"
	if rep.doing[1] != want {
		t.Errorf("rank 1: %q, want %q\n%s", rep.doing[1], want, rep.Text())
	}
	in.Ranks[0].Alive, in.Ranks[1].Alive = true, true
	if d := Diagnose(in).doing[1]; d != "outside any collective, main thread in ⟦train.py⟧:10 (⟦load⟧)" {
		t.Errorf("live rank 1: %q", d)
	}
}

// TestOneStorySettled: the real DDP hangs once their stall has lasted
// (high confidence): no part of the answer announces a cap the verdict
// does not keep (the stacks' "no verdict from this is above medium" once
// stood beside a high verdict the Flight Recorder had numbered).
func TestOneStorySettled(t *testing.T) {
	for _, name := range []string{"ddp_manifest_lock", "ddp_loader_stuck"} {
		rep := Diagnose(FromBundle(realBundle(t, name), StateOptions{MinStall: time.Millisecond, NoHistoryStall: time.Millisecond}))
		if rep.Hypotheses[0].Confidence != High {
			t.Errorf("%s: %s confidence, want high once settled\n%s", name, rep.Hypotheses[0].Confidence, rep.Text())
		}
		if d := disagreements(rep); len(d) > 0 {
			t.Errorf("%s: disagreements:\n%s", name, strings.Join(d, "\n"))
		}
	}
}
