package diagnosis_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/demojob"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// TestDiagnoseLiveDemoJob runs the demo's torch-free job (4 Python ranks
// over sockets, their all-reduce recorded with record_collective; rank 2
// stuck in its data loader at step 5) and diagnoses it from what a live
// job offers: the rings, the agents and the stacks. It polls until the
// job has been idle past its own threshold (the idle time only grows, so
// a loaded machine only takes longer), then checks the verdict.
func TestDiagnoseLiveDemoJob(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3: the demo job needs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	job, err := demojob.Start(ctx, demojob.Options{Torch: "no", Python: "python3"})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Stop()
	if err := job.WaitHung(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	e, err := sqlengine.New(sqlengine.Options{DataDir: job.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	opt := evidence.Options{Agents: agent.Options{DataDir: job.DataDir, CtrlRoot: job.CtrlRoot}, SQL: e}
	var rep diagnosis.Report
	for {
		b := evidence.Gather(ctx, opt)
		if b.World != 4 || len(b.Ranks) != 4 || len(b.Problems) > 0 {
			t.Fatalf("evidence: world %d, %d ranks, problems %v", b.World, len(b.Ranks), b.Problems)
		}
		rep = diagnosis.Diagnose(diagnosis.FromBundle(b, diagnosis.StateOptions{MinStall: time.Second}))
		if rep.State == diagnosis.StateStalled || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	h := rep.Hypotheses[0]
	if rep.State != diagnosis.StateStalled || h.Category != diagnosis.CatCPUStall || h.Culprits != "2" || h.Collateral != "0-1,3" ||
		h.Where == nil || h.Where.Function != "fake_data_loader" || h.Confidence != diagnosis.High {
		t.Fatalf("%s\n%+v", rep.Summary, h)
	}
	if !strings.HasPrefix(rep.Summary, "rank 2 is the culprit (cpu_stall, high confidence) at ⟦socket_rank.py⟧:") {
		t.Errorf("summary %q", rep.Summary)
	}
	t.Log(rep.Summary)
}
