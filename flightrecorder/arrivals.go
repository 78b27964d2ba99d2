package flightrecorder

import (
	"fmt"
	"math"
	"slices"
)

// Arrival says which member of a group the others wait for, read from
// each entry's time_created_ns: the recorder's one clock that torch keeps
// on every backend (gloo's never advances state or start times). Every
// rank steps at the slowest one's pace in a synchronous job, so step
// times cannot name the straggler; the order in which the members reach
// each collective can, even for DDP's and FSDP's collectives, issued from
// C++ where no Python wrapper sees them. In each collective the members
// wait at least from the second-to-last arrival to the last: that wait is
// the last one's doing. A straggler does most of the job's waiting even
// when it is not last in every collective (DDP's later buckets of a step
// are launched once the first is under way, all ranks at once).
type Arrival struct {
	// Rank is the member that caused the largest share of the waiting;
	// Last of Of recent collectives matched on every member came last.
	Rank int `json:"rank"`
	Last int `json:"last"`
	Of   int `json:"of"`
	// WaitMS is the waiting it caused over the window, Share its part of
	// all the waiting, SpanMS the window's length (first to last entry).
	WaitMS float64 `json:"wait_ms"`
	Share  float64 `json:"share"`
	SpanMS float64 `json:"span_ms"`
	Line   string  `json:"line"`
}

const (
	arrivalWindow = 64 // recent collectives compared
	arrivalMin    = 8  // fewest that say anything
	arrivalShare  = 0.6
)

// arrival reads the members' arrival order over the last collectives that
// every compared member recorded, matched by collective_seq_id. nil when
// too few are shared or no member caused most of the waiting.
func arrival(g *group, ranks []int, lists map[int][]*Entry) *Arrival {
	if len(ranks) < 2 {
		return nil
	}
	created := map[int64]map[int]int64{}
	for _, r := range ranks {
		l := lists[r]
		// The tail only: a large job's rings hold thousands of entries per
		// rank, and the recent ones are the question.
		for _, e := range l[max(0, len(l)-2*arrivalWindow):] {
			if e.TimeCreatedNs <= 0 || (e.Shared != nil && e.ProfilingName != "" && isP2PName(e.ProfilingName)) {
				continue
			}
			m := created[e.CollectiveSeqID]
			if m == nil {
				m = map[int]int64{}
				created[e.CollectiveSeqID] = m
			}
			m[r] = e.TimeCreatedNs
		}
	}
	var seqs []int64
	for s, m := range created {
		if len(m) == len(ranks) {
			seqs = append(seqs, s)
		}
	}
	slices.Sort(seqs)
	if len(seqs) > arrivalWindow {
		seqs = seqs[len(seqs)-arrivalWindow:]
	}
	if len(seqs) < arrivalMin {
		return nil
	}
	lastCount := map[int]int{}
	caused := map[int]int64{}
	var total int64
	first, end := int64(0), int64(0)
	for _, s := range seqs {
		m := created[s]
		lastR, lastT, secondT := -1, int64(math.MinInt64), int64(math.MinInt64)
		for _, r := range ranks {
			t := m[r]
			switch {
			case t > lastT:
				secondT = lastT
				lastR, lastT = r, t
			case t > secondT:
				secondT = t
			}
			if first == 0 || t < first {
				first = t
			}
			end = max(end, t)
		}
		lastCount[lastR]++
		caused[lastR] += lastT - secondT
		total += lastT - secondT
	}
	best := -1
	for _, r := range ranks {
		if best < 0 || caused[r] > caused[best] {
			best = r
		}
	}
	if total <= 0 || float64(caused[best]) < arrivalShare*float64(total) {
		return nil // the waiting is spread: a loaded machine's shuffle
	}
	a := &Arrival{Rank: best, Last: lastCount[best], Of: len(seqs), WaitMS: float64(caused[best]) / 1e6,
		Share: float64(caused[best]) / float64(total), SpanMS: float64(end-first) / 1e6}
	a.Line = fmt.Sprintf("%s: the others waited %.0f ms for rank %d over the last %d collectives (%.0f ms; it came last in %d), %.0f%% of all their waiting",
		pgLabel(g), a.WaitMS, best, a.Of, a.SpanMS, a.Last, 100*a.Share)
	return a
}

func isP2PName(name string) bool {
	o := ParseOpName(name)
	return o != nil && o.IsP2POp()
}
