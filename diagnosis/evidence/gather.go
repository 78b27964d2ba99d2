package evidence

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// Options say where the evidence is and how long gathering may take.
type Options struct {
	Agents agent.Options
	SQL    *sqlengine.Engine
	// Deadline bounds the whole gathering (default agent.NodeBudget, 15 s); each source
	// gets what is left and says what it could not read.
	Deadline time.Duration
	// CommPerRank is how many recent collectives of each rank are read
	// (default 64).
	CommPerRank int
	// RawFR keeps the Flight Recorder dumps as they came (FRDumps) and
	// leaves their analysis out: a node daemon ships them to the
	// coordinator, which analyses every node's together (AnalyzeFR).
	RawFR bool
	// GPU is the sampler of this process, if it samples; Host names this
	// node in the GPU report.
	GPU  GPUSource
	Host string
	// Pulse reads only what costs the job nothing: the agents' identity
	// and liveness (files and /proc), the rings' recent steps and
	// collectives, and the GPU sampler's newest round. No rank is asked
	// for stacks or a Flight Recorder snapshot, none is signalled, NVML is
	// not called: the watcher reads this every tick while the job moves.
	Pulse bool
	// History holds the watcher's stack captures: a rank killed without
	// a trace (SIGKILL) is placed where the last one saw it. Nil: none.
	History *history.Store
}

// RankEvidence is what is known of one rank.
type RankEvidence struct {
	Rank, PID int
	// UID owns the process (or, once it is gone, its data dir entry).
	UID   int
	Alive bool
	// Ending says how the process ended, from its agent's records;
	// Raised: it recorded an uncaught exception (the process died of its
	// own cause, not of a signal sent to a hung job).
	Ending string
	Raised bool
	// Main is its main thread's stack, when one was captured.
	Main *stacks.Thread
	// MainCapturedNS, for a dead rank, is when the watcher captured Main
	// while the rank still lived (the history's stack capture): where it
	// was then, not where it died. 0 otherwise.
	MainCapturedNS int64 `json:",omitempty"`
	// Threads are all its threads as captured (the agent's own left out),
	// StackSource where they came from (stacks.SourceAgent,
	// SourceFaulthandler, SourceProc; "" when not captured), StackErr why
	// the capture failed or is partial, and AgentErr the kind of the
	// agent's failure to answer ("timeout": it did not answer in time).
	Threads     []stacks.Thread
	StackSource string
	StackErr    string
	AgentErr    string
	// OSThreads are its kernel threads from /proc (tid, name, state,
	// wchan), read when the agent did not answer, before the faulthandler
	// signal: faulthandler's frames name no kernel thread but the main
	// one, and these say which thread ran.
	OSThreads []stacks.Thread
	// Locks are what the agent read of its threads' locks (the lock each
	// one is entering, those its with statements hold), by thread.
	Locks []ThreadLocks `json:",omitempty"`
	// Record is what its agent recorded about its ending (exceptions, the
	// main thread's end, the exit), nil when nothing; EndedNS is when it
	// failed or ended (Unix ns: its main thread's uncaught exception, else
	// its exit record, else its main thread's end), 0 when no record says.
	Record  *procfacts.Ending
	EndedNS int64
	// Crash is what faulthandler wrote as a fatal signal killed it.
	Crash    *Crash
	Activity *RankActivity
	// NowNS is this node's clock when the rank's evidence was read.
	NowNS int64
	// Node is the node daemon (its address) that gave this evidence;
	// "" when it was read here.
	Node string `json:",omitempty"`
	// LocalRank is its rank on its node from its identity (usually its
	// GPU index); nil when unknown. The diagnosis maps a rank to its GPU
	// by it only when the GPUs list no processes (a container hides them).
	LocalRank *int `json:",omitempty"`
	// LockWait: the process is blocked taking a file lock (flock, POSIX),
	// and /proc/locks says which process holds it.
	LockWait *procfacts.LockWait `json:",omitempty"`
	// Waits: its main thread waits for a child process, or in a read or
	// an open, and on what (children.go).
	Waits *Waits `json:",omitempty"`
}

