package evidence

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/diag/rankset"
	"github.com/probing-mcp/probing-mcp/diag/stacks"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// Options say where the evidence is and how long gathering may take.
type Options struct {
	Agents agent.Options
	SQL    *sqlengine.Engine
	// Deadline bounds the whole gathering (default 15 s); each source
	// gets what is left and says what it could not read.
	Deadline time.Duration
	// CommPerRank is how many recent collectives of each rank are read
	// (default 64).
	CommPerRank int
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
	Main     *stacks.Thread
	Activity *RankActivity
	// NowNS is this node's clock when the rank's evidence was read.
	NowNS int64
}

// Bundle is the evidence for one scope (this node).
type Bundle struct {
	// World is the job's size as its agents report it; 0 when none did.
	World int
	Ranks map[int]*RankEvidence
	Comm  []CommRow
	// Problems name the sources that failed or were partial, and why.
	Problems []string
}

// Gather reads every source for the ranks of this node in parallel,
// within one deadline. A source that fails is a Problem, never an error:
// the diagnosis weighs what there is and says what is missing.
func Gather(ctx context.Context, opt Options) *Bundle {
	if opt.Deadline <= 0 {
		opt.Deadline = 15 * time.Second
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
	if opt.SQL != nil {
		wg.Add(2)
		go func() {
			defer wg.Done()
			rows, err := ReadComm(ctx, opt.SQL, opt.CommPerRank)
			if err != nil {
				problem("comm rings: %v", err)
			}
			mu.Lock()
			b.Comm = rows
			mu.Unlock()
		}()
		go func() {
			defer wg.Done()
			a, err := ReadActivity(ctx, opt.SQL, 10)
			if err != nil {
				problem("activity from the rings: %v", err)
			}
			mu.Lock()
			acts = a
			mu.Unlock()
		}()
	}
	found, err := agent.Discover(opt.Agents)
	if err != nil {
		problem("agents: %v", err)
	}
	var live []*agent.Agent
	for _, a := range found {
		if a.Untrusted != "" || a.OtherDataDir != "" || a.Rank() < 0 {
			continue
		}
		if id := a.Identity; id != nil && id.WorldSize > b.World {
			b.World = id.WorldSize
		}
		e := &RankEvidence{Rank: a.Rank(), PID: a.PID, UID: a.UID, Alive: a.Alive}
		if a.Ending != nil {
			e.Ending, e.Raised = a.Ending.Summary(a.Alive), a.Ending.Exception != nil
		}
		if prev := b.Ranks[e.Rank]; prev != nil && prev.Alive && !e.Alive {
			continue // a dead earlier process of the rank does not hide the live one
		}
		b.Ranks[e.Rank] = e
		if a.Alive && a.Kind != agent.KindRingOnly {
			live = append(live, a)
		}
	}
	procs := agent.CollectStacks(ctx, live, agent.StackOptions{})
	wg.Wait()
	now := time.Now().UnixNano()
	for _, p := range procs {
		e := b.Ranks[p.Rank]
		if e == nil {
			continue
		}
		for i := range p.Threads {
			if p.Threads[i].IsMain {
				t := p.Threads[i]
				e.Main = &t
			}
		}
		if p.Err != "" && e.Main == nil {
			problem("rank %d's stacks: %s", p.Rank, p.Err)
		}
	}
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

func rankWords(rs []int) string {
	if len(rs) == 1 {
		return "rank " + rankset.Format(rs)
	}
	return "ranks " + rankset.Format(rs)
}
