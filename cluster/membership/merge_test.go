package membership

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
)

func TestMerge(t *testing.T) {
	t1 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Minute)
	store := []cluster.Node{
		{Host: "node-a", Addr: "10.0.0.1:9781", NodeRank: 0, Ranks: "0-7", Kind: cluster.KindDaemon, Source: "store", LastSeen: t1},
		{Host: "node-b", Addr: "10.0.0.2:9781", NodeRank: 1, Ranks: "8-15", Kind: cluster.KindDaemon, Source: "store", LastSeen: t2},
	}
	peers := []cluster.Node{
		{Host: "10.0.0.1", Addr: "10.0.0.1:9781", NodeRank: 5, Kind: cluster.KindDaemon, Source: "peers", LastSeen: t2},
		{Host: "node-c", Addr: "10.0.0.3:9781", NodeRank: 2, Ranks: "12-20", Kind: cluster.KindDaemon, Source: "peers"},
		{Host: "node-b", Addr: "10.0.0.2:9782", NodeRank: 1, Kind: cluster.KindDaemon, Source: "peers"},
		{Host: "node-b", Addr: "10.0.0.2:9922", NodeRank: 1, Kind: cluster.KindProbing, Source: "store"},
	}
	disk := []cluster.Node{{Host: "node-a", Addr: "10.0.0.1:9781", NodeRank: -1, Ranks: "0-3", Source: "disk"}, {Addr: "10.0.0.1:9781", Source: "store"}}
	got, probs := Merge(store, peers, disk)
	if len(got) != 5 {
		t.Fatalf("%d nodes: %+v", len(got), got)
	}
	a := got[0]
	if a.Addr != "10.0.0.1:9781" || a.Host != "node-a" || a.NodeRank != 0 || a.Ranks != "0-7" || !a.LastSeen.Equal(t2) || a.Source != "store+peers+disk" {
		t.Errorf("merged a: %+v", a)
	}
	want := []string{
		"ranks 12-15 claimed by ⟦node-b⟧ (10.0.0.2:9781) and ⟦node-c⟧ (10.0.0.3:9781)",
		"node rank 1 on host ⟦node-b⟧ claimed by 10.0.0.2:9781 and 10.0.0.2:9782",
	}
	if strings.Join(probs, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(probs, "\n"), strings.Join(want, "\n"))
	}
	if ns, p := Merge(); len(ns) != 0 || len(p) != 0 {
		t.Errorf("empty merge: %v %v", ns, p)
	}
}

func TestMergeRankConflictsBounded(t *testing.T) {
	// Every node claims every rank: the check stops instead of going
	// quadratic, and says so.
	var ns []cluster.Node
	for i := 0; i < 2000; i++ {
		ns = append(ns, cluster.Node{Host: "h" + strconv.Itoa(i), Addr: "10.1.0." + strconv.Itoa(i) + ":1", NodeRank: -1, Ranks: "0-1000"})
	}
	got, probs := Merge(ns)
	if len(got) != 2000 {
		t.Fatal(len(got))
	}
	if len(probs) > maxConflicts+3 || !strings.Contains(probs[len(probs)-1], "stopped early") {
		t.Errorf("%d problems, last %q", len(probs), probs[len(probs)-1])
	}
	_, probs = Merge([]cluster.Node{{Addr: "x:1", Ranks: "7-3"}, {Addr: "y:1", Ranks: "1,3,5"}, {Addr: "z:1", Ranks: "2-3,5-9"}})
	if len(probs) != 2 || !strings.Contains(probs[0], "not checked") || probs[1] != "ranks 3,5 claimed by y:1 and z:1" {
		t.Errorf("%q", probs)
	}
}