// Bundle is the evidence for one scope (this node).
type Bundle struct {
	// World is the job's size as its agents report it; 0 when none did.
	World int
	Ranks map[int]*RankEvidence
	Comm  []CommRow
	// Problems name the sources that failed or were partial, and why.
	Problems []string
	// Conflicts name sources that disagree (world sizes, two processes
	// for one rank): a verdict built on them cannot be fully trusted.
	Conflicts []string
	// FR is the analysis of the live ranks' Flight Recorder snapshots
	// (torch ranks only), FRRanks the ranks it covers; nil when none.
	FR      *fr.Report `json:"-"`
	FRRanks []int      `json:",omitempty"`
	// FRDumps are the raw dumps when Options.RawFR asked for them.
	FRDumps []FRDump `json:",omitempty"`
	// Unreachable names the ranks no source could reach (a node daemon
	// that did not answer) and why; their absence is evidence, not proof.
	Unreachable map[int]string `json:",omitempty"`
	// GPU is each node's GPUs (NodeGPU): one report per node, with its
	// host; the ranks' GPUs are found through each device's processes.
	GPU []gpu.Report `json:",omitempty"`
}

// MaxWorld is the largest world size believed: every rank of the job
// gets a place in the diagnosis, so an identity's number is bounded.
const MaxWorld = 1 << 17

// MajorityWorld is the world size the most ranks report, the larger on a
// tie; 0 when none does. counts maps each reported world size (> 0) to
// how many ranks report it. The one vote every level takes: a node's
// bundle (worldOf), a node's Info and the coordinator's merge.
func MajorityWorld(counts map[int]int) int {
	best, n := 0, 0
	for ws, c := range counts {
		if c > n || (c == n && ws > best) {
			best, n = ws, c
		}
	}
	return best
}

// worldOf is the world size most live ranks report; a disagreement is a
// conflict naming who said what.
func worldOf(sizes map[int][]int, conflict func(string, ...any)) int {
	counts := make(map[int]int, len(sizes))
	for ws, rs := range sizes {
		counts[ws] = len(rs)
	}
	best := MajorityWorld(counts)
	if len(sizes) > 1 {
		var parts []string
		for ws, rs := range sizes {
			sort.Ints(rs)
			parts = append(parts, fmt.Sprintf("%d (%s)", ws, rankWords(rs)))
		}
		sort.Strings(parts)
		conflict("the ranks report different world sizes: %s; the size most report, %d, is used", strings.Join(parts, ", "), best)
	}
	return best
}

