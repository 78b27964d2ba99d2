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

func TestArrivalNamesTheRankLastInMost(t *testing.T) {
	g := &group{name: "0", members: []int{0, 1, 2, 3}}
	a := arrival(g, g.members, arrivalLists(4, 40, 1, 50, 1))
	if a == nil || a.Rank != 1 || a.Of != arrivalWindow || a.Last != arrivalWindow || a.LagMS < 49 || a.LagMS > 51 {
		t.Fatalf("%+v", a)
	}
	if !strings.Contains(a.Line, "rank 1 entered 32 of the last 32 collectives last, a median 50 ms after the others") {
		t.Error(a.Line)
	}
	// Rank 3 is last by rank order when nobody is late: 0.1 ms, but in
	// every collective. The diagnosis weighs the lag; arrival only orders.
	if a := arrival(g, g.members, arrivalLists(4, 40, -1, 0, 1)); a == nil || a.Rank != 3 || a.LagMS > 1 {
		t.Fatalf("%+v", a)
	}
}

func TestArrivalSaysNothingWithoutAMajority(t *testing.T) {
	g := &group{name: "0", members: []int{0, 1, 2, 3}}
	// rank 1 late in every other collective only: rank 3 last in the rest
	if a := arrival(g, g.members, arrivalLists(4, 40, 1, 50, 2)); a != nil {
		t.Fatalf("half the time is not most: %+v", a)
	}
	if a := arrival(g, g.members, arrivalLists(4, 5, 1, 50, 1)); a != nil {
		t.Fatalf("5 collectives: %+v", a)
	}
	g2 := &group{name: "1", members: []int{0, 1}}
	if a := arrival(g2, g2.members, arrivalLists(2, 40, 1, 50, 1)); a != nil {
		t.Fatalf("two members: %+v", a)
	}
	// a rank missing from some collectives: only those on every member count
	lists := arrivalLists(4, 40, 1, 50, 1)
	lists[2] = lists[2][:4]
	if a := arrival(g, g.members, lists); a != nil {
		t.Fatalf("4 shared: %+v", a)
	}
}
