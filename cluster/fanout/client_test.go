package fanout

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/node"
)

// TestReplyCapPerPath: issue 23. A node answering its stacks with 40 MiB
// (the trial's 250 MiB took 29 s and 4.3 GB to decode) is cut off at the
// stacks' cap, without decoding it; the same size is within the evidence's
// cap (raw Flight Recorder dumps).
func TestReplyCapPerPath(t *testing.T) {
	big := `{"x":"` + strings.Repeat("a", 40<<20) + `"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(big))
	}))
	defer srv.Close()
	n := cluster.Node{Host: "n", Addr: strings.TrimPrefix(srv.URL, "http://"), Kind: cluster.KindDaemon}
	c := NewClient("", 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var out map[string]any
	err := c.Do(ctx, n, http.MethodPost, node.PathStacks, nil, &out)
	var pe *evidence.PeerError
	if !errors.As(err, &pe) || pe.Kind != KindGarbage || !strings.Contains(pe.Msg, "its answer to /v1/stacks is over 32 MiB") {
		t.Fatalf("stacks: %v", err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 256<<20 {
		t.Errorf("allocated %d MiB for a refused answer", grew>>20)
	}
	if err := c.Do(ctx, n, http.MethodPost, node.PathEvidence, nil, &out); err != nil {
		t.Fatalf("evidence: %v", err)
	}
}
