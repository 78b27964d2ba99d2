// Package demojob runs the demo job of `probing-mcp demo`: four ranks with
// the in-process agent and an injected hang. With torch importable they use
// real gloo collectives (rank 2 skips an all_reduce); without it, plain
// Python ranks that synchronise over sockets, rank 2 stuck in a fake data
// loader. Tests use it too: it is a real, reproducible hung job.
package demojob

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/storage"
)

//go:embed scripts/*.py
var scripts embed.FS

// Options shape a demo job.
type Options struct {
	Python   string // interpreter (default: $PROBING_PYTHON, else python3)
	Ranks    int    // default 4
	Culprit  int    // the rank that hangs (default 2)
	HangStep int    // the step at which it hangs (default 5)
	// Torch: "auto" (default) uses torch when it imports, "yes" requires
	// it, "no" never uses it.
	Torch   string
	Version string // the binary's version, recorded with the agent
	// Env is added to every rank's environment (tests set PROBING_* here).
	Env []string
	// Nodes simulates a multi-node job on this machine (default 1): the
	// ranks are split evenly, each node with its own data dir, control
	// root, PROBING_NODE_HOST (node<i>), GROUP_RANK and local ranks.
	Nodes int
}

// Node is one simulated node of the job.
type Node struct {
	Host              string
	DataDir, CtrlRoot string
	Ranks             []int
}

// Job is a running demo job.
type Job struct {
	Dir      string // everything the job writes lives here
	DataDir  string // PROBING_DATA_DIR of the ranks
	CtrlRoot string // PROBING_CTRL_ROOT of the ranks
	Torch    bool
	TorchVer string
	Opt      Options
	// NodeDirs are the simulated nodes (one, DataDir and CtrlRoot, unless
	// Options.Nodes asked for more).
	NodeDirs []Node
	procs    []*exec.Cmd
	done     []chan struct{} // closed when the rank has exited (and was reaped)
	logs     []string
}

func (o *Options) defaults() {
	if o.Python == "" {
		o.Python = os.Getenv("PROBING_PYTHON")
	}
	if o.Python == "" {
		o.Python = "python3"
	}
	if o.Ranks <= 0 {
		o.Ranks = 4
	}
	if o.Culprit == 0 {
		o.Culprit = 2
	}
	if o.Culprit >= o.Ranks {
		o.Culprit = o.Ranks - 1
	}
	if o.HangStep <= 0 {
		o.HangStep = 5
	}
	if o.Torch == "" {
		o.Torch = "auto"
	}
	if o.Nodes <= 0 {
		o.Nodes = 1
	}
	if o.Nodes > o.Ranks {
		o.Nodes = o.Ranks
	}
}

// nodeOf is the simulated node of rank r.
func (o *Options) nodeOf(r int) int {
	per := (o.Ranks + o.Nodes - 1) / o.Nodes
	return r / per
}

// torchVersion says whether python imports torch with torch.distributed.
func torchVersion(ctx context.Context, python string) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c", "import torch, torch.distributed as d; assert d.is_available(); print(torch.__version__)").Output()
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(out)), true
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start extracts the agent and the rank script into a fresh directory and
// starts the ranks. Stop must be called (it also removes the directory).
func Start(ctx context.Context, opt Options) (*Job, error) {
	opt.defaults()
	if _, err := exec.LookPath(opt.Python); err != nil {
		return nil, fmt.Errorf("demo: no Python interpreter %q (set --python or PROBING_PYTHON): %w", opt.Python, err)
	}
	j := &Job{Opt: opt}
	switch opt.Torch {
	case "no":
	case "auto", "yes":
		j.TorchVer, j.Torch = torchVersion(ctx, opt.Python)
		if opt.Torch == "yes" && !j.Torch {
			return nil, fmt.Errorf("demo: --torch=yes but %s cannot import torch.distributed", opt.Python)
		}
	default:
		return nil, fmt.Errorf("demo: torch %q: want auto, yes or no", opt.Torch)
	}
	dir, err := os.MkdirTemp("", "probing_mcp_demo-")
	if err != nil {
		return nil, err
	}
	j.Dir, j.DataDir, j.CtrlRoot = dir, filepath.Join(dir, "data"), filepath.Join(dir, "ctrl")
	for n := 0; n < opt.Nodes; n++ {
		nd := Node{Host: "node" + strconv.Itoa(n), DataDir: j.DataDir, CtrlRoot: j.CtrlRoot}
		if opt.Nodes > 1 {
			nd.DataDir, nd.CtrlRoot = filepath.Join(dir, nd.Host, "data"), filepath.Join(dir, nd.Host, "ctrl")
		}
		j.NodeDirs = append(j.NodeDirs, nd)
	}
	site := filepath.Join(dir, "site")
	if err := agent.ExtractTo(site, opt.Version); err != nil {
		j.Stop()
		return nil, err
	}
	script := "socket_rank.py"
	if j.Torch {
		script = "torch_rank.py"
	}
	src, _ := scripts.ReadFile("scripts/" + script)
	scriptPath := filepath.Join(dir, script)
	if err := os.WriteFile(scriptPath, src, 0o644); err != nil {
		j.Stop()
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		j.Stop()
		return nil, err
	}
	for r := 0; r < opt.Ranks; r++ {
		logPath := filepath.Join(dir, fmt.Sprintf("rank%d.log", r))
		logf, err := os.Create(logPath)
		if err != nil {
			j.Stop()
			return nil, err
		}
		cmd := exec.Command(opt.Python, scriptPath)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = logf, logf
		ni := opt.nodeOf(r)
		nd := &j.NodeDirs[ni]
		nd.Ranks = append(nd.Ranks, r)
		per := (opt.Ranks + opt.Nodes - 1) / opt.Nodes
		cmd.Env = append(os.Environ(),
			"PYTHONPATH="+site, "PYTHONUNBUFFERED=1", "PROBING_MCP_AGENT=1",
			"PROBING_DATA_DIR="+nd.DataDir, "PROBING_CTRL_ROOT="+nd.CtrlRoot,
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(opt.Ranks),
			"LOCAL_RANK="+strconv.Itoa(r-ni*per), "LOCAL_WORLD_SIZE="+strconv.Itoa(min(per, opt.Ranks-ni*per)), "GROUP_RANK="+strconv.Itoa(ni),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "GLOO_SOCKET_IFNAME=lo",
			"DEMO_HANG_STEP="+strconv.Itoa(opt.HangStep), "DEMO_CULPRIT="+strconv.Itoa(opt.Culprit),
			"OMP_NUM_THREADS=1", "PROBING_MCP_NODE=0", "PROBING_NODE_HOST="+nd.Host) // the tests start any node daemon themselves
		cmd.Env = append(cmd.Env, opt.Env...)
		// Its own process group: Stop kills the ranks and anything they
		// started, even if this process dies first (Pdeathsig).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			j.Stop()
			return nil, fmt.Errorf("demo: starting rank %d: %w", r, err)
		}
		logf.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		j.procs = append(j.procs, cmd)
		j.done = append(j.done, done)
		j.logs = append(j.logs, logPath)
	}
	return j, nil
}

