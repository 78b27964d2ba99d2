package node_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/membership"
	"github.com/probing-mcp/probing-mcp/cluster/node"
)

// startRank starts a real agent-enabled process with env added to ours
// (PROBING_DATA_DIR and PROBING_CTRL_ROOT: the test's own) and waits for
// its first line: the identity file is written before it.
func startRank(t *testing.T, py, site string, opt agent.Options, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(py, "-c", "import site, sys\nsite.addsitedir(sys.argv[1])\nprint('READY', flush=True)\nsys.stdin.read()\n", site)
	cmd.Env = append(append(os.Environ(), "PROBING=1", "PROBING_MCP_NODE=0", "PROBING_DATA_DIR="+opt.DataDir, "PROBING_CTRL_ROOT="+opt.CtrlRoot,
		"PROBING_NODE_HOST=", "GROUP_RANK=", "SLURM_NODEID="), env...)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "READY" {
		t.Fatalf("child said %q", line)
	}
	return cmd
}

// agentSetup is a test's own data dir and control root (a short path:
// socket paths are bounded), and the agent extracted for its children:
// discovery sees only the processes the test starts.
func agentSetup(t *testing.T) (string, string, agent.Options) {
	py := os.Getenv("PROBING_TEST_PYTHON")
	if py == "" {
		py = "python3"
	}
	if _, err := exec.LookPath(py); err != nil {
		t.Skipf("no %s: a real agent-enabled process cannot run here (set PROBING_TEST_PYTHON)", py)
	}
	ctrl, err := os.MkdirTemp("/tmp", "pmcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ctrl) })
	// No machine-wide /proc/net/unix: another job's original Probing
	// agents (@probing-<pid>) would be found there.
	noProbing := filepath.Join(t.TempDir(), "unix")
	if err := os.WriteFile(noProbing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	opt := agent.Options{DataDir: filepath.Join(t.TempDir(), "data"), CtrlRoot: ctrl, ProcNetUnix: noProbing}
	site := filepath.Join(t.TempDir(), "site")
	if err := agent.ExtractTo(site, "test"); err != nil {
		t.Fatal(err)
	}
	return py, site, opt
}

// TestJobStoresOfLaterJobs: the live ranks of other jobs on this node
// (real agent-enabled processes with their own MASTER_ADDR/PORT and run
// ids) are found, each job once, with its store and run and the node name
// and node rank its ranks set (PROBING_NODE_HOST, GROUP_RANK), not the
// daemon's; a job that sets none is named by the hostname, and a name or
// node rank that is not one is said, not used. The node's stacks name
// each process's node as its job does.
func TestJobStoresOfLaterJobs(t *testing.T) {
	py, site, opt := agentSetup(t)
	job := func(port, run string) []string {
		return []string{"WORLD_SIZE=2", "MASTER_ADDR=10.1.2.3", "MASTER_PORT=" + port, "TORCHELASTIC_RUN_ID=" + run}
	}
	b0 := startRank(t, py, site, opt, append(job("29511", "job-b"), "RANK=0", "LOCAL_RANK=0", "PROBING_NODE_HOST= node-x ", "GROUP_RANK=3")...)
	startRank(t, py, site, opt, append(job("29511", "job-b"), "RANK=1", "LOCAL_RANK=1", "PROBING_NODE_HOST=node-x", "GROUP_RANK=3")...)
	c0 := startRank(t, py, site, opt, append(job("29522", "job-c"), "RANK=0", "LOCAL_RANK=0")...)
	startRank(t, py, site, opt, append(job("29533", "job-d"), "RANK=0", "LOCAL_RANK=0", "PROBING_NODE_HOST=evil host\x1b[2J", "GROUP_RANK=-1")...)
	host, _ := os.Hostname()
	src := &node.Local{Self: cluster.Node{Host: "daemon-name", NodeRank: 7, Addr: "127.0.0.1:1"}, Agents: opt}
	js, probs := src.JobStores(membership.RunID)
	want := []node.JobStore{
		{Store: "10.1.2.3:29511", Run: "job-b", Host: "node-x", NodeRank: 3},
		{Store: "10.1.2.3:29522", Run: "job-c", Host: host, NodeRank: -1},
		{Store: "10.1.2.3:29533", Run: "job-d", Host: host, NodeRank: -1},
	}
	if len(js) != len(want) {
		t.Fatalf("job stores %v, problems %q", js, probs)
	}
	for i := range want {
		if js[i] != want[i] {
			t.Errorf("job %d: %+v, want %+v (problems %q)", i, js[i], want[i], probs)
		}
	}
	joined := strings.Join(probs, "\n")
	if len(probs) != 2 || !strings.Contains(joined, "PROBING_NODE_HOST") || !strings.Contains(joined, "GROUP_RANK") || strings.Contains(joined, "\x1b") {
		t.Errorf("problems %q: want the bad name and node rank of job-d, escaped", probs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := src.Stacks(ctx, node.StacksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[int]string{}
	for _, p := range rep.Processes {
		hosts[p.PID] = p.Host
	}
	if hosts[b0.Process.Pid] != "node-x" || hosts[c0.Process.Pid] != host || len(hosts) != 4 {
		t.Errorf("stacks' hosts by pid %v: want %d on node-x, %d on %s", hosts, b0.Process.Pid, c0.Process.Pid, host)
	}
}

// TestRegistrarRegistersEachJobOnce: the daemon's own job, then a later
// one that appears, each registered once, under the name and node rank
// the job gives the node (the daemon's own for its own job, listed first
// and again by its ranks); a store that fails is retried (backing off),
// not given up, and a loopback-only daemon never registers its 127.0.0.1
// address in another host's store.
func TestRegistrarRegistersEachJobOnce(t *testing.T) {
	var mu sync.Mutex
	jobs := []node.JobStore{{Store: "127.0.0.1:29500", Run: "a"}, {Store: "127.0.0.1:29500", Run: "a", Host: "other", NodeRank: 4}}
	calls := map[node.JobStore]int{}
	as := map[node.JobStore]cluster.Node{}
	failB := 2
	rounds := 0 // calls of Jobs: one per round
	self := cluster.Node{Host: "n0", Addr: "127.0.0.1:9781", NodeRank: 5, Kind: cluster.KindDaemon}
	reg := &node.Registrar{Self: self, Every: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Jobs: func() []node.JobStore {
			mu.Lock()
			defer mu.Unlock()
			rounds++
			return append([]node.JobStore(nil), jobs...)
		},
		Register: func(_ context.Context, store, run string, n cluster.Node) error {
			mu.Lock()
			defer mu.Unlock()
			js := node.JobStore{Store: store, Run: run}
			calls[js]++
			as[js] = n
			if js.Run == "b" && calls[js] <= failB {
				return io.ErrUnexpectedEOF // its store is not up yet
			}
			return nil
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { reg.Run(ctx); close(done) }()
	wait := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second) // a hang guard: the wait is on the calls
		for time.Now().Before(deadline) {
			mu.Lock()
			v := ok()
			mu.Unlock()
			if v {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("%s: calls %v", what, calls)
	}
	a, b, c := node.JobStore{Store: "127.0.0.1:29500", Run: "a"}, node.JobStore{Store: "127.0.0.1:29600", Run: "b"}, node.JobStore{Store: "10.0.0.9:29700", Run: "c"}
	wait("own job", func() bool { return calls[a] == 1 })
	mu.Lock()
	jobs = append(jobs, node.JobStore{Store: b.Store, Run: b.Run, Host: "node-b", NodeRank: 1}, node.JobStore{Store: c.Store, Run: c.Run, Host: "node-c", NodeRank: 2})
	mu.Unlock()
	wait("later job, after its store came up", func() bool { return calls[b] == failB+1 })
	mu.Lock()
	after := rounds
	mu.Unlock()
	wait("more rounds", func() bool { return rounds >= after+5 }) // in which nothing registers twice
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if calls[a] != 1 || calls[b] != failB+1 || calls[c] != 0 {
		t.Errorf("calls %v", calls)
	}
	if as[a] != self {
		t.Errorf("own job registered %+v, want the daemon's own %+v", as[a], self)
	}
	wantB := self
	wantB.Host, wantB.NodeRank = "node-b", 1
	if as[b] != wantB {
		t.Errorf("later job registered %+v, want %+v: the name and node rank its ranks set, the daemon's address", as[b], wantB)
	}
}
