package fanout

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/internal/metrics/metricstest"
)

// TestCallsAreCountedPerNode: a call to a node nobody listens at counts as
// a call and an unreachable failure under its address, with its latency.
func TestCallsAreCountedPerNode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now
	n := cluster.Node{Host: "gone", Addr: addr, Kind: cluster.KindDaemon}
	node := map[string]string{"node": addr}
	failed := map[string]string{"node": addr, "kind": KindUnreachable}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := NewClient("", 2)
	defer c.Close()
	var out map[string]any
	if err := c.Do(ctx, n, http.MethodGet, "/v1/node", nil, &out); err == nil {
		t.Fatal("a call to a closed port succeeded")
	}
	if got := metricstest.Value(t, "probing_mcp_fanout_calls_total", node); got != 1 {
		t.Errorf("fanout_calls_total%v = %v, want 1", node, got)
	}
	if got := metricstest.Value(t, "probing_mcp_fanout_failures_total", failed); got != 1 {
		t.Errorf("fanout_failures_total%v = %v, want 1", failed, got)
	}
	if got := metricstest.Value(t, "probing_mcp_fanout_call_duration_seconds", node); got != 1 {
		t.Errorf("fanout_call_duration_seconds%v: %v observations, want 1", node, got)
	}
}
