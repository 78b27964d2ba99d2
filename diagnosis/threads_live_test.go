package diagnosis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
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
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// liveJob is testdata/threads_job.py running with the agent, one process
// per rank.
type liveJob struct {
	dir, data, ctrl string
	cmds            []*exec.Cmd
	done            []chan struct{}
	logs            []string
}

func startThreadsJob(t *testing.T, scenario string, world int) *liveJob {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3: the job needs it")
	}
	return startThreadsJobWith(t, python, scenario, world)
}

// startThreadsJobWith runs it with python and more environment.
func startThreadsJobWith(t *testing.T, python, scenario string, world int, env ...string) *liveJob {
	t.Helper()
	j := &liveJob{dir: t.TempDir()}
	j.data, j.ctrl = filepath.Join(j.dir, "data"), filepath.Join(j.dir, "ctrl")
	site := filepath.Join(j.dir, "site")
	if err := agent.ExtractTo(site, "test"); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("testdata", "threads_job.py"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	t.Cleanup(j.stop)
	for r := 0; r < world; r++ {
		log := filepath.Join(j.dir, fmt.Sprintf("rank%d.log", r))
		f, err := os.Create(log)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(python, script)
		cmd.Dir = j.dir
		cmd.Stdout, cmd.Stderr = f, f
		cmd.Env = append(os.Environ(), "PYTHONPATH="+site, "PYTHONUNBUFFERED=1", "PROBING=1",
			"PROBING_DATA_DIR="+j.data, "PROBING_CTRL_ROOT="+j.ctrl,
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world), "LOCAL_RANK="+strconv.Itoa(r),
			"LOCAL_WORLD_SIZE="+strconv.Itoa(world), "GROUP_RANK=0", "MASTER_PORT="+strconv.Itoa(port), "SCENARIO="+scenario)
		cmd.Env = append(cmd.Env, env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			f.Close()
			t.Fatal(err)
		}
		f.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		j.cmds, j.done, j.logs = append(j.cmds, cmd), append(j.done, done), append(j.logs, log)
	}
	return j
}

func (j *liveJob) stop() {
	for i, c := range j.cmds {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		<-j.done[i]
	}
	j.cmds = nil
}

// pids says which process each rank of the bundle is, against the job's
// own, for failure messages.
func (j *liveJob) pids(b *evidence.Bundle) string {
	var ours []int
	for _, c := range j.cmds {
		ours = append(ours, c.Process.Pid)
	}
	var parts []string
	for r, e := range b.Ranks {
		parts = append(parts, fmt.Sprintf("rank %d: pid %d alive %v source %s", r, e.PID, e.Alive, e.StackSource))
	}
	return fmt.Sprintf("the job's pids %v; the bundle's %s", ours, strings.Join(parts, "; "))
}

func (j *liveJob) tail() string {
	var b strings.Builder
	for i, l := range j.logs {
		data, _ := os.ReadFile(l)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "--- rank %d\n%s\n", i, strings.Join(lines[max(0, len(lines)-8):], "\n"))
	}
	return b.String()
}

// diagnoseUntil gathers and diagnoses the live job until ok accepts the
// report (the hang settles at its own pace: a loaded machine only takes
// longer), or fails with the last report after a generous deadline. The
// bundle that gave the accepted report is written to
// $PROBING_CAPTURE_DIR/<name>.json when that is set (testdata/captures
// were made so).
func diagnoseUntil(t *testing.T, j *liveJob, name string, ok func(diagnosis.Report) bool) (diagnosis.Report, *evidence.Bundle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e, err := sqlengine.New(sqlengine.Options{DataDir: j.data})
	if err != nil {
		t.Fatal(err)
	}
	opt := evidence.Options{Agents: agent.Options{DataDir: j.data, CtrlRoot: j.ctrl}, SQL: e}
	var rep diagnosis.Report
	var b *evidence.Bundle
	for {
		b = evidence.Gather(ctx, opt)
		rep = diagnosis.Diagnose(diagnosis.FromBundle(b, diagnosis.StateOptions{MinStall: time.Second}))
		if ok(rep) {
			break
		}
		if ctx.Err() != nil {
			js, _ := json.MarshalIndent(rep, "", " ")
			t.Fatalf("no expected verdict in time; last:\n%s\nproblems %v\nranks %s\n%s", js, b.Problems, j.pids(b), j.tail())
		}
		time.Sleep(300 * time.Millisecond)
	}
	if dir := os.Getenv("PROBING_CAPTURE_DIR"); dir != "" {
		js, err := json.MarshalIndent(b, "", " ")
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+".json"), js, 0o644)
		}
		if err != nil {
			t.Errorf("capture: %v", err)
		}
	}
	return rep, b
}

func first(rep diagnosis.Report) diagnosis.Hypothesis {
	if len(rep.Hypotheses) == 0 {
		return diagnosis.Hypothesis{}
	}
	return rep.Hypotheses[0]
}

func evidenceText(h diagnosis.Hypothesis) string {
	var b strings.Builder
	for _, e := range h.Evidence {
		b.WriteString(e.Text)
		b.WriteString("\n")
	}
	return b.String()
}

