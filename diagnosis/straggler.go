package diagnosis

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
)

// In a synchronous job every rank steps at the slowest one's pace, so step
// times cannot tell who is slow. The waits can: the others wait for the
// straggler inside each collective, while it, arriving last, hardly waits.
const (
	waitWindow   = 32  // recent completed collectives per rank
	waitSamples  = 8   // fewest a rank needs to count
	waitRatio    = 3.0 // a straggler waits this many times less than the median
	minMedianMS  = 5.0 // below this nobody waits enough to tell
	minWaitRanks = 4
	// minStepShare: the others' median wait must be this share of the
	// job's step, or the "straggler" costs the job little and may be the
	// noise of a loaded machine (a rank 10-25% slower for a while).
	minStepShare = 0.2
)

// waitStragglers names the ranks whose recent collectives return far
// sooner than everyone else's, with the evidence line. step is the job's
// typical step time (0 when unknown).
func waitStragglers(rows []evidence.CommRow, step time.Duration) ([]int, string) {
	byRank := map[int][]float64{}
	for i := len(rows) - 1; i >= 0; i-- { // newest first: rows are by rank, then time
		r := rows[i]
		if r.DurationMS >= 0 && len(byRank[r.Rank]) < waitWindow {
			byRank[r.Rank] = append(byRank[r.Rank], r.DurationMS)
		}
	}
	mean := map[int]float64{}
	var means []float64
	for r, ds := range byRank {
		if len(ds) < waitSamples {
			continue
		}
		s := 0.0
		for _, d := range ds {
			s += d
		}
		mean[r] = s / float64(len(ds))
		means = append(means, mean[r])
	}
	if len(means) < minWaitRanks {
		return nil, ""
	}
	sort.Float64s(means)
	med := means[len(means)/2]
	if med < minMedianMS || (step > 0 && med < minStepShare*float64(step.Milliseconds())) {
		return nil, ""
	}
	var slow []int
	for r, m := range mean {
		if m*waitRatio < med {
			slow = append(slow, r)
		}
	}
	sort.Ints(slow)
	if len(slow) == 0 || 2*len(slow) >= len(mean) { // a straggler is a minority
		return nil, ""
	}
	var ms []string
	for _, r := range slow {
		ms = append(ms, fmt.Sprintf("%.0f ms", mean[r]))
	}
	return slow, fmt.Sprintf("%s wait%s %s per collective on average over %s last %d, the others a median of %.0f ms: the others wait for %s in every collective",
		rankWords(slow), plural(len(slow), "s", ""), strings.Join(ms, ", "), plural(len(slow), "its", "their"), waitWindow, med, them(len(slow)))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// frMinLagMS: a mean wait below this, in the collectives a rank came last
// in, is a loaded machine's noise (and, across nodes, the clocks' offset).
const frMinLagMS = 10.0

// frStragglers names the rank that the live Flight Recorder shows the
// others waiting for, from the order they entered their recent
// collectives: it times DDP's and FSDP's collectives, issued from C++
// where no ring sees them. The waiting must be a share of the time
// (minStepShare, as for waitStragglers), and long each time it happens.
func frStragglers(in Input) ([]int, string) {
	if in.FR == nil {
		return nil, ""
	}
	var best *fr.Arrival
	var pg fr.PGReport
	for _, p := range in.FR.ProcessGroups {
		a := p.Arrival
		if a == nil || a.Last == 0 || a.SpanMS <= 0 || a.WaitMS/float64(a.Last) < frMinLagMS || a.WaitMS < minStepShare*a.SpanMS {
			continue
		}
		if best == nil || a.Of > best.Of || (a.Of == best.Of && p.Size > pg.Size) {
			best, pg = a, p
		}
	}
	if best == nil {
		return nil, ""
	}
	return []int{best.Rank}, fmt.Sprintf("the Flight Recorder shows the others waiting for rank %d %.0f ms of the last %.0f ms (%d collectives of group %s, from when each rank entered them on its own clock; it came last in %d, by %.0f ms on average): it holds every step back",
		best.Rank, best.WaitMS, best.SpanMS, best.Of, pg.MembersText, best.Last, best.WaitMS/float64(best.Last))
}

// frNearStraggler is a member the Flight Recorder shows coming last in at
// least half of the recent collectives of a group without passing the
// straggler's bar (frStragglers): too little to name it, too much for a
// confident all-clear. "" when none.
func frNearStraggler(in Input) string {
	if in.FR == nil {
		return ""
	}
	for _, p := range in.FR.ProcessGroups {
		a := p.Arrival
		if a == nil || a.Of == 0 || 2*a.Last < a.Of || a.SpanMS <= 0 {
			continue
		}
		return fmt.Sprintf("the Flight Recorder shows rank %d coming last in %d of the last %d collectives of group %s, %.0f ms of the others' waiting over %.0f ms: under a straggler's bar (%.0f ms each time, %.0f%% of the time), so not named, not excluded",
			a.Rank, a.Last, a.Of, p.MembersText, a.WaitMS, a.SpanMS, frMinLagMS, 100*minStepShare)
	}
	return ""
}
