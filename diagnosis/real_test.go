package diagnosis

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// TestRealGlooJobs reads the rings real 8-rank torch gloo jobs left
// (testdata/jobs/real, README there says how they were made) and checks
// each verdict against its truth.
func TestRealGlooJobs(t *testing.T) {
	for _, c := range []struct {
		name     string
		state    string
		category string
		culprits string
	}{
		{"skip_tp", StateStalled, CatMissing, "3"},
		{"cpu_stall_tp", StateStalled, CatCPUStall, "3"},
		{"straggler", "", CatStraggler, "5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join("..", "testdata", "jobs", "real", c.name)
			if _, err := os.Stat(dir); err != nil {
				t.Skipf("no fixture %s", dir)
			}
			e, err := sqlengine.New(sqlengine.Options{DataDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			rows, err := evidence.ReadComm(ctx, e, 64)
			if err != nil || len(rows) == 0 {
				t.Fatalf("comm rows: %d, %v", len(rows), err)
			}
			acts, err := evidence.ReadActivity(ctx, e, 10)
			if err != nil {
				t.Fatal(err)
			}
			// Read as if live: the job's processes are gone (the fixture is
			// what they left), so the clock is set just after the last row,
			// plus the idle time each case needs.
			var last int64
			for _, a := range acts {
				last = max(last, a.LastComm, a.LastCommDone)
			}
			idle := 2 * time.Minute
			if c.state == "" {
				idle = 50 * time.Millisecond
			}
			in := Input{World: 8, Ranks: map[int]*RankFacts{}, Comm: rows}
			for r := 0; r < 8; r++ {
				in.Ranks[r] = &RankFacts{Rank: r, Alive: true, Activity: acts[r], NowNS: last*1000 + int64(idle)}
			}
			rep := Diagnose(in)
			h := rep.Hypotheses[0]
			if (c.state != "" && rep.State != c.state) || h.Category != c.category || h.Culprits != c.culprits {
				t.Errorf("state %s, first hypothesis %s on %s (%s)\n%s", rep.State, h.Category, h.Culprits, h.Confidence, rep.Summary)
			}
			t.Log(rep.Summary)
			if c.state == "" {
				return
			}
			// Post-mortem, as the evidence service finds the fixture: every
			// process gone. The rings still name the culprit.
			b := evidence.Gather(ctx, evidence.Options{Agents: agent.Options{DataDir: dir, CtrlRoot: t.TempDir()}, SQL: e})
			pm := Diagnose(FromBundle(b, StateOptions{}))
			if h := pm.Hypotheses[0]; pm.State != StateDead || h.Category != c.category || h.Culprits != c.culprits || b.World != 8 {
				t.Errorf("post-mortem: state %s, world %d, %s on %s\n%s\n%v", pm.State, b.World, h.Category, h.Culprits, pm.Summary, pm.DataQuality)
			}
		})
	}
}
