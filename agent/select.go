package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Selection picks agents by pid or rank; both empty means every live one
// of this job. Our agents' ranks are looked up in our data dir only
// (another job's rank 0 is not ours); the original Probing agent's come
// from its environment, whatever its data dir (Discover). A pid reaches
// any agent that is not untrusted (another user's files or job never
// speak for a rank).
type Selection struct {
	PIDs  []int
	Ranks []int
}

// Select applies s to agents. Asking for a pid or rank that is not there
// is an error naming it, so a typo never silently shrinks the evidence.
func Select(agents []*Agent, s Selection) ([]*Agent, error) {
	if len(s.PIDs) == 0 && len(s.Ranks) == 0 {
		var out []*Agent
		for _, a := range agents {
			if a.Alive && a.Kind != KindRingOnly && a.OfThisJob() {
				out = append(out, a)
			}
		}
		return out, nil
	}
	byPID := map[int]*Agent{}
	byRank := map[int][]*Agent{}
	for _, a := range agents {
		byPID[a.PID] = a
		if a.IsJobRank() && a.Alive {
			r := a.Rank()
			byRank[r] = append(byRank[r], a)
		}
	}
	seen := map[int]bool{}
	var out []*Agent
	var missingPIDs, missingRanks []int
	var untrusted []string
	for _, pid := range s.PIDs {
		a := byPID[pid]
		if a == nil {
			missingPIDs = append(missingPIDs, pid)
			continue
		}
		if a.Untrusted != "" {
			if len(untrusted) < 3 {
				untrusted = append(untrusted, fmt.Sprintf("pid %d is untrusted: %s", pid, a.Untrusted))
			} else {
				untrusted = append(untrusted[:3], "…")
			}
			continue
		}
		if !seen[pid] {
			seen[pid] = true
			out = append(out, a)
		}
	}
	for _, r := range s.Ranks {
		as := byRank[r]
		if len(as) == 0 {
			missingRanks = append(missingRanks, r)
			continue
		}
		for _, a := range as {
			if !seen[a.PID] {
				seen[a.PID] = true
				out = append(out, a)
			}
		}
	}
	if len(missingPIDs) > 0 || len(missingRanks) > 0 || len(untrusted) > 0 {
		var known []int
		for r := range byRank {
			known = append(known, r)
		}
		sort.Ints(known)
		msg := ""
		if len(missingPIDs) > 0 {
			msg = fmt.Sprintf("no agent or recorded process with pid %s on this node", boundedInts(missingPIDs, 10))
		}
		if len(untrusted) > 0 {
			if msg != "" {
				msg += "; "
			}
			msg += strings.Join(untrusted, "; ")
		}
		if len(missingRanks) > 0 {
			if msg != "" {
				msg += "; "
			}
			msg += fmt.Sprintf("no live process with rank %s on this node (ranks here: %s)", boundedRanks(missingRanks), orNone(boundedRanks(known)))
		}
		return out, fmt.Errorf("%s; call list_processes", msg)
	}
	return out, nil
}

// boundedInts lists at most n numbers and counts the rest: an argument
// list of 100k pids must not come back whole in an error.
func boundedInts(xs []int, n int) string {
	if len(xs) <= n {
		return fmt.Sprint(xs)
	}
	return fmt.Sprintf("%v … and %d more", xs[:n], len(xs)-n)
}

// boundedRanks is a rank set as ranges, cut to a readable length.
func boundedRanks(rs []int) string {
	s := rankset.Format(rs)
	const max = 200
	if len(s) <= max {
		return s
	}
	cut := strings.LastIndexByte(s[:max], ',')
	if cut < 0 {
		cut = max
	}
	return fmt.Sprintf("%s,… (%d ranks)", s[:cut], len(rs))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// ForEach runs fn on every agent, at most parallel at once, and returns
// the per-agent errors by pid. ctx bounds the whole fan-out; fn gets it
// and must honour it.
func ForEach(ctx context.Context, agents []*Agent, parallel int, fn func(context.Context, *Agent) error) map[int]error {
	if parallel <= 0 {
		parallel = 16
	}
	sem := make(chan struct{}, parallel)
	var mu sync.Mutex
	errs := map[int]error{}
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		go func(a *Agent) {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				mu.Lock()
				errs[a.PID] = fmt.Errorf("pid %d: not reached before the deadline", a.PID)
				mu.Unlock()
				return
			}
			defer func() { <-sem }()
			if err := fn(ctx, a); err != nil {
				mu.Lock()
				errs[a.PID] = err
				mu.Unlock()
			}
		}(a)
	}
	wg.Wait()
	return errs
}
