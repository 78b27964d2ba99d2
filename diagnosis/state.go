package diagnosis

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
)

// Job states, decided before any hang hypothesis: a job that progresses
// never gets one.
const (
	StateHealthy     = "healthy"     // every rank steps at its usual pace
	StateProgressing = "progressing" // moving, but its pace cannot be judged (too little step history)
	StateSlow        = "slow"        // moving, one or more ranks far slower than the rest
	StateStalled     = "stalled"     // no progress for longer than its own step history allows
	StateDead        = "dead"        // the processes are gone, or a dead rank holds up the rest
	// StateUnknown: no rank was found, or no clock times any rank's
	// progress (no step, collective or span recorded). Never healthy: the
	// absence of a clock is not evidence of progress, and someone asked.
	StateUnknown = "unknown"
)

// Progress is one rank's progress evidence. Times are that rank's own
// clock (Unix ns): ages are taken on each rank's clock, so clocks that
// differ between processes or nodes do not matter.
type Progress struct {
	Rank  int
	Alive bool
	// Steps are the completion times of its recent steps, oldest first.
	Steps []int64
	// LastActivity is the last thing it was seen doing: a step, a
	// collective entered or left (0: nothing seen).
	LastActivity int64
	// Now is its clock when the evidence was read.
	Now int64
}

// StateOptions tune Classify; zero values take the defaults.
type StateOptions struct {
	// StallFactor: no progress for this many of the job's typical step
	// times is a stall (default 10).
	StallFactor float64
	// MinStall is the shortest stall that gets a confident verdict
	// (default 30 s): a shorter one, past 10 steps and 5 s, is called
	// stalled at medium confidence at most. NoHistoryStall is the stall
	// threshold of a job with no step history (default 120 s).
	MinStall, NoHistoryStall time.Duration
	// SlowFactor: a rank whose recent step time is this many times the
	// job's median is slow (default 2).
	SlowFactor float64
}

func (o *StateOptions) defaults() {
	if o.StallFactor <= 0 {
		o.StallFactor = 10
	}
	if o.MinStall <= 0 {
		o.MinStall = 30 * time.Second
	}
	if o.NoHistoryStall <= 0 {
		o.NoHistoryStall = 120 * time.Second
	}
	if o.SlowFactor <= 0 {
		o.SlowFactor = 2
	}
}

// JobState is the verdict on whether the job moves.
type JobState struct {
	State string
	Why   string
	// Step is the job's typical step time (the median of the ranks'
	// recent ones), 0 when unknown; Threshold the stall threshold used.
	Step, Threshold time.Duration
	// Idle is, per rank, how long since its last activity on its own
	// clock; Slow the ranks far slower than the rest; Dead the dead ones.
	Idle map[int]time.Duration
	Slow []int
	Dead []int
	// Young: stalled for less than MinStall (see Classify).
	Young bool
	// Quiet, for a job judged moving: how long no rank has made progress
	// when that is at least quietFactor typical steps (and a second), yet
	// under the threshold: a stall in the making looks like this, so the
	// "no hang" is not said with high confidence. 0 otherwise.
	Quiet time.Duration
}

// quietFactor: idle for this many typical steps, every rank at once, is
// more than jitter (a healthy job's ranks act every step).
const quietFactor = 3

// noClock is why a job whose progress nothing times is unknown.
const noClock = "no clock: no rank's progress could be timed (no step, collective or span recorded), so whether the job moves is unknown; the stacks say who waits for whom"

// youngFloor is the shortest idle time that can be a stall at all.
const youngFloor = 5 * time.Second

