package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/demojob"
)

// startDemo runs the demo job (real processes with the agent) until it
// hangs; torch selects the gloo variant.
func startDemo(t *testing.T, python, torch string) *demojob.Job {
	t.Helper()
	job, err := demojob.Start(context.Background(), demojob.Options{Python: python, Torch: torch, Version: "e2e",
		Env: []string{"PROBING_ALLOW_EVAL=1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { job.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := job.WaitHung(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	return job
}

// startForeignAgent starts a process with our agent, rank 0 of "another
// job": same control root as job, its own data dir. It is what a second
// job on the node (or a parallel test) looks like, and must stay out of
// job's default fan-out. It returns the pid once its socket is up.
func startForeignAgent(t *testing.T, python string, job *demojob.Job) int {
	t.Helper()
	cmd := exec.Command(python, "-c", "import probing_mcp_agent._hook\nimport time\nwhile True: time.sleep(1)\n")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(job.Dir, "site"), "PROBING_MCP_AGENT=1",
		"PROBING_DATA_DIR="+filepath.Join(t.TempDir(), "other-job"), "PROBING_CTRL_ROOT="+job.CtrlRoot,
		"RANK=0", "WORLD_SIZE=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sock := filepath.Join(job.CtrlRoot, fmt.Sprintf("%d.sock", cmd.Process.Pid))
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			return cmd.Process.Pid
		}
	}
	t.Fatalf("the foreign agent's socket %s did not appear", sock)
	return 0
}

// TestE2ELiveJob drives the agent tools through the official Python MCP
// client against a real hung job (plain Python ranks, rank 2 stuck in a
// fake data loader), with writes allowed and audited.
func TestE2ELiveJob(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 for the demo job's ranks")
	}
	job := startDemo(t, py, "no")
	foreign := startForeignAgent(t, py, job)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	env := e2eEnv("PROBING_DATA_DIR="+job.DataDir, "PROBING_CTRL_ROOT="+job.CtrlRoot,
		"PROBING_MCP_ALLOW_WRITE=1", "PROBING_MCP_AUDIT_LOG="+audit)
	pids := job.PIDs()
	calls := [][]string{
		e2eArgs("list_processes", map[string]any{}),
		e2eArgs("get_stacks", map[string]any{}),
		e2eArgs("get_config", map[string]any{"rank": 1}),
		e2eArgs("set_config", map[string]any{"key": "sample_rate", "value": "0.5", "ranks": "0-3"}),
		e2eArgs("get_config", map[string]any{"pid": pids[3], "key": "sample_rate"}),
		e2eArgs("eval_python", map[string]any{"rank": 2, "code": "import sys\nsys._getframe(0).f_code.co_name + ' ' + str(RANK)"}),
		e2eArgs("eval_python", map[string]any{"rank": 0, "code": "while True: pass", "timeout": 1}),
		e2eArgs("get_stacks", map[string]any{"ranks": "7"}),
		e2eArgs("get_stacks", map[string]any{"pids": []int{pids[2]}, "merge": false}),
		e2eArgs("list_skills", map[string]any{}),
		e2eArgs("plan_skill", map[string]any{"skill_id": "collective_inflight", "params": map[string]string{"min_age_s": "5"}}),
		e2eArgs("run_skill", map[string]any{"skill_id": "training_hang", "params": map[string]string{"stall_seconds": "1"}}),
		e2eArgs("run_skill", map[string]any{"skill_id": "collective_inflight", "params": map[string]string{"min_age_s": "1; DROP TABLE x"}}),
		e2eArgs("run_skill", map[string]any{"skill_id": "no_such_skill"}),
		e2eArgs("diagnose_hang", map[string]any{"stall_seconds": 1}),
	}
	args := append(slices.Concat(calls...), "--read", "skill://training_hang")
	out := h.stdio(t, env, "stdio-call", args...)
	out.mustOK(t)

	var lp struct {
		Summary   string `json:"summary"`
		Processes []struct {
			PID   int  `json:"pid"`
			Rank  int  `json:"rank"`
			Alive bool `json:"alive"`
		} `json:"processes"`
		Other []struct {
			PID int `json:"pid"`
		} `json:"other_data_dir"`
	}
	json.Unmarshal(out.call(t, 0).ok(t), &lp)
	// Other tests running at the same time (other packages) may add their
	// own processes to the other list: ours must be there, theirs are fine.
	foreignListed := false
	for _, o := range lp.Other {
		foreignListed = foreignListed || o.PID == foreign
	}
	if len(lp.Processes) != 4 || !strings.Contains(lp.Summary, "ranks 0-3") || !foreignListed {
		t.Errorf("list_processes (the other job's rank 0 is pid %d): %+v", foreign, lp)
	}
	var gs struct {
		Summary string `json:"summary"`
		Groups  []struct {
			Outlier bool   `json:"outlier"`
			Ranks   string `json:"ranks"`
			Role    string `json:"role"`
		} `json:"groups"`
		HistoryIDs []int64 `json:"history_ids"`
	}
	json.Unmarshal(out.call(t, 1).ok(t), &gs)
	if len(gs.Groups) == 0 || !gs.Groups[0].Outlier || gs.Groups[0].Ranks != "2" || !strings.Contains(gs.Summary, "fake_data_loader") ||
		!strings.Contains(gs.Summary, "ranks 0-1,3") || len(gs.HistoryIDs) != 4 {
		t.Errorf("get_stacks does not put rank 2 first as the odd one out: %s", out.call(t, 1).Text)
	}
	if txt := out.call(t, 2).Text; !strings.Contains(txt, "probing.comm.collectives") {
		t.Errorf("get_config: %s", txt)
	}
	var sc struct {
		Status    string `json:"status"`
		Processes []struct {
			PID   int    `json:"pid"`
			Value string `json:"value"`
		} `json:"processes"`
	}
	json.Unmarshal(out.call(t, 3).ok(t), &sc)
	if sc.Status != "ok" || len(sc.Processes) != 4 {
		t.Errorf("set_config on ranks 0-3: %s", out.call(t, 3).Text)
	}
	var gc struct {
		Values map[string]string `json:"values"`
	}
	json.Unmarshal(out.call(t, 4).ok(t), &gc)
	if gc.Values["probing.sample_rate"] != "0.5" {
		t.Errorf("get_config after set_config: %s", out.call(t, 4).ok(t))
	}
	var ev struct {
		Status string `json:"status"`
		Output string `json:"output"`
	}
	json.Unmarshal(out.call(t, 5).ok(t), &ev)
	if ev.Status != "ok" || !strings.Contains(ev.Output, "2") {
		t.Errorf("eval_python in rank 2: %s", out.call(t, 5).Text)
	}
	json.Unmarshal(out.call(t, 6).ok(t), &ev)
	if ev.Status != "timeout" {
		t.Errorf("eval_python that never returns: %s", out.call(t, 6).Text)
	}
	if msg := out.call(t, 7).toolError(t); !strings.Contains(msg, "rank 7") || !strings.Contains(msg, "0-3") {
		t.Errorf("unknown rank: %q", msg)
	}
	var unmerged struct {
		Processes []struct {
			PID int `json:"pid"`
		} `json:"processes"`
	}
	json.Unmarshal(out.call(t, 8).ok(t), &unmerged)
	if len(unmerged.Processes) != 1 || unmerged.Processes[0].PID != pids[2] {
		t.Errorf("merge=false: %.300s", out.call(t, 8).ok(t))
	}
	var ls struct {
		Skills []struct {
			ID   string `json:"id"`
			Root string `json:"root"`
		} `json:"skills"`
	}
	json.Unmarshal(out.call(t, 9).ok(t), &ls)
	if len(ls.Skills) < 8 || ls.Skills[0].Root != "bundled" {
		t.Errorf("list_skills: %s", out.call(t, 9).Text)
	}
	var plan struct {
		Parameters map[string]string `json:"parameters"`
		Steps      []struct {
			SQL string `json:"sql"`
		} `json:"steps"`
	}
	json.Unmarshal(out.call(t, 10).ok(t), &plan)
	if plan.Parameters["min_age_s"] != "5" || len(plan.Steps) == 0 || !strings.Contains(plan.Steps[0].SQL, "duration_ms < 0") {
		t.Errorf("plan_skill: %.800s", out.call(t, 10).ok(t))
	}
	var rs struct {
		Status   string `json:"status"`
		Findings []struct {
			RuleID  string `json:"rule_id"`
			Message string `json:"message"`
		} `json:"findings"`
	}
	json.Unmarshal(out.call(t, 11).ok(t), &rs)
	if rs.Status != "ok" || len(rs.Findings) == 0 || rs.Findings[0].RuleID != "diagnosis_cpu_stall" || !strings.Contains(rs.Findings[0].Message, "culprit 2 at ⟦socket_rank.py⟧:67") {
		t.Errorf("run_skill training_hang on the hung job: %.1500s", out.call(t, 11).Text)
	}
	if msg := out.call(t, 12).toolError(t); !strings.Contains(msg, "min_age_s") {
		t.Errorf("an injected parameter: %q", msg)
	}
	if msg := out.call(t, 13).toolError(t); !strings.Contains(msg, "training_hang") {
		t.Errorf("unknown skill: %q", msg)
	}
	var dh struct {
		State      string `json:"state"`
		Hypotheses []struct {
			Category string `json:"category"`
			Culprits string `json:"culprit_ranks"`
			Where    struct {
				Function string `json:"function"`
				Source   string `json:"source"`
			} `json:"where"`
		} `json:"hypotheses"`
	}
	json.Unmarshal(out.call(t, 14).ok(t), &dh)
	if dh.State != "stalled" || len(dh.Hypotheses) == 0 || dh.Hypotheses[0].Category != "cpu_stall" || dh.Hypotheses[0].Culprits != "2" ||
		dh.Hypotheses[0].Where.Function != "fake_data_loader" || dh.Hypotheses[0].Where.Source != "time.sleep(1)" ||
		!strings.HasPrefix(out.call(t, 14).Text, "rank 2 is the culprit (cpu_stall, high confidence)") {
		t.Errorf("diagnose_hang: %.2000s", out.call(t, 14).Text)
	}
	if len(out.Reads) != 1 || out.Reads[0].Error != nil || len(out.Reads[0].Contents) != 2 || !strings.Contains(out.Reads[0].Contents[0].Text, "training_hang") {
		t.Errorf("skill://training_hang: %+v", out.Reads)
	}
	// Every write call, and only those, was audited before and after.
	recs := readAudit(t, audit)
	var tools []string
	for _, r := range recs {
		tools = append(tools, r.Tool+":"+r.Phase)
	}
	want := "set_config:call,set_config:result,eval_python:call,eval_python:result,eval_python:call,eval_python:result"
	if strings.Join(tools, ",") != want {
		t.Errorf("audit log %v, want %s", tools, want)
	}
}

