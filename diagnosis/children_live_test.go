package diagnosis_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/internal/testpython"
)

// TestLiveSubCauses runs each wait outside collectives for real (the
// culprit's worker blocked opening a FIFO, its upload command, its own
// open of the FIFO) and checks that the verdict names the process and the
// file, from the kernel and, under PROBING=2, the worker's own agent.
func TestLiveSubCauses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Python jobs")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3: the job needs it")
	}
	for _, c := range []struct {
		scenario, python string
		env              []string
		says             []string
	}{
		{"loader_worker", python, nil, []string{"waits for its worker process", "opening", "shard-1.fifo", "a FIFO", "wait_for_partner"}},
		{"spawn_worker", python, []string{"PROBING=2"}, []string{"waits for its worker process", "shard-1.fifo", "(⟦read_sample⟧) (its agent)"}},
		{"torch_loader", testpython.Torch(), nil, []string{"waits for its DataLoader workers", "shard-1.fifo", "a FIFO"}},
		{"upload_stuck", python, nil, []string{"waits for its child process: pid", `command ⟦sleep 3600⟧`, "; up "}},
		{"fifo_read", python, nil, []string{"rank 1's main thread is blocked", "opening", "shard-1.fifo", "a FIFO"}},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			if c.python == "" {
				t.Skip("no interpreter with torch (set PROBING_TORCH_PYTHON): torch's DataLoader cannot run here")
			}
			j := startThreadsJobWith(t, c.python, c.scenario, 2, c.env...)
			// Settled: the culprit named, its wait read (the worker reaches
			// its open a moment after the rank reaches its wait).
			rep, b := diagnoseUntil(t, j, c.scenario, func(r diagnosis.Report) bool {
				text := evidenceText(first(r))
				for _, w := range c.says {
					if !strings.Contains(text, w) {
						return false
					}
				}
				return settled(r, diagnosis.CatCPUStall)
			})
			h := first(rep)
			text := evidenceText(h)
			if h.Culprits != "1" || h.Collateral != "0" {
				js, _ := json.MarshalIndent(h, "", " ")
				t.Errorf("%s\n%s\n%s", rep.Summary, js, j.pids(b))
			}
			for _, w := range c.says {
				if !strings.Contains(text, w) {
					t.Errorf("evidence does not say %q:\n%s", w, text)
				}
			}
			if len(b.Ranks) != 2 || len(b.Conflicts) > 0 {
				t.Errorf("ranks %s, conflicts %v: a child is no rank", j.pids(b), b.Conflicts)
			}
			t.Log(text)
		})
	}
}
