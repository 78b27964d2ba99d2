package tools

import (
	"strings"
	"testing"
)

// TestSetConfigTextPartial: a write that failed on some processes says
// so in its first line and lists the failures first.
func TestSetConfigTextPartial(t *testing.T) {
	r := SetConfigResult{Status: "partial", Key: "probing.sample_rate", Value: "0.1", WriteEnabled: true}
	for rank := 0; rank < 20; rank++ {
		ps := ProcessSet{PID: 100 + rank, Rank: rank, Previous: "1.0", Value: "0.1"}
		if rank == 13 {
			ps = ProcessSet{PID: 113, Rank: 13, Error: "agent of pid 113 timed out after 10s"}
		}
		r.Processes = append(r.Processes, ps)
	}
	sizes(t, "set_config (20 ranks, 1 failed)", r)
	text := r.ModelText()
	lines := strings.Split(text, "\n")
	if lines[0] != "partial: probing.sample_rate = 0.1 on 19 of 20 process(es); 1 failed (below)." ||
		lines[1] != "  rank 13 (pid 113): failed: ⟦agent of pid 113 timed out after 10s⟧" || lines[2] != "  rank 0 (pid 100): ⟦0.1⟧ (was ⟦1.0⟧)" ||
		!strings.Contains(text, "… 4 more process(es) in structured content: processes") {
		t.Errorf("text:\n%s", text)
	}
}