// TestE2ELiveTorchJob: a real 4-rank gloo job where rank 2 skips an
// all_reduce; the tools must name rank 2 (torch is for development only:
// skipped without it).
func TestE2ELiveTorchJob(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	py := os.Getenv("PROBING_TORCH_PYTHON")
	if py == "" {
		py = "/root/devenv/bin/python"
	}
	if err := exec.Command(py, "-c", "import torch.distributed as d; assert d.is_available()").Run(); err != nil {
		t.Skipf("torch.distributed is not importable by %s (set PROBING_TORCH_PYTHON): %v", py, err)
	}
	job := startDemo(t, py, "yes")
	env := e2eEnv("PROBING_DATA_DIR="+job.DataDir, "PROBING_CTRL_ROOT="+job.CtrlRoot)
	out := h.stdio(t, env, "stdio-call", slices.Concat(
		e2eArgs("snapshot_flight_recorder", map[string]any{}),
		e2eArgs("get_stacks", map[string]any{}),
		e2eArgs("query", map[string]any{"sql": "SELECT _rank, count(*) AS n FROM python.comm_collective GROUP BY _rank ORDER BY _rank"}),
		e2eArgs("diagnose_hang", map[string]any{"stall_seconds": 1}),
	)...)
	out.mustOK(t)
	var fr struct {
		Verdict       string `json:"verdict"`
		ProcessGroups []struct {
			CulpritRanks string `json:"culprit_ranks"`
			MissingRanks string `json:"missing_ranks"`
		} `json:"process_groups"`
		Snapshots []struct {
			Rank      int   `json:"rank"`
			HistoryID int64 `json:"history_id"`
		} `json:"snapshots"`
	}
	json.Unmarshal(out.call(t, 0).ok(t), &fr)
	if fr.Verdict != "MISSING_RANKS" || len(fr.ProcessGroups) == 0 || fr.ProcessGroups[0].CulpritRanks != "2" || len(fr.Snapshots) != 4 || fr.Snapshots[0].HistoryID == 0 {
		t.Errorf("snapshot_flight_recorder: %.2000s", out.call(t, 0).Text)
	}
	if txt := out.call(t, 1).Text; !strings.Contains(txt, "checkpoint_to_slow_disk") || !strings.Contains(txt, "odd one out") {
		t.Errorf("get_stacks: %.1500s", txt)
	}
	var q struct {
		Rows []map[string]any `json:"rows"`
	}
	json.Unmarshal(out.call(t, 2).ok(t), &q)
	if len(q.Rows) != 4 {
		t.Errorf("python.comm_collective through query: %s", out.call(t, 2).Text)
	}
	// The verdict: rank 2 blocked in its checkpoint, the rings, the stacks
	// and the Flight Recorder agreeing.
	if txt := out.call(t, 3).Text; !strings.HasPrefix(txt, "rank 2 is the culprit (cpu_stall, high confidence) at torch_rank.py:") ||
		!strings.Contains(txt, "checkpoint_to_slow_disk") || !strings.Contains(txt, "[flight_recorder]") || !strings.Contains(txt, "(agrees)") {
		t.Errorf("diagnose_hang: %.2500s", txt)
	}
}