// Classify decides the job's state from its ranks' progress.
func Classify(ps []Progress, opt StateOptions) JobState {
	opt.defaults()
	js := JobState{Idle: map[int]time.Duration{}}
	if len(ps) == 0 {
		js.State, js.Why = StateUnknown, noClock
		return js
	}
	var steps []time.Duration
	perRank := map[int]time.Duration{}
	alive := 0
	for _, p := range ps {
		if !p.Alive {
			js.Dead = append(js.Dead, p.Rank)
			continue
		}
		alive++
		if p.LastActivity > 0 && p.Now >= p.LastActivity {
			js.Idle[p.Rank] = time.Duration(p.Now - p.LastActivity)
		}
		if st, ok := recentStep(p.Steps); ok {
			perRank[p.Rank] = st
			steps = append(steps, st)
		}
	}
	sort.Ints(js.Dead)
	if alive == 0 {
		js.State, js.Why = StateDead, fmt.Sprintf("every rank's process is gone (%d)", len(ps))
		return js
	}
	if len(steps) > 0 {
		// Relative to the job's own steps, above a small floor (a second's
		// jitter is no stall). Below MinStall the stall is young: a
		// checkpoint or an evaluation pause looks the same for a while, so
		// its verdict is held at medium confidence (Young).
		js.Step = median(steps)
		js.Threshold = max(min(youngFloor, opt.MinStall), time.Duration(opt.StallFactor*float64(js.Step)))
	} else {
		js.Threshold = opt.NoHistoryStall
	}
	// The job moves while some live rank acted within the threshold; it is
	// stalled once every live rank has been idle past it.
	moving, known := 0, 0
	var least time.Duration = -1
	for _, p := range ps {
		if !p.Alive {
			continue
		}
		idle, ok := js.Idle[p.Rank]
		if !ok {
			continue
		}
		known++
		if idle < js.Threshold {
			moving++
		}
		if least < 0 || idle < least {
			least = idle
		}
	}
	switch {
	case known == 0:
		js.State, js.Why = StateUnknown, noClock
		if len(js.Dead) > 0 {
			js.State, js.Why = StateDead, fmt.Sprintf("rank(s) %v are dead and no live rank's activity could be timed", js.Dead)
		}
		return js
	case moving == 0 && len(js.Dead) > 0:
		js.State = StateDead
		js.Why = fmt.Sprintf("rank(s) %v are dead and the others made no progress for %s (threshold %s)", js.Dead, least.Round(time.Millisecond), js.Threshold)
		return js
	case moving == 0:
		js.State = StateStalled
		js.Why = fmt.Sprintf("no rank made progress for %s, over the %s threshold%s", least.Round(time.Millisecond), js.Threshold, stepWords(js.Step, opt.StallFactor))
		if least < opt.MinStall {
			js.Young = true
			js.Why += fmt.Sprintf(", but for less than %s: a pause (checkpoint, evaluation) looks the same for a while", opt.MinStall)
		}
		return js
	}
	if js.Step > 0 && least >= max(time.Second, quietFactor*js.Step) {
		js.Quiet = least
	}
	for r, st := range perRank {
		if js.Step > 0 && float64(st) >= opt.SlowFactor*float64(js.Step) {
			js.Slow = append(js.Slow, r)
		}
	}
	sort.Ints(js.Slow)
	switch {
	case len(js.Dead) > 0:
		js.State = StateProgressing
		js.Why = fmt.Sprintf("rank(s) %v are dead, yet the others still progress (last activity %s ago)", js.Dead, least.Round(time.Millisecond))
	case len(js.Slow) > 0 && len(js.Slow) < len(perRank):
		js.State = StateSlow
		js.Why = fmt.Sprintf("the job progresses (last activity %s ago), but rank(s) %v step at ≥%.0f× the median step of %s", least.Round(time.Millisecond), js.Slow, opt.SlowFactor, js.Step.Round(time.Millisecond))
	case len(steps) == 0:
		js.State = StateProgressing
		js.Why = fmt.Sprintf("the job is active (last activity %s ago); no step history to judge its pace", least.Round(time.Millisecond))
	default:
		js.State = StateHealthy
		js.Why = fmt.Sprintf("every rank is active (last activity %s ago), stepping every %s", least.Round(time.Millisecond), js.Step.Round(time.Millisecond))
	}
	return js
}

func stepWords(step time.Duration, factor float64) string {
	if step == 0 {
		return " (no step history)"
	}
	return fmt.Sprintf(" (%.0f× its typical step of %s)", factor, step.Round(time.Millisecond))
}

// recentStep is a rank's typical recent step time: the median gap between
// its last completed steps.
func recentStep(ts []int64) (time.Duration, bool) {
	if len(ts) < 2 {
		return 0, false
	}
	if len(ts) > 9 {
		ts = ts[len(ts)-9:]
	}
	var gaps []time.Duration
	for i := 1; i < len(ts); i++ {
		if d := ts[i] - ts[i-1]; d > 0 {
			gaps = append(gaps, time.Duration(d))
		}
	}
	if len(gaps) == 0 {
		return 0, false
	}
	return median(gaps), true
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// progressOf is each rank's progress: its steps (or, without optimizer
// hooks, its collectives' rhythm), its last activity, and the collectives
// only the Flight Recorder times.
func progressOf(in Input) []Progress {
	var ps []Progress
	cadence := collectiveCadence(in.Comm)
	for _, r := range sortedFacts(in.Ranks) {
		p := Progress{Rank: r.Rank, Alive: r.Alive, Now: r.NowNS}
		if a := r.Activity; a != nil {
			for _, s := range a.Steps {
				p.Steps = append(p.Steps, s*1000)
			}
			if len(p.Steps) == 0 {
				// No optimizer steps recorded (a job without torch's
				// optimizer hooks): its collective rhythm is its step.
				p.Steps = cadence[r.Rank]
			}
			last := max(a.LastComm, a.LastCommDone)
			if n := len(a.Steps); n > 0 {
				last = max(last, a.Steps[n-1])
			}
			p.LastActivity = last * 1000
		}
		if in.FR != nil {
			// The recorder's entries time the collectives no ring sees
			// (DDP's, FSDP's, issued from C++).
			ts := in.FR.Created[r.Rank]
			if p.Now > 0 {
				// Not past the rank's own clock: a dump from elsewhere
				// (another clock, a copied file) times nothing here.
				n, _ := slices.BinarySearch(ts, p.Now+1)
				ts = ts[:n]
			}
			if len(ts) > 0 {
				p.LastActivity = max(p.LastActivity, ts[len(ts)-1])
				if len(p.Steps) == 0 {
					p.Steps = ts
				}
			}
		}
		ps = append(ps, p)
	}
	return ps
}

// StateOf is the job's state from a pulse (evidence.Options.Pulse): the
// watcher's reading, by the rule every verdict's state follows.
func StateOf(b *evidence.Bundle, opt StateOptions) JobState {
	in := FromBundle(b, opt)
	if len(in.Ranks) == 0 {
		return JobState{State: StateUnknown, Why: "no rank of a job was found: no agent identity, no ring", Idle: map[int]time.Duration{}}
	}
	return Classify(progressOf(in), in.State)
}

// StallOptions are the state options for a caller's stall_seconds (0: the
// defaults): a stall that long gets a confident verdict, and a job with
// no step history stalls after it too.
func StallOptions(stallSeconds int) StateOptions {
	var st StateOptions
	if stallSeconds > 0 {
		st.MinStall = time.Duration(stallSeconds) * time.Second
		st.NoHistoryStall = st.MinStall
	}
	return st
}
