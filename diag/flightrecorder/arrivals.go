package flightrecorder

import (
	"fmt"
	"slices"
	"sort"
)

// Arrival says which member of a group enters its collectives last, read
// from each entry's time_created_ns: the recorder's one clock that torch
// keeps on every backend (gloo's never advances state or start times).
// Every rank steps at the slowest one's pace in a synchronous job, so step
// times cannot name the straggler; the order in which the members reach
// each collective can, even for DDP's and FSDP's collectives, issued from
// C++ where no Python wrapper sees them.
type Arrival struct {
	// Rank is the member that came last most often; Last of Of recent
	// collectives matched on every member.
	Rank int `json:"rank"`
	Last int `json:"last"`
	Of   int `json:"of"`
	// LagMS is the median of how long after the others' median it came.
	LagMS float64 `json:"lag_ms"`
	// OthersMS is the same for the other members (their spread).
	OthersMS float64 `json:"others_ms"`
	Line     string  `json:"line"`
}

const (
	arrivalWindow = 32 // recent collectives compared
	arrivalMin    = 8  // fewest that say anything
)

// arrival reads the members' arrival order over the last collectives that
// every compared member recorded, matched by collective_seq_id. nil when
// too few are shared or no member comes last in most of them.
func arrival(g *group, ranks []int, lists map[int][]*Entry) *Arrival {
	if len(ranks) < 3 { // with two, "last" is only "not first"
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
	late := map[int][]float64{} // per rank: ms after the seq's median
	for _, s := range seqs {
		m := created[s]
		ts := make([]int64, 0, len(m))
		for _, t := range m {
			ts = append(ts, t)
		}
		slices.Sort(ts)
		med := ts[len(ts)/2]
		lastR, lastT := -1, int64(0)
		for _, r := range ranks {
			t := m[r]
			late[r] = append(late[r], float64(t-med)/1e6)
			if lastR < 0 || t > lastT {
				lastR, lastT = r, t
			}
		}
		lastCount[lastR]++
	}
	best := -1
	for _, r := range ranks {
		if best < 0 || lastCount[r] > lastCount[best] {
			best = r
		}
	}
	// Most of the window, not a plurality: a loaded machine shuffles
	// arrivals by a few ms, and a rank last now and then is noise.
	if 4*lastCount[best] < 3*len(seqs) {
		return nil
	}
	var others []float64
	for _, r := range ranks {
		if r != best {
			others = append(others, median(late[r]))
		}
	}
	a := &Arrival{Rank: best, Last: lastCount[best], Of: len(seqs), LagMS: median(late[best]), OthersMS: median(others)}
	a.Line = fmt.Sprintf("%s: rank %d entered %d of the last %d collectives last, a median %.0f ms after the others (they wait for it in each)",
		pgLabel(g), best, a.Last, a.Of, a.LagMS)
	return a
}

func isP2PName(name string) bool {
	o := ParseOpName(name)
	return o != nil && o.IsP2POp()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
