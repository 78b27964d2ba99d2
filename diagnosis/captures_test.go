package diagnosis

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
)

// loadCapture reads a bundle the evidence service gathered from a live
// job (testdata/captures, see its README).
func loadCapture(t *testing.T, name string) *evidence.Bundle {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "captures", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var b evidence.Bundle
	if err := json.Unmarshal(data, &b); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &b
}

func allText(h Hypothesis) string {
	var b strings.Builder
	for _, e := range h.Evidence {
		b.WriteString(e.Text + "\n")
	}
	return b.String()
}

// TestCapturedCategories diagnoses the bundles captured from the real
// hangs of testdata/threads_job.py, as the evidence service gathered them,
// and checks each verdict against the scenario's truth.
func TestCapturedCategories(t *testing.T) {
	for _, c := range []struct {
		name, state, category, culprits, collateral, confidence, function string
		says                                                              []string
	}{
		{"deadlock", StateStalled, CatDeadlock, "1", "0", High, "update_stats", []string{"deadlock: 2 threads", "lock ⟦stats_lock⟧", "lock ⟦log_lock⟧", `held by thread ⟦log-flusher⟧`}},
		{"deadlock_rlock", StateStalled, CatDeadlock, "1", "0", High, "update_stats", []string{"deadlock: 2 threads", "RLock", "held by thread"}},
		{"gil_held", StateStalled, CatGILHeld, "1", "0", High, "native_wait", []string{"did not answer in time", "faulthandler", "not waiting for the GIL"}},
		{"gil_held_thread", StateStalled, CatGILHeld, "1", "0", Medium, "native_wait", []string{"did not answer in time", "its main thread waits on a futex", "likely holder"}},
		{"main_thread_dead", StateStalled, CatMainThreadDead, "1", "0", High, "load_batch", []string{"died of ⟦ValueError: corrupt record in shard 7", `⟦heartbeat⟧`, "threading._shutdown"}},
		{"mismatch", StateStalled, CatMismatch, "2", "0-1", High, "broadcast_params", []string{"rank 2 called broadcast", "ranks 0-1 called all_reduce"}},
		{"dead_rank", StateDead, CatDeadRank, "2", "0-1", High, "train_step", []string{"rank 2 died first", "RuntimeError: simulated device failure", "later", "ConnectionError"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := Diagnose(FromBundle(loadCapture(t, c.name), StateOptions{MinStall: time.Second}))
			js, _ := json.MarshalIndent(rep, "", " ")
			t.Logf("%s", js)
			h := rep.Hypotheses[0]
			if rep.State != c.state || h.Category != c.category || h.Culprits != c.culprits || h.Collateral != c.collateral ||
				h.Confidence != c.confidence || h.Where == nil || h.Where.Function != c.function {
				t.Errorf("got %s / %s on %s (collateral %s, %s) at %v", rep.State, h.Category, h.Culprits, h.Collateral, h.Confidence, h.Where)
			}
			n := 0
			for _, o := range rep.Hypotheses {
				if o.Category == c.category {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d %s hypotheses, want one", n, c.category)
			}
			for _, w := range c.says {
				if !strings.Contains(allText(h), w) {
					t.Errorf("evidence does not say %q:\n%s", w, allText(h))
				}
			}
		})
	}
}