// settled: the job is stalled or dead and its first hypothesis is no
// longer the generic one a hang starts as (the culprit's threads reach
// their final state a moment after its peers stop).
func settled(rep diagnosis.Report, cat string) bool {
	return (rep.State == diagnosis.StateStalled || rep.State == diagnosis.StateDead) && first(rep).Category == cat
}

// TestLiveThreadCategories runs each thread-level hang for real and
// checks the verdict the evidence service's bundle gives: category,
// culprit, where, and the words the evidence must say.
func TestLiveThreadCategories(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Python jobs")
	}
	for _, c := range []struct {
		scenario, category string
		world              int
		culprit, waiting   string
		function           string
		confidence         string
		says               []string
	}{
		{"deadlock", diagnosis.CatDeadlock, 2, "1", "0", "update_stats", diagnosis.High, []string{"deadlock", "lock", "log_lock", "stats_lock", `held by thread ⟦log-flusher⟧`, `held by thread ⟦MainThread⟧`}},
		{"deadlock_rlock", diagnosis.CatDeadlock, 2, "1", "0", "update_stats", diagnosis.High, []string{"deadlock", "wait for each other's locks", "held by thread"}},
		{"gil_held", diagnosis.CatGILHeld, 2, "1", "0", "native_wait", diagnosis.High, []string{"did not answer", "faulthandler", "GIL"}},
		{"gil_held_thread", diagnosis.CatGILHeld, 2, "1", "0", "native_wait", diagnosis.Medium, []string{"did not answer", "likely holder", "native_wait"}},
		{"main_thread_dead", diagnosis.CatMainThreadDead, 2, "1", "0", "load_batch", diagnosis.High, []string{"ValueError: corrupt record in shard 7", `⟦heartbeat⟧`, "alive"}},
		{"mismatch", diagnosis.CatMismatch, 3, "2", "0-1", "broadcast_params", diagnosis.High, []string{"rank 2 called broadcast", "ranks 0-1 called all_reduce"}},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			j := startThreadsJob(t, c.scenario, c.world)
			// Settled: the peers are recorded inside their wait (a rank's
			// in-flight row reaches its ring within its flush interval).
			rep, b := diagnoseUntil(t, j, c.scenario, func(r diagnosis.Report) bool {
				return settled(r, c.category) && first(r).Collateral == c.waiting
			})
			h := first(rep)
			text := evidenceText(h)
			if h.Culprits != c.culprit || h.Collateral != c.waiting || h.Confidence != c.confidence || h.Where == nil || h.Where.Function != c.function {
				js, _ := json.MarshalIndent(h, "", " ")
				t.Errorf("%s\n%s\n%s", rep.Summary, js, j.pids(b))
			}
			for _, w := range c.says {
				if !strings.Contains(text, w) {
					t.Errorf("evidence does not say %q:\n%s", w, text)
				}
			}
			if c.world != len(b.Ranks) {
				t.Errorf("%d ranks in the bundle", len(b.Ranks))
			}
			t.Log(rep.Summary)
		})
	}
}

// TestLiveDeadRankOrder: the culprit raises and dies; the others die of
// it, later. Post-mortem, the first to die is the culprit, the others
// collateral, in order, with the exception's text.
func TestLiveDeadRankOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Python jobs")
	}
	j := startThreadsJob(t, "dead_rank", 3)
	for i, d := range j.done {
		select {
		case <-d:
		case <-time.After(2 * time.Minute):
			t.Fatalf("rank %d did not die\n%s", i, j.tail())
		}
	}
	rep, _ := diagnoseUntil(t, j, "dead_rank", func(r diagnosis.Report) bool { return r.State == diagnosis.StateDead })
	h := first(rep)
	text := evidenceText(h)
	if h.Category != diagnosis.CatDeadRank || h.Culprits != "2" || h.Collateral != "0-1" || h.Confidence != diagnosis.High ||
		h.Where == nil || h.Where.Function != "train_step" {
		js, _ := json.MarshalIndent(rep, "", " ")
		t.Errorf("%s", js)
	}
	for _, w := range []string{"rank 2 died first", "RuntimeError: simulated device failure at step 3", "then rank", "ConnectionError"} {
		if !strings.Contains(text, w) {
			t.Errorf("evidence does not say %q:\n%s", w, text)
		}
	}
	t.Log(rep.Summary)
}

// TestLiveMainSamples: evidence.MainSamples asks every live rank's agent
// again: each rank gets its main thread, with frames and /proc's state, in
// every round.
func TestLiveMainSamples(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Python jobs")
	}
	j := startThreadsJob(t, "deadlock", 2)
	opt := evidence.Options{Agents: agent.Options{DataDir: j.data, CtrlRoot: j.ctrl}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for {
		got := evidence.MainSamples(ctx, opt, 2, 20*time.Millisecond)
		if len(got) == 2 && len(got[0]) == 2 && len(got[1]) == 2 {
			for r, ts := range got {
				for _, th := range ts {
					if !th.IsMain || len(th.Frames) == 0 || th.State == "" {
						t.Fatalf("rank %d: %+v", r, th)
					}
				}
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("no two samples of both ranks in time: %v\n%s", got, j.tail())
		}
		time.Sleep(100 * time.Millisecond) // the agents are still starting
	}
}
