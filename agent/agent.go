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
	"errors"
	"fmt"

	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/storage"
)

// Kinds of agent.
const (
	KindOurs     = "probing-mcp" // our Python agent
	KindProbing  = "probing"     // the original Probing agent
	KindRingOnly = "rings-only"  // no agent answers; only rings in the data dir
)

// Identity is what our agent writes to <data dir>/<pid>/.identity.json.
type Identity = procfacts.Identity

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
	// IdentityFrom is "environ" when no identity file speaks for the
	// process (the original Probing agent writes none) and Identity was
	// read from its environment instead (procfacts.PlaceFromEnv); "" for
	// an identity file.
	IdentityFrom string   `json:"identity_from,omitempty"`
	Command      []string `json:"command,omitempty"`
	Rings        int      `json:"rings"`
	// OtherDataDir is set when our agent's process has nothing in our data
	// dir and its environment names another one: it belongs to another
	// job or setup (a different PROBING_DATA_DIR), so a plain fan-out
	// leaves it out, just as the SQL engine never sees its rings. Naming
	// its pid still reaches it. Never set for the original Probing agent:
	// it does not use our data dir, so ours says nothing about its job.
	OtherDataDir string `json:"other_data_dir,omitempty"`
	// UID is the process's owner (its effective user while it runs, else
	// its pid directory's owner); -1 when unknown.
	UID int `json:"uid"`
	// Untrusted says why nothing found for this pid may be believed or
	// acted on: files or a socket of another user than the process's,
	// files others can write, or another user's job (procfacts.CheckFile,
	// procfacts.Scope). Such an agent is listed, never called, signalled
	// or counted as a rank.
	Untrusted string `json:"untrusted,omitempty"`
	// SocketRefused says why a control socket that was found is not used
	// (not a socket, or not the process owner's).
	SocketRefused string `json:"socket_refused,omitempty"`
	// Ending is what the agent recorded about how the process ended.
	Ending *procfacts.Ending `json:"ending,omitempty"`
	// start is the start time the data dir recorded for the pid (0: none).
	start uint64
}

// Rank is the agent's global rank, -1 when unknown.
func (a *Agent) Rank() int {
	if a.Identity != nil {
		return a.Identity.Rank
	}
	return -1
}

// OfThisJob is whether what the agent says may speak for this job: it is
// not untrusted (another user's files or job) and its process does not
// belong to another data dir. The trust rule behind IsJobRank; alone it
// also admits an agent with no known rank.
func (a *Agent) OfThisJob() bool {
	return a.Untrusted == "" && a.OtherDataDir == ""
}

// IsJobRank is whether the agent is one of the job's ranks: it may speak
// for this job (OfThisJob) and knows its rank. The one rule every fan-out,
// rank selection and evidence bundle counts ranks by; alive or dead is
// each caller's own question.
func (a *Agent) IsJobRank() bool {
	return a.OfThisJob() && a.Rank() >= 0
}

