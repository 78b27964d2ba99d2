package flightrecorder

import (
	"strings"
	"testing"
)

// arrivalLists builds n collectives per rank, rank late arriving lateMS
// after the others at each (jitter: the others' spread, by rank).
func arrivalLists(ranks, n int, late int, lateMS float64, every int) map[int][]*Entry {
	sh := &Shared{ProfilingName: "gloo:all_reduce", PGName: "0"}
	lists := map[int][]*Entry{}
	for s := 1; s <= n; s++ {
		base := int64(s) * 100e6
		for r := 0; r < ranks; r++ {
			t := base + int64(r)*100e3 // 0.1 ms apart: the others' order varies by rank
			if r == late && (every <= 1 || s%every == 0) {
				t = base + int64(lateMS*1e6)
			}
			lists[r] = append(lists[r], &Entry{CollectiveSeqID: int64(s), TimeCreatedNs: t, Shared: sh})
		}
	}
	return lists
}

func TestArrivalNamesTheRankTheOthersWaitFor(t *testing.T) {
	g := &group{name: "0", members: []int{0, 1, 2, 3}}
	a := arrival(g, g.members, arrivalLists(4, 80, 1, 50, 1))
	if a == nil || a.Rank != 1 || a.Of != arrivalWindow || a.Last != arrivalWindow || a.Share != 1 ||
		a.WaitMS < 64*49.6 || a.WaitMS > 64*49.8 || a.SpanMS < 63*100 {
		t.Fatalf("%+v", a)
	}
	if !strings.Contains(a.Line, "the others waited 3181 ms for rank 1 over the last 64 collectives (6350 ms; it came last in 64), 100% of all their waiting") {
		t.Error(a.Line)
	}
	// DDP's pattern: late in every other collective (the first bucket of a
	// step), on time in the rest: still the one the others wait for.
	if a := arrival(g, g.members, arrivalLists(4, 80, 1, 30, 2)); a == nil || a.Rank != 1 || a.Last != 32 || a.Share < 0.95 {
		t.Fatalf("every other: %+v", a)
	}
	// Nobody late: rank 3 is last by 0.1 ms in each; the diagnosis weighs
	// the wait, arrival only says who caused it.
	if a := arrival(g, g.members, arrivalLists(4, 40, -1, 0, 1)); a == nil || a.Rank != 3 || a.WaitMS > 5 {
		t.Fatalf("%+v", a)
	}
}

func TestArrivalSaysNothingWithoutOneCause(t *testing.T) {
	g := &group{name: "0", members: []int{0, 1, 2, 3}}
	// ranks 1 and 2 each late half the time: the waiting is split
	lists := arrivalLists(4, 80, 1, 50, 2)
	for i, e := range lists[2] {
		if i%2 == 0 {
			e.TimeCreatedNs += 50e6
		}
	}
	if a := arrival(g, g.members, lists); a != nil {
		t.Fatalf("split: %+v", a)
	}
	if a := arrival(g, g.members, arrivalLists(4, 5, 1, 50, 1)); a != nil {
		t.Fatalf("5 collectives: %+v", a)
	}
	// a rank missing from some collectives: only those on every member count
	lists = arrivalLists(4, 40, 1, 50, 1)
	lists[2] = lists[2][:4]
	if a := arrival(g, g.members, lists); a != nil {
		t.Fatalf("4 shared: %+v", a)
	}
}
