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

// TestJobStoresOfLaterJobs: a live rank of another job on this node (a
// real agent-enabled process with its own MASTER_ADDR/PORT and run id) is
// found, with its store and run, for the daemon to register in.
func TestJobStoresOfLaterJobs(t *testing.T) {
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
	opt := agent.Options{DataDir: filepath.Join(t.TempDir(), "data"), CtrlRoot: ctrl}
	site := filepath.Join(t.TempDir(), "site")
	if err := agent.ExtractTo(site, "test"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", "import site, sys\nsite.addsitedir(sys.argv[1])\nprint('READY', flush=True)\nsys.stdin.read()\n", site)
	cmd.Env = append(os.Environ(), "PROBING=1", "PROBING_MCP_NODE=0", "PROBING_DATA_DIR="+opt.DataDir, "PROBING_CTRL_ROOT="+ctrl,
		"RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=10.1.2.3", "MASTER_PORT=29511", "TORCHELASTIC_RUN_ID=job-b")
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
	// The identity file is written before the program's first line.
	src := &node.Local{Self: cluster.Node{Host: "n0", Addr: "127.0.0.1:1"}, Agents: opt}
	js, probs := src.JobStores(membership.RunID)
	if len(js) != 1 || js[0] != (node.JobStore{Store: "10.1.2.3:29511", Run: "job-b"}) {
		t.Fatalf("job stores %v, problems %q", js, probs)
	}
}

// TestRegistrarRegistersEachJobOnce: the daemon's own job, then a later
// one that appears, each registered once; a store that fails is retried
// (backing off), not given up, and a loopback-only daemon never
// registers its 127.0.0.1 address in another host's store.
func TestRegistrarRegistersEachJobOnce(t *testing.T) {
	var mu sync.Mutex
	jobs := []node.JobStore{{Store: "127.0.0.1:29500", Run: "a"}}
	calls := map[node.JobStore]int{}
	failB := 2
	reg := &node.Registrar{Self: cluster.Node{Host: "n0", Addr: "127.0.0.1:9781"}, Every: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Jobs: func() []node.JobStore {
			mu.Lock()
			defer mu.Unlock()
			return append([]node.JobStore(nil), jobs...)
		},
		Register: func(_ context.Context, store, run string, _ cluster.Node) error {
			mu.Lock()
			defer mu.Unlock()
			js := node.JobStore{Store: store, Run: run}
			calls[js]++
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
	wait("own job", func() bool { return calls[jobs[0]] == 1 })
	mu.Lock()
	jobs = append(jobs, node.JobStore{Store: "127.0.0.1:29600", Run: "b"}, node.JobStore{Store: "10.0.0.9:29700", Run: "c"})
	mu.Unlock()
	wait("later job, after its store came up", func() bool { return calls[node.JobStore{Store: "127.0.0.1:29600", Run: "b"}] == failB+1 })
	time.Sleep(100 * time.Millisecond) // a few more rounds: nothing registers twice
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if calls[jobs[0]] != 1 || calls[jobs[1]] != failB+1 || calls[jobs[2]] != 0 {
		t.Errorf("calls %v", calls)
	}
}
