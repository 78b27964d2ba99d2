package fanout_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// TestJobScope: the whole job as an evidence.Scope. Stacks come from
// every node with their sources as rank ranges and the coverage; Peers
// counts the other nodes; a pid selection without a node of its own is
// the caller's to fix; and in the strict mode a node that does not
// answer makes the evidence a refusal the caller reads, not a verdict.
func TestJobScope(t *testing.T) {
	ctx := context.Background()
	a := startDaemon(t, "127.0.0.2", cluster.Node{Host: "a", NodeRank: 0, Ranks: "0-1", Source: "store"},
		&fakeSource{procs: []stacks.Process{proc(0, "step"), proc(1, "step")}}, token)
	b := startDaemon(t, "127.0.0.3", cluster.Node{Host: "b", NodeRank: 1, Ranks: "2-3", Source: "store"},
		&fakeSource{procs: []stacks.Process{proc(2, "step"), proc(3, "step")}}, token)
	opt := fanout.Options{Concurrency: 4, PeerTimeout: 10 * time.Second, Deadline: 30 * time.Second}
	s := fanout.NewJob(staticMembers(a.node, b.node), fanout.NewClient(token, 4), opt).Scope(nil)

	ans, err := s.Stacks(ctx, evidence.Selection{})
	if err != nil || len(ans.Processes) != 4 || ans.Sources["agent"] != "ranks 0-3" || ans.Coverage == nil || !ans.Coverage.Complete() {
		t.Fatalf("stacks: %+v %v", ans, err)
	}
	if n, err := s.Peers(ctx); n != 1 || err != nil {
		t.Errorf("peers: %d %v, want 1", n, err)
	}
	var ce *evidence.CallError
	if _, err := s.Stacks(ctx, evidence.Selection{PIDs: []int{1000}}); !errors.As(err, &ce) || !strings.Contains(err.Error(), "select ranks") {
		t.Errorf("a pid selection with no node of its own: %v", err)
	}

	b.srv.Close()
	strict := opt
	strict.Strict = true
	ss := fanout.NewJob(staticMembers(a.node, b.node), fanout.NewClient(token, 4), strict).Scope(nil)
	if _, _, err := ss.Evidence(ctx, 0); !errors.As(err, &ce) || !strings.Contains(err.Error(), "1/2 node(s) answered") {
		t.Errorf("strict evidence with a node down: %v", err)
	}
	bundle, cov, err := s.Evidence(ctx, 0)
	if err != nil || cov == nil || cov.Answered != 1 || bundle == nil {
		t.Errorf("lenient evidence with a node down: %v %+v", err, cov)
	}
}
