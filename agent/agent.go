// Package agent talks to the in-process agents that live inside training
// processes on this node: it finds them (control sockets, identity files,
// and the original Probing agent's abstract sockets), calls them with
// deadlines, fans out across many at once, and falls back to evidence that
// needs no agent (the faulthandler signal, /proc) when a process is wedged.
//
// The Python agent itself lives in agent/python and is embedded in the
// binary (install.go). The protocol both sides follow is agent/PROTOCOL.md.
package agent

import (
	"encoding/json"
	"errors"
	"fmt"

	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/probing-mcp/probing-mcp/agent/procfs"
	"github.com/probing-mcp/probing-mcp/storage"
	"github.com/probing-mcp/probing-mcp/storage/memt"
)

// Kinds of agent.
const (
	KindOurs     = "probing-mcp" // our Python agent
	KindProbing  = "probing"     // the original Probing agent
	KindRingOnly = "rings-only"  // no agent answers; only rings in the data dir
)

// Identity is what our agent writes to <data dir>/<pid>/.identity.json.
type Identity struct {
	Agent              string   `json:"agent"`
	AgentVersion       string   `json:"agent_version"`
	PID                int      `json:"pid"`
	StartTime          uint64   `json:"start_time"`
	Host               string   `json:"host"`
	Rank               int      `json:"rank"`
	WorldSize          int      `json:"world_size"`
	LocalRank          int      `json:"local_rank"`
	LocalWorldSize     int      `json:"local_world_size"`
	NodeRank           int      `json:"node_rank"`
	Role               string   `json:"role"`
	Addr               string   `json:"addr"`
	Socket             string   `json:"socket"`
	FaulthandlerSignal int      `json:"faulthandler_signal"`
	FaulthandlerFile   string   `json:"faulthandler_file"`
	EvalAllowed        bool     `json:"eval_allowed"`
	Python             string   `json:"python"`
	Torch              string   `json:"torch"`
	Argv               []string `json:"argv"`
	// FRDumpPrefix and FRPipePrefix are torch's TORCH_FR_DUMP_TEMP_FILE and
	// TORCH_NCCL_DEBUG_INFO_PIPE_FILE in the process: writing a byte to
	// <pipe prefix><rank>.pipe makes ProcessGroupNCCL dump its Flight
	// Recorder to <dump prefix><rank> from a C++ thread, without the GIL.
	FRDumpPrefix string `json:"fr_dump_prefix"`
	FRPipePrefix string `json:"fr_pipe_prefix"`
}

// Agent is one process on this node that an agent lives in, or that left
// rings behind.
type Agent struct {
	PID  int    `json:"pid"`
	Kind string `json:"kind"`
	// Socket is the control socket: a path, or "@name" for Linux abstract
	// sockets (the original Probing agent's @probing-<pid>).
	Socket string `json:"socket,omitempty"`
	// Alive: the process runs and is the one that wrote the identity (its
	// start time matches), so a recycled pid is not mistaken for it.
	Alive bool `json:"alive"`
	// Stale: a control socket or identity whose process is gone.
	Stale    bool      `json:"stale,omitempty"`
	Identity *Identity `json:"identity,omitempty"`
	Command  []string  `json:"command,omitempty"`
	Rings    int       `json:"rings"`
	// OtherDataDir is set when the process has nothing in our data dir and
	// its environment names another one: it belongs to another job or
	// setup (a different PROBING_DATA_DIR), so a plain fan-out leaves it
	// out, just as the SQL engine never sees its rings. Naming its pid
	// still reaches it.
	OtherDataDir string `json:"other_data_dir,omitempty"`
}

// Rank is the agent's global rank, -1 when unknown.
func (a *Agent) Rank() int {
	if a.Identity != nil {
		return a.Identity.Rank
	}
	return -1
}

// Options locate agents.
type Options struct {
	DataDir  string // storage.DataDir
	CtrlRoot string // PROBING_CTRL_ROOT, default /tmp/probing
	// ProcNetUnix is /proc/net/unix (tests point it elsewhere).
	ProcNetUnix string
}

// OptionsFromEnv reads PROBING_DATA_DIR and PROBING_CTRL_ROOT.
func OptionsFromEnv(getenv func(string) string) Options {
	o := Options{DataDir: storage.DataDir(getenv), CtrlRoot: getenv("PROBING_CTRL_ROOT")}
	return o.withDefaults()
}

func (o Options) withDefaults() Options {
	if o.CtrlRoot == "" {
		o.CtrlRoot = "/tmp/probing"
	}
	if o.ProcNetUnix == "" {
		o.ProcNetUnix = "/proc/net/unix"
	}
	return o
}

