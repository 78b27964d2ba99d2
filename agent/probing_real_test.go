package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/tools"
)

// probingPython is an interpreter with the original Probing agent
// (PROBING_ORIG_PYTHON, else PROBING_INTEROP_PYTHON, else the development
// venv /root/devenv); the real-agent tests skip without one (CI has
// none). Only named ones: while they run, their ranks are every local
// server's ranks (original agents are not scoped by data dir), so a live
// test of another package running at the same time sees them too.
func probingPython(t *testing.T) string {
	for _, py := range []string{os.Getenv("PROBING_ORIG_PYTHON"), os.Getenv("PROBING_INTEROP_PYTHON"), "/root/devenv/bin/python"} {
		if py != "" && exec.Command(py, "-c", "import probing_hook, probing").Run() == nil {
			return py
		}
	}
	t.Skip("no interpreter with the original Probing agent (pip install probing==0.2.4; set PROBING_ORIG_PYTHON to it)")
	return ""
}

// probingJob is a launcher (PROBING=2, no rank of its own, as torchrun's
// parent) that starts three ranks; each has a helper thread, rank 1 is
// stuck in a function of its own, the others wait. HOLD_GIL=1 makes one
// rank that holds the GIL forever in re's backtracking.
const probingJob = `
import os, re, subprocess, sys, threading, time

def helper_thread_waits(ev):
    ev.wait()

def rank_waits_for_peers():
    while True:
        time.sleep(0.2)

def stuck_in_rank_one():
    while True:
        time.sleep(0.2)

def holds_the_gil():
    while True:
        re.match(r'(a+)+$', 'a' * 40 + 'b')

if os.environ.get("RANK") is None:
    kids = []
    for r in range(int(os.environ.get("JOB_RANKS", "3"))):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=os.environ.get("JOB_RANKS", "3"))
        kids.append(subprocess.Popen([sys.executable, __file__], env=env))
    for k in kids:
        print("rank pid", k.pid, flush=True)
    for k in kids:
        k.wait()
    sys.exit(0)

ev = threading.Event()
threading.Thread(target=helper_thread_waits, args=(ev,), daemon=True).start()
if os.environ.get("HOLD_GIL") == "1":
    time.sleep(1)
    holds_the_gil()
elif os.environ["RANK"] == "1":
    stuck_in_rank_one()
else:
    rank_waits_for_peers()
`

type probingJobProcs struct {
	script   string
	launcher int
	ranks    []int
}

// startProbingJob runs the job under PROBING=2 with its own data dir,
// not ours, and waits for every process's agent to be discovered.
func startProbingJob(t *testing.T, opt agent.Options, n int, env ...string) probingJobProcs {
	py := probingPython(t)
	// Original agents are this job's ranks whatever their data dir: another
	// Probing job of this user on the machine would add its ranks.
	if found, err := agent.Discover(opt); err == nil {
		for _, a := range found {
			if a.Kind == agent.KindProbing && a.Alive && a.Untrusted == "" && a.Rank() >= 0 {
				t.Skipf("another job's Probing agent runs here (pid %d, rank %d): its ranks would mix with this test's", a.PID, a.Rank())
			}
		}
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "probing_job.py")
	if err := os.WriteFile(script, []byte(probingJob), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, script)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "PROBING=2", "PROBING_PORT=RANDOM",
		"PROBING_DATA_DIR=" + filepath.Join(dir, "their-data"), fmt.Sprintf("JOB_RANKS=%d", n)}
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	j := probingJobProcs{script: script, launcher: cmd.Process.Pid}
	t.Cleanup(func() {
		for _, p := range j.ranks {
			syscall.Kill(p, syscall.SIGKILL)
		}
		cmd.Process.Kill()
		cmd.Wait() // the stderr copy is done after it
		if t.Failed() {
			t.Logf("the job's stderr:\n%s", stderr.String())
		}
	})
	sc := bufio.NewScanner(out)
	for len(j.ranks) < n && sc.Scan() {
		var pid int
		if _, err := fmt.Sscanf(sc.Text(), "rank pid %d", &pid); err == nil {
			j.ranks = append(j.ranks, pid)
		}
	}
	if len(j.ranks) != n {
		t.Fatalf("the launcher started %d ranks, not %d", len(j.ranks), n)
	}
	want := append([]int{j.launcher}, j.ranks...)
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		found, err := agent.Discover(opt)
		if err != nil {
			t.Fatal(err)
		}
		ok := 0
		for _, pid := range want {
			if a := find(found, pid); a != nil && a.Kind == agent.KindProbing && a.Alive {
				ok++
			}
		}
		if ok == len(want) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90 s, %d of %d Probing agents listen", ok, len(want))
		}
	}
}

