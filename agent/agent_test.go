package agent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// python is the interpreter the agent tests run (PROBING_TEST_PYTHON, else
// python3); the agent is stdlib only, so any 3.9+ works.
func python(t testing.TB) string {
	p := os.Getenv("PROBING_TEST_PYTHON")
	if p == "" {
		p = "python3"
	}
	if _, err := exec.LookPath(p); err != nil {
		t.Skipf("no %s on PATH: the agent tests need a Python 3.9+ interpreter (set PROBING_TEST_PYTHON)", p)
	}
	return p
}

// proc is a Python process with our agent active, in its own data dir and
// control root.
type proc struct {
	cmd  *exec.Cmd
	opt  agent.Options
	out  *bufio.Scanner
	done chan struct{}
}

// startAgent runs code in a fresh Python process whose first act is to
// activate the agent exactly as the installed .pth would. It waits until
// the agent has registered and code printed "READY".
func startAgent(t testing.TB, code string, env ...string) *proc {
	t.Helper()
	return startAgentIn(t, newDirs(t), code, env...)
}

// newDirs makes a data dir and a control root for agents to share.
func newDirs(t testing.TB) agent.Options {
	// The control root lives under /tmp: a Unix socket path must stay under
	// 108 bytes, which t.TempDir() paths can exceed.
	ctrl, err := os.MkdirTemp("/tmp", "pmcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ctrl) })
	return agent.Options{DataDir: filepath.Join(t.TempDir(), "data"), CtrlRoot: ctrl}
}

func startAgentIn(t testing.TB, opt agent.Options, code string, env ...string) *proc {
	t.Helper()
	site := filepath.Join(t.TempDir(), "site")
	if err := agent.ExtractTo(site, "test"); err != nil {
		t.Fatal(err)
	}
	ctrl := opt.CtrlRoot
	p := &proc{opt: opt, done: make(chan struct{})}
	script := "import site, sys\nsite.addsitedir(sys.argv[1])\n" + code
	p.cmd = exec.Command(python(t), "-c", script, site)
	p.cmd.Env = append(os.Environ(), "PROBING=1", "PROBING_MCP_NODE=0", "PROBING_DATA_DIR="+p.opt.DataDir, "PROBING_CTRL_ROOT="+ctrl, "PYTHONUNBUFFERED=1")
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stderr = os.Stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	p.out = bufio.NewScanner(stdout)
	p.waitLine(t, "READY")
	// The agent registers asynchronously: wait for its socket to answer.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if a := p.agent(t); a != nil && a.Alive && a.Identity != nil {
			c, err := agent.NewClient(a)
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err = c.Do(ctx, "GET", "/health", nil, "")
				cancel()
				if err == nil {
					return p
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("agent of pid %d did not come up", p.cmd.Process.Pid)
	return nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// waitLine reads the process's stdout up to a line equal to want.
func (p *proc) waitLine(t testing.TB, want string) {
	t.Helper()
	found := make(chan bool, 1)
	go func() {
		for p.out.Scan() {
			if strings.TrimSpace(p.out.Text()) == want {
				found <- true
				return
			}
		}
		found <- false
	}()
	select {
	case ok := <-found:
		if !ok {
			t.Fatalf("the Python process exited before printing %s", want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the Python process did not print %s within 30 s", want)
	}
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// agent is this process as Discover sees it, nil if absent.
func (p *proc) agent(t testing.TB) *agent.Agent {
	t.Helper()
	all, err := agent.Discover(p.opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range all {
		if a.PID == p.pid() {
			return a
		}
	}
	return nil
}

const idle = "print('READY', flush=True)\nimport time\nwhile True: time.sleep(1)\n"

func TestDiscoverIdentityAndConfigRoundTrip(t *testing.T) {
	p := startAgent(t, idle, "RANK=3", "WORLD_SIZE=8", "LOCAL_RANK=3", "PROBING_TP_RANK=1", "PROBING_TP_SIZE=2")
	a := p.agent(t)
	if a.Kind != agent.KindOurs || a.Rank() != 3 || a.Identity.WorldSize != 8 || a.Identity.LocalRank != 3 || !strings.Contains(a.Identity.Role, "tp=1") {
		t.Fatalf("agent %+v identity %+v", a, a.Identity)
	}
	ctx := context.Background()
	all, err := agent.Config(ctx, a, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := all["probing.comm.collectives"]; !ok {
		t.Errorf("config listing lacks probing.comm.collectives: %v", all)
	}
	r, err := agent.SetConfig(ctx, a, "sample_rate", "0.25")
	if err != nil {
		t.Fatal(err)
	}
	if r.Key != "probing.sample_rate" || r.Value != "0.25" {
		t.Fatalf("set: %+v", r)
	}
	got, err := agent.Config(ctx, a, "probing.sample_rate")
	if err != nil || got["probing.sample_rate"] != "0.25" {
		t.Fatalf("get after set: %v %v", got, err)
	}
	_, err = agent.SetConfig(ctx, a, "probing.sample_rate", "lots")
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("an invalid value must be refused with 400, got %v", err)
	}
}

func TestEvalNeedsPermissionAndTimesOut(t *testing.T) {
	ctx := context.Background()
	p := startAgent(t, idle, "PROBING_ALLOW_EVAL=0")
	_, err := agent.Eval(ctx, p.agent(t), "1+1", 5*time.Second)
	var ae *agent.Error
	if !errors.As(err, &ae) || ae.Kind != "denied" {
		t.Fatalf("eval in a job that opted out (PROBING_ALLOW_EVAL=0) must be refused, got %v", err)
	}
	p2 := startAgent(t, "secret = 41\n"+idle, "PROBING_ALLOW_EVAL=1")
	a := p2.agent(t)
	r, err := agent.Eval(ctx, a, "print(secret + 1)", 5*time.Second)
	if err != nil || r.Status != "ok" || strings.TrimSpace(r.Output) != "42" {
		t.Fatalf("eval: %+v %v", r, err)
	}
	r, err = agent.Eval(ctx, a, "1/0", 5*time.Second)
	if err != nil || r.Status != "error" || !strings.Contains(strings.Join(r.Traceback, ""), "ZeroDivisionError") {
		t.Fatalf("eval error: %+v %v", r, err)
	}
	start := time.Now()
	r, err = agent.Eval(ctx, a, "import time\nwhile True: time.sleep(0.1)", time.Second)
	if err != nil || r.Status != "timeout" {
		t.Fatalf("eval that never returns: %+v %v", r, err)
	}
	if time.Since(start) > 4*time.Second {
		t.Fatalf("the timeout took %s", time.Since(start))
	}
}

func TestKilledMidCallAndStaleSocket(t *testing.T) {
	ctx := context.Background()
	p := startAgent(t, idle, "PROBING_ALLOW_EVAL=1")
	a := p.agent(t)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = syscall.Kill(p.pid(), syscall.SIGKILL)
	}()
	_, err := agent.Eval(ctx, a, "import time; time.sleep(10)", 8*time.Second)
	var ae *agent.Error
	if !errors.As(err, &ae) || (ae.Kind != "dead" && ae.Kind != "refused") {
		t.Fatalf("a process killed mid-call must give a dead/refused error, got %v", err)
	}
	<-p.done
	// The socket file stays behind: it must be reported stale, and calls
	// on it must fail fast.
	a = p.agent(t)
	if a == nil || a.Alive || !a.Stale {
		t.Fatalf("dead agent: %+v", a)
	}
	start := time.Now()
	_, err = agent.Config(ctx, a, "probing.loglevel")
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("a stale socket must fail fast: %v after %s", err, time.Since(start))
	}
	if _, err := agent.Select([]*agent.Agent{a}, agent.Selection{}); err != nil {
		t.Fatal(err)
	}
}

func TestStacksWhenTheMainThreadHoldsTheGIL(t *testing.T) {
	// ctypes.PyDLL does not release the GIL: pause() blocks forever with
	// it held, so no Python thread (the agent's server included) can run.
	// The process waits for a go file (the agent must first answer the
	// start-up health check), then takes the GIL into pause().
	goFile := filepath.Join(t.TempDir(), "go")
	code := "import ctypes, os, threading, time\n" +
		"def side_worker():\n    while True: time.sleep(0.05)\n" +
		"threading.Thread(target=side_worker, name='side-worker', daemon=True).start()\n" +
		"def hold_the_gil_forever():\n    print('READY', flush=True)\n" +
		"    while not os.path.exists(os.environ['GO_FILE']): time.sleep(0.02)\n" +
		"    libc = ctypes.PyDLL(None)\n    print('PAUSING', flush=True)\n    while True: libc.pause()\n" +
		"hold_the_gil_forever()\n"
	p := startAgent(t, code, "GO_FILE="+goFile)
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p.waitLine(t, "PAUSING")
	// A main thread asleep after PAUSING may still be waiting for the GIL
	// back; only once it sleeps in pause(2) (or the call a libc without it
	// uses) is the GIL held for good.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		pr, err := procfacts.ReadProcess(p.pid())
		if err != nil {
			t.Fatal(err)
		}
		if th := pr.Threads[0]; th.State == "S" && strings.Contains(" pause ppoll rt_sigsuspend ", " "+procfacts.SyscallName(th.Syscall)+" ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the main thread never slept in pause(): %+v", pr.Threads[0])
		}
	}
	a := p.agent(t)
	ctx := context.Background()
	if _, err := agent.Config(ctx, a, "probing.loglevel"); err == nil {
		t.Log("note: the agent still answered; the GIL was not held yet")
	}
	fhBefore, timeoutsBefore := stackSource(t, "faulthandler"), agentCalls(t, "timeout")
	st := agent.Stacks(ctx, a, agent.StackOptions{AgentTimeout: 700 * time.Millisecond})
	if st.Source != "faulthandler" {
		t.Fatalf("source %q (err %s): want the faulthandler fallback", st.Source, st.Err)
	}
	// The metrics say which source answered, and that the agent did not.
	if got := stackSource(t, "faulthandler"); got < fhBefore+1 {
		t.Errorf("stack_captures_total{source=faulthandler}: %v -> %v, want one more", fhBefore, got)
	}
	if got := agentCalls(t, "timeout"); got < timeoutsBefore+1 {
		t.Errorf("agent_calls_total{result=timeout}: %v -> %v, want the agent's timeout counted", timeoutsBefore, got)
	}
	var main string
	for _, th := range st.Threads {
		for _, f := range th.Frames {
			if th.IsMain || f.Function == "hold_the_gil_forever" {
				main += f.Function + " "
			}
		}
	}
	if !strings.Contains(main, "hold_the_gil_forever") {
		t.Fatalf("main thread frames %q lack hold_the_gil_forever; threads %+v", main, st.Threads)
	}
	for _, th := range st.Threads {
		if th.IsMain && (th.State == "" || th.NativeID != p.pid()) {
			t.Errorf("main thread lacks its /proc state: %+v", th)
		}
	}
}

func TestStacksFromTheAgent(t *testing.T) {
	code := "import threading, time\n" +
		"def loader_loop():\n    while True: time.sleep(0.05)\n" +
		"threading.Thread(target=loader_loop, name='loader-7', daemon=True).start()\n" +
		"def train_step():\n    print('READY', flush=True)\n    while True: time.sleep(0.05)\n" +
		"train_step()\n"
	p := startAgent(t, code)
	st := agent.Stacks(context.Background(), p.agent(t), agent.StackOptions{})
	if st.Source != "agent" || st.Err != "" {
		t.Fatalf("source %q err %q", st.Source, st.Err)
	}
	found := map[string]bool{}
	for _, th := range st.Threads {
		for _, f := range th.Frames {
			found[th.Name+":"+f.Function] = true
		}
	}
	if !found["MainThread:train_step"] || !found["loader-7:loader_loop"] {
		t.Fatalf("frames %v", found)
	}
}

func TestSelectNamesWhatIsMissing(t *testing.T) {
	as := []*agent.Agent{{PID: 10, Kind: agent.KindOurs, Alive: true, Identity: &agent.Identity{Rank: 0}},
		{PID: 11, Kind: agent.KindOurs, Alive: true, Identity: &agent.Identity{Rank: 1}}}
	_, err := agent.Select(as, agent.Selection{Ranks: []int{1, 5, 6}})
	if err == nil || !strings.Contains(err.Error(), "rank 5-6") || !strings.Contains(err.Error(), "ranks here: 0-1") {
		t.Fatalf("err %v", err)
	}
	_, err = agent.Select(as, agent.Selection{PIDs: []int{99}})
	if err == nil || !strings.Contains(err.Error(), "pid [99]") {
		t.Fatalf("err %v", err)
	}
	got, err := agent.Select(as, agent.Selection{Ranks: []int{1}, PIDs: []int{11}})
	if err != nil || len(got) != 1 || got[0].PID != 11 {
		t.Fatalf("%v %v", got, err)
	}
	// A huge argument list is not echoed back whole (100k pids were 589 KB).
	var many, ranks []int
	for i := 0; i < 100000; i++ {
		many = append(many, 1000000+i)
		ranks = append(ranks, 10+2*i)
	}
	_, err = agent.Select(as, agent.Selection{PIDs: many, Ranks: ranks})
	if err == nil || len(err.Error()) > 1000 || !strings.Contains(err.Error(), "and 99990 more") || !strings.Contains(err.Error(), "(100000 ranks)") {
		t.Fatalf("%d bytes: %.300v", len(err.Error()), err)
	}
	_ = fmt.Sprint
}

// TestOtherDataDirIsAnotherJob: two agents share the control root but
// write to different data dirs, as two jobs on one node with their own
// PROBING_DATA_DIR do. Each side's default fan-out holds only its own
// process; the other is listed as OtherDataDir and still reachable by pid,
// never by rank (both are rank 0).
func TestOtherDataDirIsAnotherJob(t *testing.T) {
	ours := newDirs(t)
	theirs := ours
	theirs.DataDir = filepath.Join(t.TempDir(), "other-job")
	a := startAgentIn(t, ours, idle, "RANK=0", "WORLD_SIZE=1")
	b := startAgentIn(t, theirs, idle, "RANK=0", "WORLD_SIZE=1")

	all, err := agent.Discover(ours)
	if err != nil {
		t.Fatal(err)
	}
	var other *agent.Agent
	for _, x := range all {
		switch x.PID {
		case a.pid():
			if x.OtherDataDir != "" {
				t.Errorf("our own agent is marked as another data dir's: %+v", x)
			}
		case b.pid():
			other = x
		}
	}
	if other == nil || !other.Alive || other.OtherDataDir != theirs.DataDir {
		t.Fatalf("the other job's agent: %+v (want alive, other_data_dir %s)", other, theirs.DataDir)
	}
	def, err := agent.Select(all, agent.Selection{})
	if err != nil || len(def) != 1 || def[0].PID != a.pid() {
		t.Fatalf("default selection %v, %v: want only pid %d", def, err, a.pid())
	}
	byRank, err := agent.Select(all, agent.Selection{Ranks: []int{0}})
	if err != nil || len(byRank) != 1 || byRank[0].PID != a.pid() {
		t.Fatalf("rank 0 selection %v, %v: want only pid %d", byRank, err, a.pid())
	}
	byPID, err := agent.Select(all, agent.Selection{PIDs: []int{b.pid()}})
	if err != nil || len(byPID) != 1 || byPID[0].PID != b.pid() {
		t.Fatalf("pid selection %v, %v", byPID, err)
	}
	// Seen from the other side, the roles swap.
	all, err = agent.Discover(theirs)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range all {
		if x.PID == a.pid() && x.OtherDataDir != ours.DataDir {
			t.Errorf("from the other data dir, our agent: %+v", x)
		}
		if x.PID == b.pid() && x.OtherDataDir != "" {
			t.Errorf("from its own data dir, the other agent: %+v", x)
		}
	}
}

// TestOriginalProbingAgent: with the original Probing agent installed
// (development only), our side lists it, reads its stacks and its config.
func TestOriginalProbingAgent(t *testing.T) {
	py := probingPython(t)
	cmd := exec.Command(py, "-c", "import time\ndef waiting_in_probing_test():\n    time.sleep(60)\nwaiting_in_probing_test()\n")
	// Its own data dir: with the default one, this process would also be
	// "another job" to every other test's server running on this machine.
	opt := agent.Options{DataDir: t.TempDir(), CtrlRoot: t.TempDir()}
	cmd.Env = append(os.Environ(), "PROBING=1", "PROBING_DATA_DIR="+opt.DataDir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var a *agent.Agent
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && a == nil; time.Sleep(200 * time.Millisecond) {
		all, err := agent.Discover(opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range all {
			if x.PID == cmd.Process.Pid {
				a = x
			}
		}
	}
	if a == nil || a.Kind != agent.KindProbing || !a.Alive || a.Socket != fmt.Sprintf("@probing-%d", cmd.Process.Pid) {
		t.Fatalf("the original agent was not discovered: %+v", a)
	}
	time.Sleep(time.Second)
	st := agent.Stacks(context.Background(), a, agent.StackOptions{AgentTimeout: 5 * time.Second})
	var funcs []string
	for _, th := range st.Threads {
		for _, f := range th.Frames {
			funcs = append(funcs, f.Function)
		}
	}
	if st.Source != "probing" || !strings.Contains(strings.Join(funcs, " "), "waiting_in_probing_test") {
		t.Fatalf("stacks from the original agent: source %q err %q frames %v", st.Source, st.Err, funcs)
	}
	cfg, err := agent.Config(context.Background(), a, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg["probing.server.timeout"] == "" || (cfg["probing.server.auth_token"] != "" && cfg["probing.server.auth_token"] != "<redacted>") {
		t.Fatalf("config from the original agent: %v", cfg)
	}
}

// TestBadAgents: a socket that answers garbage, one that never answers and
// one that hangs up must each give a clear, classified error in bounded
// time, never a hang or a panic.
func TestBadAgents(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "pmcpbad")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	serve := func(name string, handle func(c net.Conn)) *agent.Agent {
		path := filepath.Join(dir, name)
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go handle(c)
			}
		}()
		return &agent.Agent{PID: os.Getpid(), Kind: agent.KindOurs, Socket: path, Alive: true, Identity: &agent.Identity{Rank: 0}}
	}
	garbage := serve("garbage.sock", func(c net.Conn) {
		defer c.Close()
		bufio.NewReader(c).ReadString('\n')
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{\"threads"))
	})
	silent := serve("silent.sock", func(c net.Conn) { time.Sleep(10 * time.Second); c.Close() })
	// Slow once (a loaded node), then answers: the timeout is retried
	// before it counts. The fake agent is this test process, whose main
	// thread's state is the Go runtime's: the retry is told it is asleep;
	// on a CPU, no retry.
	undo := agent.SetMainOnCPU(func([]stacks.Thread) bool { return false })
	defer undo()
	var calls atomic.Int32
	slowOnce := serve("slow.sock", func(c net.Conn) {
		defer c.Close()
		bufio.NewReader(c).ReadString('\n')
		if calls.Add(1) == 1 {
			time.Sleep(3 * time.Second)
			return
		}
		body := `{"pid": 1, "threads": [{"id": 1, "name": "MainThread", "is_main": true, "frames": [{"file": "/job/train.py", "line": 7, "function": "main"}]}]}`
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	})
	st := agent.Stacks(context.Background(), slowOnce, agent.StackOptions{AgentTimeout: 300 * time.Millisecond})
	if st.Source != "agent" || len(st.Threads) != 1 || !strings.Contains(st.Err, "answered on a second try") || calls.Load() != 2 {
		t.Errorf("slow once: source %q, %d threads, err %q, %d calls", st.Source, len(st.Threads), st.Err, calls.Load())
	}
	agent.SetMainOnCPU(func([]stacks.Thread) bool { return true })
	calls.Store(0)
	if st := agent.Stacks(context.Background(), slowOnce, agent.StackOptions{AgentTimeout: 300 * time.Millisecond}); st.Source == "agent" || calls.Load() != 1 {
		t.Errorf("main thread on a CPU (a GIL held in a C loop): retried anyway: source %q, %d calls", st.Source, calls.Load())
	}
	hangup := serve("hangup.sock", func(c net.Conn) { c.Close() })
	ctx := context.Background()
	for _, tc := range []struct {
		a    *agent.Agent
		kind string
	}{{garbage, "malformed"}, {silent, "timeout"}, {hangup, "dead"}} {
		start := time.Now()
		_, err := agent.Config(ctx, tc.a, "")
		if tc.kind == "malformed" {
			// Config of a garbage reply: a JSON error.
			var ae *agent.Error
			if !errors.As(err, &ae) || ae.Kind != "malformed" {
				t.Errorf("%s: %v", tc.a.Socket, err)
			}
		}
		st := agent.Stacks(ctx, tc.a, agent.StackOptions{AgentTimeout: 500 * time.Millisecond})
		if st.Err == "" || time.Since(start) > 8*time.Second {
			t.Errorf("%s: stacks err %q after %s", tc.a.Socket, st.Err, time.Since(start))
		}
		t.Logf("%s: %s", filepath.Base(tc.a.Socket), st.Err)
	}
}
