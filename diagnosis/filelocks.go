package diagnosis

import (
	"fmt"
	"slices"
	"sort"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// fileLocks follows a CPU-side culprit's file lock to its holder
// (/proc/locks, evidence.RankEvidence.LockWait): ranks blocked in flock
// wait for the rank that holds the lock. When that rank is itself inside
// a collective that waits for them, the job is deadlocked across
// processes, and the rank that holds a lock across a collective is the
// culprit (issue 22: rank 0 kept a checkpoint manifest's lock through a
// barrier). When the holder is a rank outside any collective, it is the
// one the others wait for; when it is no rank of the job, it is named.
func fileLocks(hs []Hypothesis, in Input, m Model) []Hypothesis {
	for i, h := range hs {
		if h.Category != CatCPUStall || len(h.culprits) == 0 {
			continue
		}
		holder, node, kind, file := -1, "", "", ""
		for _, r := range h.culprits {
			f := in.Ranks[r]
			if f == nil || f.LockWait == nil || (holder >= 0 && (f.LockWait.Holder != holder || f.Node != node)) {
				holder = -2
				break
			}
			holder, node, kind, file = f.LockWait.Holder, f.Node, f.LockWait.Kind, f.LockWait.File
			if f.LockWait.Path != "" {
				file = f.LockWait.Path // the resource by name, not device and inode
			}
		}
		if holder < 0 {
			continue
		}
		owner := -1
		for _, f := range sortedFacts(in.Ranks) {
			if f.PID == holder && f.Node == node && f.Alive {
				owner = f.Rank
			}
		}
		waiters := fmt.Sprintf("%s blocked taking a file lock (%s, file %s)", rankWords(h.culprits)+plural(len(h.culprits), " is", " are"), jobtext.Token(kind, jobtext.Name), jobtext.QuoteTail(file, jobtext.Path))
		if owner < 0 || slices.Contains(h.culprits, owner) {
			hs[i].Evidence = append(hs[i].Evidence, Evidence{"proc", fmt.Sprintf("%s that pid %d holds, no rank of this job (/proc/locks)", waiters, holder)})
			continue
		}
		rk := m.Ranks[owner]
		n := Hypothesis{culprits: []int{owner}, Confidence: Medium,
			Confirm: fmt.Sprintf("/proc/locks on the node: pid %d holds the lock; get_stacks {\"ranks\":\"%d\"}", holder, owner),
			Refute:  fmt.Sprintf("rank %d releases the lock and the others go on", owner)}
		coll := append(slices.Clone(h.culprits), h.collateral...)
		sort.Ints(coll)
		n.collateral = slices.DeleteFunc(slices.Compact(coll), func(r int) bool { return r == owner })
		n.Collateral = rankset.Format(n.collateral)
		held := fmt.Sprintf("%s that rank %d (pid %d) holds (/proc/locks)", waiters, owner, holder)
		if rk != nil && rk.Status == InCollective && rk.In != nil {
			n.Category, n.Confidence = CatDeadlock, High
			at := rk.In.String()
			if s := in.storyOf(owner); s != nil {
				at = s.Wait()
			}
			n.Evidence = []Evidence{{"proc", held},
				{"comm_rings", fmt.Sprintf("while rank %d waits in %s for them: it holds the lock across a collective, and neither side can go on", owner, at)}}
		} else {
			n.Category = CatCPUStall
			n.Evidence = []Evidence{{"proc", held}, {"comm_rings", fmt.Sprintf("rank %d is in no collective: the others wait for it, through the lock", owner)}}
		}
		if f := in.Ranks[owner]; f != nil && f.Main != nil {
			n.Evidence = append(n.Evidence, Evidence{"stacks", mainWords(in, owner, f.Main)})
		}
		hs[i] = n
	}
	return hs
}
