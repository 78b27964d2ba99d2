package agent_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
)

// fakeTorch plays ProcessGroupNCCL's side of the dump pipe (torch's C++,
// which needs a GPU): it creates <pipe prefix><rank>.pipe, and for every
// byte read from it writes the dump to <dump prefix><rank>. It also leaves
// the identity an agent would, with no control socket, like a process
// whose agent cannot answer.
const fakeTorch = `
import json, os, shutil, sys
data, dump_src, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = os.path.join(data, str(os.getpid()))
os.makedirs(d)
with open("/proc/self/stat") as f:
    start = int(f.read().rsplit(")", 1)[1].split()[19])
pipe_prefix, dump_prefix = os.path.join(d, "fr_pipe_"), os.path.join(d, "fr_dump_rank_")
os.mkfifo(pipe_prefix + "%d.pipe" % rank)
with open(os.path.join(d, ".identity.json"), "w") as f:
    json.dump({"agent": "probing-mcp", "pid": os.getpid(), "start_time": start, "rank": rank, "world_size": 4,
               "local_rank": rank, "node_rank": 0, "fr_pipe_prefix": pipe_prefix, "fr_dump_prefix": dump_prefix}, f)
print("READY", flush=True)
while True:
    with open(pipe_prefix + "%d.pipe" % rank, "rb") as p:
        if p.read(1):
            shutil.copyfile(dump_src, dump_prefix + "%d.tmp" % rank)
            os.rename(dump_prefix + "%d.tmp" % rank, dump_prefix + "%d" % rank)
`

func TestFlightRecorderThroughTorchsPipe(t *testing.T) {
	py := python(t)
	data := t.TempDir()
	src, _ := filepath.Abs(filepath.Join("..", "testdata", "fr", "real", "missing_rank", "nccl_trace_rank_2"))
	cmd := exec.Command(py, "-c", fakeTorch, data, src, "2")
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if sc := bufio.NewScanner(out); !sc.Scan() || sc.Text() != "READY" {
		t.Fatal("fake torch did not start")
	}
	found, err := agent.Discover(agent.Options{DataDir: data, CtrlRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// Agents of other tests running at the same time are found too (their
	// sockets are node-global) but belong to other data dirs: the default
	// selection leaves them out.
	all, err := agent.Select(found, agent.Selection{})
	if err != nil || len(all) != 1 || all[0].PID != cmd.Process.Pid || !all[0].Alive {
		t.Fatalf("discover: %+v %v", all, err)
	}
	col := agent.CollectFlightRecorder(context.Background(), all, false)
	if len(col.Errors) != 0 || len(col.Loaded.Dumps) != 1 {
		t.Fatalf("errors %v, dumps %d", col.Errors, len(col.Loaded.Dumps))
	}
	d := col.Loaded.Dumps[0]
	if d.Rank != 2 || len(d.Entries) == 0 || !strings.HasPrefix(col.Snapshots[cmd.Process.Pid].DumpFunction, "pipe ") {
		t.Fatalf("dump rank %d, %d entries, via %q", d.Rank, len(d.Entries), col.Snapshots[cmd.Process.Pid].DumpFunction)
	}
	// With nobody reading the pipe, the request fails at once, not hangs.
	idle := filepath.Join(t.TempDir(), "idle_")
	if err := syscall.Mkfifo(idle+"2.pipe", 0o600); err != nil {
		t.Fatal(err)
	}
	a := *all[0]
	id := *a.Identity
	id.FRPipePrefix = idle
	a.Identity = &id
	start := time.Now()
	if _, err := agent.SnapshotViaPipe(context.Background(), &a, 5*time.Second); err == nil || !strings.Contains(err.Error(), "no reader") || time.Since(start) > 2*time.Second {
		t.Fatalf("pipe without reader: %v after %s", err, time.Since(start))
	}
}
