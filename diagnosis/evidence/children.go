package evidence

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// Waits is what a rank's main thread waits for outside any collective,
// from the kernel: its own read, open or wait for a child (IO), and its
// child processes (DataLoader workers, an upload command) with what each
// is blocked in. Read only for a live rank whose main thread is in such
// a wait (by its frames or its syscall), at most MaxChildren processes.
type Waits struct {
	IO       *procfacts.IOWait `json:",omitempty"`
	Children []SubProcess      `json:",omitempty"`
	// More is how many descendants were left out past MaxChildren.
	More int `json:",omitempty"`
	// Skipped says why some could not be read (another user's process).
	Skipped []string `json:",omitempty"`
}

// SubProcess is one child process and, when it runs an agent (PROBING=2
// makes children run one), its main thread's frames.
type SubProcess struct {
	procfacts.Child
	Main *stacks.Thread `json:",omitempty"`
}

// MaxChildren bounds the processes read below one rank; childDepth
// reaches a shell's command or a forkserver's worker.
const (
	MaxChildren = 4
	childDepth  = 2
)

// ChildWait is what a main thread's frames wait for among its child
// processes: "DataLoader worker" (torch's multiprocessing iterator waits
// on its workers' queue), "child process" (subprocess), "worker process"
// (multiprocessing), "" none. The outer frames decide: a DataLoader
// waits inside multiprocessing's queue.
func ChildWait(t *stacks.Thread) string {
	if t == nil {
		return ""
	}
	for _, k := range childWaits {
		if slices.ContainsFunc(t.Frames, k.is) {
			return k.kind
		}
	}
	return ""
}

var childWaits = []struct {
	kind string
	is   func(stacks.Frame) bool
}{
	{"DataLoader worker", func(f stacks.Frame) bool {
		return strings.HasSuffix(f.File, "/torch/utils/data/dataloader.py") && (f.Function == "_try_get_data" || f.Function == "_get_data")
	}},
	{"child process", func(f stacks.Frame) bool { return strings.HasSuffix(f.File, "/subprocess.py") }},
	{"worker process", func(f stacks.Frame) bool { return strings.Contains(f.File, "/multiprocessing/") }},
}

// splitSubAgents takes out of found the live agents that are descendants
// of a live ranked agent and claim its rank or none: under PROBING=2 a
// rank's children (spawned DataLoader workers, a Python upload command)
// run an agent too and inherit RANK, and are not a second process of the
// rank. They are returned apart, by pid, for their stacks.
func splitSubAgents(found []*agent.Agent) (ranks []*agent.Agent, subs map[int]*agent.Agent) {
	rankOf := map[int]int{} // pid → rank of the live ranked agents
	for _, a := range found {
		if a.Alive && a.Untrusted == "" && a.Rank() >= 0 {
			rankOf[a.PID] = a.Rank()
		}
	}
	subs = map[int]*agent.Agent{}
	for _, a := range found {
		if !a.Alive || a.Untrusted != "" || a.Kind != agent.KindOurs {
			ranks = append(ranks, a)
			continue
		}
		pid, sub := a.PID, false
		for range 4 {
			st, err := procfacts.StatAt(procfacts.Proc, pid)
			if err != nil || st.PPID <= 1 {
				break
			}
			pid = st.PPID
			if r, ok := rankOf[pid]; ok {
				sub = a.Rank() < 0 || a.Rank() == r
				break
			}
		}
		if sub {
			subs[a.PID] = a
		} else {
			ranks = append(ranks, a)
		}
	}
	return ranks, subs
}

// gatherWaits fills Waits for the live ranks of b whose main thread
// waits for a child process or in a read or an open. The process tree
// is read once, and only when some rank needs it.
func gatherWaits(ctx context.Context, b *Bundle, subs map[int]*agent.Agent) {
	uptime := procfacts.Uptime(procfacts.Proc)
	var tree procfacts.Tree
	var treeErr error
	var want []*agent.Agent // child agents whose stacks are wanted
	wantOf := map[int]*SubProcess{}
	for _, r := range sortedRanks(b) {
		e := b.Ranks[r]
		if !e.Alive || e.PID <= 0 || e.Node != "" || ctx.Err() != nil {
			continue
		}
		w := &Waits{IO: procfacts.ReadIOWait(procfacts.Proc, e.PID, e.PID, "")}
		if w.IO != nil && (w.IO.Kind == "socket" || w.IO.Kind == "") && !strings.HasPrefix(w.IO.Syscall, "open") {
			w.IO = nil // a socket (the collectives' own), or not known
		}
		if ChildWait(e.Main) == "" && (w.IO == nil || w.IO.Kind != "child") {
			if w.IO != nil {
				e.Waits = w
			}
			continue
		}
		if tree == nil && treeErr == nil {
			if tree, treeErr = procfacts.ReadTree(ctx, procfacts.Proc); treeErr != nil {
				b.Problems = append(b.Problems, fmt.Sprintf("the process tree (children of ranks that wait for them): %v", treeErr))
			}
		}
		kids, more := tree.Descendants(e.PID, childDepth, MaxChildren)
		w.More = more
		for _, k := range kids {
			depth := 1
			if !slices.Contains(tree[e.PID], k) {
				depth = 2
			}
			// Another user's process (a setuid helper) is not read: its
			// facts are not the job's to show.
			if o, err := procfacts.ProcessOwner(k); err != nil || o.UID != e.UID {
				w.Skipped = append(w.Skipped, fmt.Sprintf("pid %d: another user's process, or gone", k))
				continue
			}
			c, err := procfacts.ReadChild(procfacts.Proc, k, depth, uptime)
			if err != nil {
				continue // it exited meanwhile
			}
			w.Children = append(w.Children, SubProcess{Child: c})
		}
		for i := range w.Children {
			if a := subs[w.Children[i].PID]; a != nil {
				want = append(want, a)
				wantOf[a.PID] = &w.Children[i]
			}
		}
		e.Waits = w
	}
	if len(want) == 0 {
		return
	}
	// The children's agents answer for themselves: their main thread's
	// frames (a worker blocked in open() holds no GIL). A short deadline:
	// the rank's verdict does not wait on its children.
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	for _, p := range agent.CollectStacks(cctx, want, agent.StackOptions{AgentTimeout: time.Second, SignalTimeout: time.Second, MaxFrames: 64}) {
		sp := wantOf[p.PID]
		for i := range p.Threads {
			if sp != nil && p.Threads[i].IsMain {
				t := p.Threads[i]
				sp.Main = &t
			}
		}
	}
}

func sortedRanks(b *Bundle) []int {
	rs := make([]int, 0, len(b.Ranks))
	for r := range b.Ranks {
		rs = append(rs, r)
	}
	sort.Ints(rs)
	return rs
}