// TestRealProbingJob: three ranks and a launcher, each with a real
// Probing 0.2.4 agent. Ranks come from the environment whatever our data
// dir is, the launcher is no rank, get_stacks by rank gives every thread
// with the script's own frame first and none of Probing's, and the
// diagnosis never blames the launcher.
func TestRealProbingJob(t *testing.T) {
	opt := newDirs(t) // ours: not the job's PROBING_DATA_DIR
	j := startProbingJob(t, opt, 3)
	found, err := agent.Discover(opt)
	if err != nil {
		t.Fatal(err)
	}
	if l := find(found, j.launcher); l.Rank() != -1 || l.Identity == nil || l.Identity.Role != agent.RoleLauncher {
		t.Errorf("the launcher: rank %d identity %+v", l.Rank(), l.Identity)
	}
	for r, pid := range j.ranks {
		sel, err := agent.Select(found, agent.Selection{Ranks: []int{r}})
		if err != nil || len(sel) != 1 || sel[0].PID != pid || sel[0].Identity.WorldSize != 3 || sel[0].OtherDataDir != "" {
			t.Fatalf("rank %d: %v %v", r, sel, err)
		}
	}
	sel, _ := agent.Select(found, agent.Selection{Ranks: []int{1}})
	var p stacks.Process
	// The agent may still be starting its threads: wait for the helper.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		start := time.Now()
		p = *agent.Stacks(context.Background(), sel[0], agent.StackOptions{AgentTimeout: 10 * time.Second})
		if hasFunc(p, "helper_thread_waits") || time.Now().After(deadline) {
			t.Logf("rank 1: %d threads captured in %s", len(p.Threads), time.Since(start).Round(time.Millisecond))
			break
		}
	}
	if p.Source != "probing" || p.Rank != 1 {
		t.Fatalf("source %q rank %d err %q", p.Source, p.Rank, p.Err)
	}
	var main *stacks.Thread
	for i, th := range p.Threads {
		if th.IsMain {
			main = &p.Threads[i]
		}
		if th.Name == "server runtime" {
			t.Errorf("Probing's own worker %d is listed", th.NativeID)
		}
		for _, f := range th.Frames {
			if strings.Contains(f.Function, "probing_python") || strings.Contains(f.Function, "signal_hook_registry") || strings.Contains(f.Function, "backtrace9backtrace") {
				t.Errorf("thread %d keeps Probing's handler frame %s", th.NativeID, f.Function)
			}
		}
	}
	if main == nil || len(main.Frames) == 0 || main.Frames[0].File != j.script || main.Frames[0].Function != "stuck_in_rank_one" {
		t.Fatalf("main thread: %+v", main)
	}
	if !hasFunc(p, "helper_thread_waits") {
		t.Errorf("the helper thread's stack is missing: %+v", p.Threads)
	}
	if p.Err != "" {
		t.Errorf("err %q", p.Err)
	}
	// Every thread of the process but Probing's own workers.
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.PID))
	for _, e := range ents {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", p.PID, e.Name()))
		if strings.TrimSpace(string(comm)) == "server runtime" {
			continue
		}
		tid, _ := strconv.Atoi(e.Name())
		ok := false
		for _, th := range p.Threads {
			ok = ok || (th.NativeID == tid && len(th.Frames) > 0)
		}
		if !ok {
			t.Errorf("thread %d (%s) has no stack", tid, strings.TrimSpace(string(comm)))
		}
	}

	// The tools, as a client calls them: get_stacks by rank, get_config
	// with Probing's key.
	call := func(name string, args map[string]any) any {
		for _, d := range tools.All(&tools.Env{Agents: opt}) {
			if d.Tool.Name == name {
				res, err := d.Call(context.Background(), args)
				if err != nil {
					t.Fatalf("%s %v: %v", name, args, err)
				}
				return res
			}
		}
		t.Fatalf("no tool %s", name)
		return nil
	}
	gs := call("get_stacks", map[string]any{"ranks": "2", "merge": false}).(tools.GetStacksResult)
	if len(gs.Processes) != 1 || gs.Processes[0].PID != j.ranks[2] || gs.Processes[0].Rank != 2 || gs.Sources[fmt.Sprint(j.ranks[2])] != "probing" {
		t.Fatalf("get_stacks ranks 2: %+v", gs)
	}
	for _, th := range gs.Processes[0].Threads {
		if th.IsMain && (len(th.Frames) == 0 || th.Frames[0].Function != "rank_waits_for_peers" || th.Frames[0].File != j.script) {
			t.Errorf("rank 2's main thread: %+v", th)
		}
	}
	cfg := call("get_config", map[string]any{"rank": 0, "key": "server.address"}).(tools.GetConfigResult)
	if v := cfg.Values["server.address"]; v == "" || v == "0.0.0.0:0" {
		t.Errorf("get_config server.address: %+v", cfg)
	}

	rep, err := diagnosis.Run(context.Background(), diagnosis.RunOptions{Scope: &evidence.Node{Agents: opt, Deadline: 60 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("diagnosis: %s: %s", rep.State, rep.Summary)
	var covered []int
	for _, g := range rep.Ranks {
		rs, err := rankset.Parse(g.Ranks)
		if err != nil {
			t.Fatalf("rank group %q: %v", g.Ranks, err)
		}
		covered = append(covered, rs...)
	}
	if rankset.Format(covered) != "0-2" {
		t.Errorf("the diagnosis covers ranks %v, want 0-2 (not the launcher): %+v", covered, rep.Ranks)
	}
	for _, h := range rep.Hypotheses {
		rs, err := rankset.Parse(h.Culprits)
		if err != nil {
			t.Fatalf("culprits %q: %v", h.Culprits, err)
		}
		for _, r := range rs {
			if r < 0 || r > 2 {
				t.Errorf("hypothesis %s blames rank %d", h.Category, r)
			}
		}
		t.Logf("hypothesis %s: ranks %s", h.Category, h.Culprits)
	}
	for _, line := range append(append([]string{rep.Summary}, rep.DataQuality...), rep.StateWhy) {
		if strings.Contains(line, fmt.Sprint(j.launcher)) || strings.Contains(line, "rank -1") {
			t.Errorf("the diagnosis names the launcher: %s", line)
		}
	}
}

// TestRealProbingGILHeld: a rank that holds the GIL (re's backtracking
// never releases it) gets no answer from its Probing agent; what /proc
// shows comes back with the reason.
func TestRealProbingGILHeld(t *testing.T) {
	opt := newDirs(t)
	j := startProbingJob(t, opt, 1, "HOLD_GIL=1")
	found, err := agent.Discover(opt)
	if err != nil {
		t.Fatal(err)
	}
	a := find(found, j.ranks[0])
	// Wait until it spins (its main thread runs without a wait).
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", a.PID)); err == nil && strings.TrimSpace(string(b)) == "0" {
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", a.PID)); err == nil && strings.Contains(string(st), ") R ") {
				break
			}
		}
	}
	time.Sleep(time.Second) // past its one-second start
	p := agent.Stacks(context.Background(), a, agent.StackOptions{AgentTimeout: 3 * time.Second})
	t.Logf("err: %s", p.Err)
	if p.AgentErr != "timeout" || p.Source != "proc" || !strings.Contains(p.Err, "did not answer within 3s") ||
		!strings.Contains(p.Err, "holds the GIL or is wedged") || !strings.Contains(p.Err, "/proc shows the main thread in state R") {
		t.Fatalf("agent err %q source %q err %q", p.AgentErr, p.Source, p.Err)
	}
	if len(p.Threads) < 2 {
		t.Errorf("the /proc threads: %+v", p.Threads)
	}
}

func hasFunc(p stacks.Process, fn string) bool {
	for _, th := range p.Threads {
		for _, f := range th.Frames {
			if f.Function == fn {
				return true
			}
		}
	}
	return false
}