// PIDs are the ranks' process ids, by rank.
func (j *Job) PIDs() []int {
	out := make([]int, len(j.procs))
	for i, p := range j.procs {
		out[i] = p.Process.Pid
	}
	return out
}

// WaitHung waits until every rank has its agent up and the job has stopped
// making progress (no rank printed anything for settle), and returns an
// error if a rank exited or the deadline passed first.
func (j *Job) WaitHung(ctx context.Context, settle time.Duration) error {
	last := make([]int64, len(j.logs))
	stableSince := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: the job did not hang in time: %w\n%s", ctx.Err(), j.Tail(5))
		case <-tick.C:
		}
		for i, d := range j.done {
			select {
			case <-d:
				return fmt.Errorf("demo: rank %d exited early (%v)\n%s", i, j.procs[i].ProcessState, j.Tail(15))
			default:
			}
		}
		changed, registered := false, 0
		for i, l := range j.logs {
			if fi, err := os.Stat(l); err == nil && fi.Size() != last[i] {
				last[i], changed = fi.Size(), true
			}
			dd := j.NodeDirs[j.Opt.nodeOf(i)].DataDir
			if _, err := os.Stat(filepath.Join(dd, strconv.Itoa(j.procs[i].Process.Pid), storage.IdentityFile)); err == nil {
				registered++
			}
		}
		if changed || registered < len(j.procs) || !j.pastStep(j.Opt.HangStep-1) {
			stableSince = time.Now()
			continue
		}
		if time.Since(stableSince) >= settle {
			return nil
		}
	}
}

// Hung reports whether the job has reached its injected hang: every rank
// but the culprit printed the step before it.
func (j *Job) Hung() bool { return j.pastStep(j.Opt.HangStep - 1) }

// pastStep: every rank but the culprit printed step n.
func (j *Job) pastStep(n int) bool {
	for i, l := range j.logs {
		if i == j.Opt.Culprit {
			continue
		}
		b, _ := os.ReadFile(l)
		if !bytes.Contains(b, []byte(fmt.Sprintf(" step %d ", n))) {
			return false
		}
	}
	return true
}

// Tail is the last n lines of each rank's log, for error messages.
func (j *Job) Tail(n int) string {
	var b strings.Builder
	for i, l := range j.logs {
		data, _ := os.ReadFile(l)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "--- rank %d (%s)\n%s\n", i, l, strings.Join(lines[max(0, len(lines)-n):], "\n"))
	}
	return b.String()
}

// Stop kills the ranks (their whole process groups), reaps them and
// removes the job's directory. It is safe to call more than once.
func (j *Job) Stop() error {
	var errs []error
	for i, p := range j.procs {
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		<-j.done[i]
	}
	j.procs, j.done = nil, nil
	if j.Dir != "" {
		if err := os.RemoveAll(j.Dir); err != nil {
			errs = append(errs, err)
		}
		j.Dir = ""
	}
	return errors.Join(errs...)
}
