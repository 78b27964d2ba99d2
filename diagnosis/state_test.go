package diagnosis

import (
	"strings"
	"testing"
	"time"
)

const sec = int64(time.Second)

// ranks: n ranks that stepped every step (ns) until last, read at now,
// each on its own clock (offset by its rank hours).
func ranks(n int, step, last, now int64) []Progress {
	var ps []Progress
	for r := 0; r < n; r++ {
		off := int64(r) * 3600 * sec
		p := Progress{Rank: r, Alive: true, LastActivity: last + off, Now: now + off}
		for t := last - 9*step; t <= last; t += step {
			p.Steps = append(p.Steps, t+off)
		}
		ps = append(ps, p)
	}
	return ps
}

// TestProgressingStragglerIsNotHung is the false alarm of issue 10: a job
// stepping every 0.8 s with one slow rank, read 15 ms after its last
// collective, is slow, never stalled.
func TestProgressingStragglerIsNotHung(t *testing.T) {
	ps := ranks(8, 800*int64(time.Millisecond), 100*sec, 100*sec+15*int64(time.Millisecond))
	p := &ps[3]
	p.Steps = nil
	for t := int64(100*sec - 9*2400*int64(time.Millisecond)); t <= 100*sec; t += 2400 * int64(time.Millisecond) {
		p.Steps = append(p.Steps, t+3*3600*sec)
	}
	js := Classify(ps, StateOptions{})
	if js.State != StateSlow || len(js.Slow) != 1 || js.Slow[0] != 3 || js.Step != 800*time.Millisecond {
		t.Fatalf("%+v", js)
	}
}

func TestStalled(t *testing.T) {
	step := 800 * int64(time.Millisecond)
	// 4 s without progress (5 steps) is no stall; 20 s (25 steps) is a
	// young one, below the 30 s of a confident verdict; 60 s is a stall.
	if js := Classify(ranks(4, step, 100*sec, 104*sec), StateOptions{}); js.State != StateHealthy {
		t.Errorf("4 s idle: %+v", js)
	}
	if js := Classify(ranks(4, step, 100*sec, 120*sec), StateOptions{}); js.State != StateStalled || !js.Young || js.Threshold != 8*time.Second {
		t.Errorf("20 s idle: %+v", js)
	}
	js := Classify(ranks(4, step, 100*sec, 160*sec), StateOptions{})
	if js.State != StateStalled || js.Young || js.Threshold != 8*time.Second || !strings.Contains(js.Why, "no rank made progress for 1m0s") {
		t.Errorf("60 s idle: %+v", js)
	}
	// Fast steps: the 5 s floor, not 10 steps of 50 ms.
	if js := Classify(ranks(4, 50*int64(time.Millisecond), 100*sec, 103*sec), StateOptions{}); js.State != StateHealthy {
		t.Errorf("fast steps, 3 s idle: %+v", js)
	}
	// A job whose steps take 10 s is not stalled after 60 s; after 150 s
	// (over 10 steps) it is.
	if js := Classify(ranks(4, 10*sec, 100*sec, 160*sec), StateOptions{}); js.State != StateHealthy {
		t.Errorf("slow steps, 60 s: %+v", js)
	}
	if js := Classify(ranks(4, 10*sec, 100*sec, 250*sec), StateOptions{}); js.State != StateStalled || js.Threshold != 100*time.Second {
		t.Errorf("slow steps, 150 s: %+v", js)
	}
	// One rank still active keeps the job moving.
	ps := ranks(4, step, 100*sec, 160*sec)
	ps[2].LastActivity = ps[2].Now - sec
	if js := Classify(ps, StateOptions{}); js.State == StateStalled {
		t.Errorf("one rank active: %+v", js)
	}
}

func TestNoHistoryAndDead(t *testing.T) {
	ps := ranks(4, sec, 100*sec, 110*sec)
	for i := range ps {
		ps[i].Steps = nil
	}
	if js := Classify(ps, StateOptions{}); js.State != StateProgressing {
		t.Errorf("no steps, 10 s: %+v", js)
	}
	for i := range ps {
		ps[i].Now += 200 * sec
	}
	if js := Classify(ps, StateOptions{}); js.State != StateStalled || js.Threshold != 120*time.Second {
		t.Errorf("no steps, 210 s: %+v", js)
	}
	ps = ranks(4, sec, 100*sec, 160*sec)
	ps[1].Alive = false
	if js := Classify(ps, StateOptions{}); js.State != StateDead || len(js.Dead) != 1 || js.Dead[0] != 1 {
		t.Errorf("one dead, rest idle: %+v", js)
	}
	ps = ranks(4, sec, 100*sec, 101*sec)
	ps[1].Alive = false
	if js := Classify(ps, StateOptions{}); js.State != StateProgressing || !strings.Contains(js.Why, "dead") {
		t.Errorf("one dead, rest moving: %+v", js)
	}
	for i := range ps {
		ps[i].Alive = false
	}
	if js := Classify(ps, StateOptions{}); js.State != StateDead {
		t.Errorf("all dead: %+v", js)
	}
	// No clock is no evidence of progress: unknown, never a moving job.
	if js := Classify(nil, StateOptions{}); js.State != StateUnknown {
		t.Errorf("no evidence: %+v", js)
	}
	live := []Progress{{Rank: 0, Alive: true, Now: 100 * sec}, {Rank: 1, Alive: true, Now: 100 * sec}}
	if js := Classify(live, StateOptions{}); js.State != StateUnknown || !strings.Contains(js.Why, "no clock") {
		t.Errorf("live ranks, nothing timed: %+v", js)
	}
}