// Options locate agents.
type Options struct {
	DataDir  string // storage.DataDir
	CtrlRoot string // PROBING_CTRL_ROOT, default /tmp/probing
	// ProcNetUnix is /proc/net/unix (tests point it elsewhere).
	ProcNetUnix string
	// Scope is whose processes count; nil is procfacts.DefaultScope (this
	// server's user, or PROBING_MCP_JOB_USER).
	Scope *procfacts.Scope
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
//
// What the shared data dir and control root hold is believed only when
// it belongs to the owner of the process it names and to a user the
// server serves (storage.Discover decides for the data dir; sockets are
// checked here); everything else is kept with Untrusted set.
func Discover(opt Options) ([]*Agent, error) {
	opt = opt.withDefaults()
	var err error
	byPID := map[int]*Agent{}
	get := func(pid int, kind string) *Agent {
		a := byPID[pid]
		if a == nil {
			a = &Agent{PID: pid, Kind: kind, UID: -1}
			byPID[pid] = a
		}
		return a
	}
	var scope procfacts.Scope
	if opt.Scope != nil {
		scope = *opt.Scope
	} else if scope, err = procfacts.DefaultScope(); err != nil {
		return nil, err
	}
	inv, err := storage.DiscoverScope(opt.DataDir, scope)
	if err != nil {
		return nil, err
	}
	// anchored: pids with a directory in our data dir (rings or identity).
	anchored := map[int]bool{}
	for _, d := range inv.Dirs {
		if d.Untrusted == "" && d.Rings == 0 && d.Identity == nil && d.Ending == nil {
			continue // an empty directory says nothing
		}
		a := get(d.PID, KindRingOnly)
		a.UID, a.Untrusted, a.Rings, a.start, a.Ending = d.Owner.UID, d.Untrusted, d.Rings, d.Start, d.Ending
		anchored[d.PID] = true
		if d.Identity != nil && d.Identity.Agent == KindOurs {
			a.Kind, a.Identity, a.Socket = KindOurs, d.Identity, d.Identity.Socket
		}
		if d.Identity != nil && d.Identity.Agent == procfacts.AgentNode {
			// The node daemon's GPU rings: rings only, role node, no rank
			// (its environment may carry the rank of the process that
			// started it; the identity says otherwise).
			a.Identity = d.Identity
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
			if a.Untrusted == "" {
				a.Untrusted = checkLive(a, anchored[a.PID])
			}
			if !anchored[a.PID] && a.Untrusted == "" {
				// Nothing in our data dir: our agent's is another job's
				// (the data dir scopes our agents only), and either is
				// served only if its owner is.
				if a.Kind == KindOurs {
					a.OtherDataDir = otherDataDir(a.PID, opt.DataDir)
				}
				if a.OtherDataDir == "" && !inv.Served.Has(a.UID) {
					a.Untrusted = inv.Served.Why(a.UID, scope.Self)
				}
			}
			if a.Identity == nil && a.Untrusted == "" && a.Kind != KindRingOnly {
				a.Identity = identityFromEnv(a)
			}
		} else if a.Identity != nil {
			a.Command = a.Identity.Argv
		}
		out = append(out, a)
	}
	markLaunchers(out)
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

// identityFromEnv places a live process that no identity file speaks
// for (the original Probing agent writes none) from the launcher's
// variables in its environment, read as storage reads them
// (procfacts.PlaceFromEnv); nil when the environment cannot be read.
func identityFromEnv(a *Agent) *Identity {
	env, err := procfacts.Env(a.PID)
	if err != nil && !errors.Is(err, procfacts.ErrTruncated) {
		return nil
	}
	start, err := procfacts.StartTime(a.PID)
	if err != nil {
		return nil
	}
	pl := procfacts.PlaceFromEnv(env)
	a.IdentityFrom = "environ"
	return &Identity{Agent: a.Kind, PID: a.PID, StartTime: start, Rank: pl.Rank, WorldSize: pl.WorldSize,
		LocalRank: pl.LocalRank, LocalWorldSize: pl.LocalWorldSize, NodeRank: pl.NodeRank, Role: pl.Role, Argv: a.Command}
}

// RoleLauncher is the role of a process that runs an agent but has no
// rank of its own and is the parent of ranks, or runs a launcher: under
// PROBING=2 every child activates, so a job's own launcher script does
// (0.2.4's hook skips torchrun itself). It is not a rank: never selected
// by rank, counted or blamed as one.
const RoleLauncher = "launcher"

// markLaunchers gives the role launcher to each live process placed from
// its environment without a rank that is an ancestor of a ranked agent
// or whose command is a known launcher.
func markLaunchers(agents []*Agent) {
	byPID := map[int]*Agent{}
	for _, a := range agents {
		if a.Alive && a.IdentityFrom == "environ" && a.Identity.Rank < 0 && a.Identity.LocalRank < 0 {
			byPID[a.PID] = a
		}
	}
	if len(byPID) == 0 {
		return
	}
	for _, a := range byPID {
		if isLauncherCommand(a.Command) {
			a.Identity.Role = RoleLauncher
		}
	}
	for _, a := range agents {
		if !a.Alive || a.Identity == nil || a.Identity.Rank < 0 && a.Identity.LocalRank < 0 {
			continue
		}
		// Walk up a few parents (torchrun → its elastic agent → ranks).
		pid := a.PID
		for range 8 {
			st, err := procfacts.StatAt(procfacts.Proc, pid)
			if err != nil || st.PPID <= 1 {
				break
			}
			pid = st.PPID
			if l := byPID[pid]; l != nil {
				l.Identity.Role = RoleLauncher
			}
		}
	}
}

// isLauncherCommand: torchrun, python -m torch.distributed.run/launch,
// mpirun/mpiexec, srun.
func isLauncherCommand(argv []string) bool {
	for i, s := range argv {
		if i > 2 {
			break
		}
		switch filepath.Base(s) {
		case "torchrun", "mpirun", "mpiexec", "srun":
			return true
		}
		if (s == "torch.distributed.run" || s == "torch.distributed.launch") && i > 0 && argv[i-1] == "-m" {
			return true
		}
	}
	return false
}

// checkLive checks a running process's agent against its owner: what
// the data dir said must be the running process's, and a control socket
// file must belong to it (a connection also checks the listener's
// credentials, see NewClient). Someone else's socket file is dropped, so
// that the identity's own socket, or none, is used; it makes the agent
// untrusted only when nothing in the data dir vouches for it.
func checkLive(a *Agent, anchored bool) string {
	o, err := procfacts.ProcessOwner(a.PID)
	if err != nil {
		return "its owner cannot be read: " + err.Error()
	}
	if a.UID >= 0 && a.UID != o.UID {
		return fmt.Sprintf("its data dir entry belongs to %s, but the process runs as %s", procfacts.UserName(a.UID), procfacts.UserName(o.UID))
	}
	a.UID = o.UID
	if a.Socket == "" || strings.HasPrefix(a.Socket, "@") {
		return ""
	}
	fi, err := os.Lstat(a.Socket)
	if err != nil {
		return "" // gone since: the call will say so
	}
	why := ""
	if fi.Mode().Type() != os.ModeSocket {
		why = fmt.Sprintf("its control socket %s is not a socket (%s)", a.Socket, fi.Mode().Type())
	} else if err := procfacts.CheckFile(fi, o); err != nil {
		why = fmt.Sprintf("its control socket %s: %v", a.Socket, err)
	}
	if why == "" {
		return ""
	}
	a.Socket, a.SocketRefused = "", why
	if anchored {
		return ""
	}
	return why
}

// otherDataDir is the data dir that pid's environment resolves to, by
// Probing's rules, when that is not ours; "" when it is ours or the
// environment cannot be read (another user's process: kept, as before).
func otherDataDir(pid int, ours string) string {
	env, err := procfacts.Env(pid)
	if err != nil && !errors.Is(err, procfacts.ErrTruncated) {
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

// alive: the pid runs and, when the data dir recorded a start time (the
// identity file's, or the rings' own), is that process and not one that
// reused the pid.
func alive(a *Agent) bool {
	start := a.start
	if a.Identity != nil && a.Identity.StartTime != 0 {
		start = a.Identity.StartTime
	}
	return procfacts.Alive(a.PID, start)
}

// cmdline is the process's argv without its trailing empty arguments
// (one is kept when all are empty); nil when unreadable or empty.
func cmdline(pid int) []string {
	args, err := procfacts.Cmdline(pid)
	if err != nil {
		return nil
	}
	for len(args) > 1 && args[len(args)-1] == "" {
		args = args[:len(args)-1]
	}
	return args
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

// Signal sends the agent's registered faulthandler signal, through
// procfacts.Signal: only to a trusted agent's process that is still the
// one that registered, runs as the identity file's owner and is seen to
// catch the signal, so that a signal meant for a faulthandler hook can
// never kill, whoever wrote the identity file.
func Signal(a *Agent, sig syscall.Signal) error {
	if a.Untrusted != "" {
		return fmt.Errorf("%w: pid %d is untrusted (%s)", procfacts.ErrSignalRefused, a.PID, a.Untrusted)
	}
	if a.Identity == nil || a.Identity.StartTime == 0 {
		return fmt.Errorf("%w: pid %d: no identity with a start time", procfacts.ErrSignalRefused, a.PID)
	}
	return procfacts.Signal(a.PID, a.Identity.StartTime, a.UID, sig)
}
