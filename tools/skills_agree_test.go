package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// TestDeadJobOneVerdict: diagnose_hang and the bundled post_mortem and
// watchdog_timeout skills, run for real over one dead job's evidence,
// name the same culprit (issue 22, kind 7: the skills once had their own
// rule, "most behind", which blames a rank waiting in a sub-group). Two
// forms of the real skip_tp job (rank 3 skipped its pair's all_reduce):
// as it was left (killed, no records), and with the ranks that waited
// for it recording that they died of the collective's timeout, the
// first of them rank 2.
func TestDeadJobOneVerdict(t *testing.T) {
	for _, timeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("timeouts=%v", timeouts), func(t *testing.T) {
			dir := copyDir(t, "../testdata/jobs/real/skip_tp")
			if timeouts {
				recordTimeouts(t, dir, 3)
			}
			e, err := sqlengine.New(sqlengine.Options{DataDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			env := &Env{SQL: e, Agents: agent.Options{DataDir: dir, CtrlRoot: t.TempDir()}, Skills: DefaultSkills}
			res := callDiagnose(t, env, nil)
			var rep struct {
				State      string `json:"state"`
				Hypotheses []struct {
					Category string `json:"category"`
					Culprits string `json:"culprit_ranks"`
				} `json:"hypotheses"`
			}
			b, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(b, &rep); err != nil || len(rep.Hypotheses) == 0 {
				t.Fatalf("diagnose_hang: %v %s", err, ResultText(res))
			}
			top := rep.Hypotheses[0]
			if rep.State != "dead" || top.Culprits != "3" {
				t.Fatalf("diagnose_hang: state %s, culprit %s (%s): %s", rep.State, top.Culprits, top.Category, ResultText(res))
			}
			for _, skill := range []string{"post_mortem", "watchdog_timeout"} {
				sr, err := RunSkill(context.Background(), env, skill, nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(sr.Findings) == 0 || sr.Findings[0].RuleID != "diagnosis_"+top.Category ||
					!strings.Contains(sr.Findings[0].Message, "culprit "+top.Culprits+";") {
					t.Errorf("%s disagrees with diagnose_hang (culprit %s, %s): %+v", skill, top.Culprits, top.Category, sr.Findings)
				}
				for _, f := range sr.Findings {
					for _, r := range []string{"0", "1", "2", "4", "5", "6", "7"} {
						if strings.Contains(f.Message, "culprit "+r) || strings.HasPrefix(f.Message, "Rank "+r+" ") {
							t.Errorf("%s blames a victim: %s", skill, f.Message)
						}
					}
				}
			}
		})
	}
}

// copyDir copies a fixture data dir (one level of pid dirs) so a test
// can add to it.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	pids, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if !p.IsDir() {
			continue
		}
		os.Mkdir(filepath.Join(dst, p.Name()), 0o755)
		files, _ := os.ReadDir(filepath.Join(src, p.Name()))
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(src, p.Name(), f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dst, p.Name(), f.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dst
}

// recordTimeouts writes, for every rank but culprit, the exception record
// the agent writes when gloo's collective times out, rank 2 (the
// culprit's pair) first.
func recordTimeouts(t *testing.T, dir string, culprit int) {
	t.Helper()
	pids, _ := os.ReadDir(dir)
	for _, p := range pids {
		id, _, err := procfacts.ReadIdentity(filepath.Join(dir, p.Name(), procfacts.IdentityFile))
		if err != nil || id.Rank == culprit {
			continue
		}
		when := int64(1796558514e9) + int64(id.Rank)*1e6
		if id.Rank == 2 {
			when -= 1e9
		}
		rec := map[string]any{"v": 1, "kind": "exception", "time_ns": when, "pid": id.PID, "start_time": id.StartTime, "hook": "sys",
			"thread": map[string]any{"name": "MainThread", "native_id": id.PID, "is_main": true},
			"type":   "RuntimeError", "message": "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Timed out waiting 40000ms for recv operation to complete",
			"frames": []map[string]any{{"file": "/venv/torch/distributed/distributed_c10d.py", "line": 2850, "function": "all_reduce"},
				{"file": "/job/tp_gloo_job.py", "line": 120, "function": "train_step"}}}
		b, _ := json.Marshal(rec)
		if err := os.WriteFile(filepath.Join(dir, p.Name(), procfacts.ExitsFile), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