// Gather reads every source for the ranks of this node in parallel,
// within one deadline. A source that fails is a Problem, never an error:
// the diagnosis weighs what there is and says what is missing.
func Gather(ctx context.Context, opt Options) *Bundle {
	if opt.Deadline <= 0 {
		opt.Deadline = agent.NodeBudget
	}
	ctx, cancel := context.WithTimeout(ctx, opt.Deadline)
	defer cancel()
	b := &Bundle{Ranks: map[int]*RankEvidence{}}
	var mu sync.Mutex
	problem := func(format string, args ...any) {
		mu.Lock()
		b.Problems = append(b.Problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	var acts map[int]*RankActivity
	// The agents first (they are quick): their ranks let the rings be
	// read from a recent window instead of whole.
	found, err := agent.Discover(opt.Agents)
	if err != nil {
		problem("agents: %v", err)
	}
	found, subs := splitSubAgents(found) // children's agents are no ranks (children.go)
	var known []int
	for _, a := range found {
		if a.IsJobRank() {
			known = append(known, a.Rank())
		}
	}
	// The GPUs: the sampler's newest round or the rings' (a pulse asks
	// NVML nothing either).
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := NodeGPU(ctx, opt.GPU, opt.SQL, opt.Host)
		mu.Lock()
		b.GPU = []gpu.Report{r}
		mu.Unlock()
	}()
	if opt.SQL != nil {
		wg.Add(2)
		go func() {
			defer wg.Done()
			rows, err := ReadCommFor(ctx, opt.SQL, opt.CommPerRank, known)
			if err != nil {
				problem("comm rings: %v", err)
			}
			mu.Lock()
			b.Comm = rows
			mu.Unlock()
		}()
		go func() {
			defer wg.Done()
			a, err := readSteps(ctx, opt.SQL, 10)
			if err != nil {
				problem("activity from the rings: %v", err)
			}
			mu.Lock()
			acts = a
			mu.Unlock()
		}()
	}
	var live, dead []*agent.Agent
	sizes := map[int][]int{} // world size → the ranks that report it
	conflict := func(format string, args ...any) {
		b.Conflicts = append(b.Conflicts, fmt.Sprintf(format, args...))
	}
	for _, a := range found {
		if !a.IsJobRank() {
			continue
		}
		if id := a.Identity; id != nil && id.WorldSize > MaxWorld {
			problem("rank %d reports world size %d, more than the %d this server believes: ignored", a.Rank(), id.WorldSize, MaxWorld)
		} else if id != nil && id.WorldSize > 0 && a.Alive {
			sizes[id.WorldSize] = append(sizes[id.WorldSize], a.Rank())
		}
		e := &RankEvidence{Rank: a.Rank(), PID: a.PID, UID: a.UID, Alive: a.Alive}
		if id := a.Identity; id != nil && id.LocalRank >= 0 {
			l := id.LocalRank
			e.LocalRank = &l
		}
		if a.Ending != nil {
			e.Ending, e.Raised = a.Ending.Summary(a.Alive), a.Ending.Exception != nil
			e.Record, e.EndedNS = a.Ending, EndedNS(a.Ending)
		}
		if !a.Alive && !opt.Pulse {
			withElasticError(e, a, problem)
			c, err := readCrash(a)
			if err != nil {
				problem("rank %d's crash file: %v", a.Rank(), err)
			}
			if c != nil {
				e.Crash = c
				if c.Main != nil && e.Main == nil {
					e.Main = c.Main // the stack it died with
				}
				if c.What != "" {
					e.Ending = strings.TrimSpace("crashed: Fatal Python error: " + jobtext.Quote(c.What, jobtext.Message) + "; " + e.Ending)
				}
			}
			if e.Main == nil && opt.History != nil {
				withCapture(e, opt.History, opt.Host, problem)
			}
			if e.Main == nil && a.Ending != nil && len(a.Ending.SignalDump) > 0 {
				// Where it was when its launcher stopped it (SIGTERM's
				// faulthandler dump): in a collective, or elsewhere.
				if threads, err := stacks.ParseFaulthandler(a.Ending.SignalDump); err == nil {
					for i := range threads {
						if threads[i].IsMain {
							t := threads[i]
							e.Main = &t
						}
					}
				}
			}
		}
		if prev := b.Ranks[e.Rank]; prev != nil && prev.Alive {
			if e.Alive {
				// Two live processes say they are one rank: two jobs share
				// this data dir, and their evidence would mix.
				conflict("rank %d is claimed by two live processes (pids %d and %d): two jobs share this data dir? pid %d is used", e.Rank, prev.PID, e.PID, prev.PID)
			}
			continue // a dead earlier process of the rank does not hide the live one
		}
		b.Ranks[e.Rank] = e
		if a.Alive && a.Kind != agent.KindRingOnly {
			live = append(live, a)
		}
		if !a.Alive {
			dead = append(dead, a)
		}
	}
	b.World = worldOf(sizes, conflict)
	if b.World == 0 {
		// Only dead processes said (post-mortem): the largest they said.
		for _, a := range found {
			if id := a.Identity; id != nil && a.OfThisJob() && id.WorldSize > b.World && id.WorldSize <= MaxWorld {
				b.World = id.WorldSize
			}
		}
	}
	if opt.Pulse {
		wg.Wait()
		return withActivity(b, acts, time.Now().UnixNano(), problem)
	}
	var rings *ringSource
	if opt.SQL != nil {
		rings = &ringSource{sql: opt.SQL, dataDir: opt.Agents.DataDir, endedNS: map[int]int64{}}
		for r, e := range b.Ranks {
			rings.endedNS[r] = e.EndedNS
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		dumps := collectFR(ctx, live, dead, rings, problem)
		mu.Lock()
		b.FRDumps = dumps
		mu.Unlock()
	}()
	procs := agent.CollectStacks(ctx, live, agent.StackOptions{})
	wg.Wait()
	now := time.Now().UnixNano()
	for _, p := range procs {
		e := b.Ranks[p.Rank]
		if e == nil {
			continue
		}
		e.Threads, e.StackSource, e.StackErr, e.AgentErr = p.Threads, p.Source, p.Err, p.AgentErr
		e.Locks = LocksOf(p.Threads)
		for i := range p.Threads {
			if p.Threads[i].IsMain {
				t := p.Threads[i]
				e.Main = &t
			}
		}
		e.OSThreads = p.OSThreads
		if p.Err != "" && e.Main == nil {
			problem("rank %d's stacks: %s", p.Rank, jobtext.Quote(p.Err, jobtext.Line))
		}
	}
	// File locks the live ranks wait for, and their holders (a rank
	// blocked in flock on a checkpoint manifest another rank holds).
	if waits, err := procfacts.LockWaits(procfacts.Proc); err == nil {
		byPID := map[int]*RankEvidence{}
		for _, e := range b.Ranks {
			if e.Alive {
				byPID[e.PID] = e
			}
		}
		for i := range waits {
			if e := byPID[waits[i].Waiter]; e != nil {
				w := waits[i]
				// The waiter has the file open (a rank of the job's user),
				// else its holder: the path names the resource.
				if w.Path = procfacts.LockPath(procfacts.Proc, w.Waiter, w.File); w.Path == "" {
					w.Path = procfacts.LockPath(procfacts.Proc, w.Holder, w.File)
				}
				e.LockWait = &w
			}
		}
	}
	// What the ranks outside collectives wait for: children, files, FIFOs.
	gatherWaits(ctx, b, subs)
	if !opt.RawFR {
		AnalyzeFR(ctx, b)
	}
	return withActivity(b, acts, now, problem)
}

// withActivity gives every rank its activity from the rings (steps and
// collectives) and the node's clock, and adds the ranks only rings name.
func withActivity(b *Bundle, acts map[int]*RankActivity, now int64, problem func(string, ...any)) *Bundle {
	if acts == nil {
		acts = map[int]*RankActivity{}
	}
	activityFromComm(acts, b.Comm)
	for r, e := range b.Ranks {
		e.Activity, e.NowNS = acts[r], now
	}
	var ringOnly []int
	for r, a := range acts {
		if b.Ranks[r] == nil {
			// Rings whose rank no agent vouches for: counted as alive, so
			// that an unknown is never called a death, and said (once).
			b.Ranks[r] = &RankEvidence{Rank: r, UID: -1, Alive: true, Activity: a, NowNS: now}
			ringOnly = append(ringOnly, r)
		}
	}
	if len(ringOnly) > 0 {
		sort.Ints(ringOnly)
		problem("%s: rings only, no agent identity: liveness not known", rankWords(ringOnly))
	}
	return b
}

// EndedNS is when a process's trouble ended it, from its ending records:
// its main thread's uncaught exception (the failure itself, before any
// cleanup), else its exit, else its main thread's end; 0 when none says.
// An exception of another thread does not end a process and is not used.
func EndedNS(e *procfacts.Ending) int64 {
	if e == nil {
		return 0
	}
	if x := e.Exception; x != nil && x.TimeNS > 0 && (x.Thread == nil || x.Thread.IsMain) {
		return x.TimeNS
	}
	if e.Exit != nil && e.Exit.TimeNS > 0 {
		return e.Exit.TimeNS
	}
	if e.MainThreadExit != nil {
		return e.MainThreadExit.TimeNS
	}
	return 0
}

func rankWords(rs []int) string {
	if len(rs) == 1 {
		return "rank " + rankset.Format(rs)
	}
	return "ranks " + rankset.Format(rs)
}

// ThreadLocks is one thread's locks as the agent read them (stacks.Thread
// keeps them out of its JSON).
type ThreadLocks struct {
	Thread  uint64            `json:"thread"`
	Waiting *stacks.LockWait  `json:"waiting,omitempty"`
	Held    []stacks.HeldLock `json:"held,omitempty"`
}

// LocksOf collects the lock facts of threads that have any.
func LocksOf(ts []stacks.Thread) []ThreadLocks {
	var out []ThreadLocks
	for _, t := range ts {
		if t.LockWait != nil || len(t.LocksHeld) > 0 {
			out = append(out, ThreadLocks{Thread: t.ID, Waiting: t.LockWait, Held: t.LocksHeld})
		}
	}
	return out
}

// WithLocks is a copy of ts with the lock facts of locks put back on
// their threads (by thread id).
func WithLocks(ts []stacks.Thread, locks []ThreadLocks) []stacks.Thread {
	if len(locks) == 0 {
		return ts
	}
	by := map[uint64]ThreadLocks{}
	for _, l := range locks {
		by[l.Thread] = l
	}
	out := append([]stacks.Thread(nil), ts...)
	for i := range out {
		if l, ok := by[out[i].ID]; ok {
			out[i].LockWait, out[i].LocksHeld = l.Waiting, l.Held
		}
	}
	return out
}