// Discover lists the agents of this node, by pid: our agents (identity
// files in the data dir, sockets in the control root), original Probing
// agents (abstract sockets @probing-<pid>), and processes that left only
// rings. Dead processes are kept (Alive false) so that a dead job's data
// and stale sockets are reported rather than silently dropped.
func Discover(opt Options) ([]*Agent, error) {
	opt = opt.withDefaults()
	byPID := map[int]*Agent{}
	get := func(pid int, kind string) *Agent {
		a := byPID[pid]
		if a == nil {
			a = &Agent{PID: pid, Kind: kind}
			byPID[pid] = a
		}
		return a
	}
	inv, err := storage.Discover(opt.DataDir)
	if err != nil {
		return nil, err
	}
	// anchored: pids with a directory in our data dir (rings or identity).
	anchored := map[int]bool{}
	for _, p := range inv.Processes {
		get(p.PID, KindRingOnly).Rings = len(p.Rings)
		anchored[p.PID] = true
	}
	// Identity files: every pid directory, with rings or not.
	if ents, err := os.ReadDir(opt.DataDir); err == nil {
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid <= 0 || !e.IsDir() {
				continue
			}
			id, err := ReadIdentity(filepath.Join(opt.DataDir, e.Name(), storage.IdentityFile))
			if err != nil || id.Agent != KindOurs {
				continue
			}
			a := get(pid, KindOurs)
			a.Kind, a.Identity, a.Socket = KindOurs, id, id.Socket
			anchored[pid] = true
		}
	}
	// Our control sockets (an agent whose identity file is elsewhere, e.g.
	// another PROBING_DATA_DIR, is still found, and marked OtherDataDir).
	if ents, err := os.ReadDir(opt.CtrlRoot); err == nil {
		for _, e := range ents {
			name, ok := strings.CutSuffix(e.Name(), ".sock")
			pid, err := strconv.Atoi(name)
			if !ok || err != nil || pid <= 0 {
				continue
			}
			a := get(pid, KindOurs)
			a.Kind = KindOurs
			if a.Socket == "" {
				a.Socket = filepath.Join(opt.CtrlRoot, e.Name())
			}
		}
	}
	// The original Probing agent listens on the abstract socket
	// @probing-<pid>, visible in /proc/net/unix.
	for _, pid := range probingSockets(opt.ProcNetUnix) {
		a := get(pid, KindProbing)
		if a.Kind != KindOurs {
			a.Kind, a.Socket = KindProbing, fmt.Sprintf("@probing-%d", pid)
		}
	}
	out := make([]*Agent, 0, len(byPID))
	for _, a := range byPID {
		a.Alive = alive(a)
		if !a.Alive && a.Socket != "" && a.Kind == KindOurs {
			a.Stale = true
		}
		if a.Alive {
			a.Command = cmdline(a.PID)
			if !anchored[a.PID] {
				a.OtherDataDir = otherDataDir(a.PID, opt.DataDir)
			}
		} else if a.Identity != nil {
			a.Command = a.Identity.Argv
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		ri, rj := out[i].Rank(), out[j].Rank()
		if (ri >= 0) != (rj >= 0) {
			return ri >= 0
		}
		if ri != rj {
			return ri < rj
		}
		return out[i].PID < out[j].PID
	})
	return out, nil
}

// otherDataDir is the data dir that pid's environment resolves to, by
// Probing's rules, when that is not ours; "" when it is ours or the
// environment cannot be read (another user's process: kept, as before).
func otherDataDir(pid int, ours string) string {
	env, err := procfs.Env(pid)
	if err != nil && !errors.Is(err, procfs.ErrTruncated) {
		return ""
	}
	theirs := storage.DataDir(func(k string) string { return env[k] })
	if sameDir(theirs, ours) {
		return ""
	}
	return theirs
}

// sameDir compares two directory paths, through symlinks when both exist.
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// ReadIdentity reads an identity file (bounded: it is small).
func ReadIdentity(path string) (*Identity, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var id Identity
	dec := json.NewDecoder(&limitReader{r: f, n: 1 << 20})
	if err := dec.Decode(&id); err != nil {
		return nil, fmt.Errorf("identity file %s: %w", path, err)
	}
	return &id, nil
}

type limitReader struct {
	r interface{ Read([]byte) (int, error) }
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("larger than 1 MiB")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

func alive(a *Agent) bool {
	var start uint64
	if a.Identity != nil {
		start = a.Identity.StartTime
	}
	return memt.ProcessAlive(a.PID, start)
}

func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// probingSockets lists the pids of @probing-<pid> abstract sockets.
func probingSockets(procNetUnix string) []int {
	b, err := os.ReadFile(procNetUnix)
	if err != nil {
		return nil
	}
	seen := map[int]bool{}
	var out []int
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		name, ok := strings.CutPrefix(f[len(f)-1], "@probing-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 || seen[pid] {
			continue
		}
		seen[pid] = true
		out = append(out, pid)
	}
	return out
}

// Signal sends sig to the process, but only if it is still the process
// that wrote id: a signal meant for a faulthandler hook would kill
// whatever else now holds the pid.
func Signal(id *Identity, sig syscall.Signal) error {
	if id == nil || id.PID <= 0 || id.StartTime == 0 {
		return errors.New("no identity with a start time: refusing to signal")
	}
	if st, err := memt.ProcessStartTime(id.PID); err != nil || st != id.StartTime {
		return fmt.Errorf("pid %d is no longer the process that registered (start time %d, now %d, err %v)", id.PID, id.StartTime, st, err)
	}
	return syscall.Kill(id.PID, sig)
}
