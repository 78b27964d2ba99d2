package flightrecorder

import "slices"

// Wait is one collective that ranks wait in, read across the groups: the
// group (its name and description as the dumps give them, unquoted), the
// sequence number and op, who waits there and for whom. A picture of the
// hang (package picture) draws these as the wait-for graph's edges.
type Wait struct {
	PGName, PGDesc string
	Seq            int64
	Op             string
	Waiting        []int
	For            []int
}

// Waits are the collectives ranks wait in, by group position and then
// sequence number; nil for an Across read back from JSON.
func (x *Across) Waits() []Wait {
	if x == nil {
		return nil
	}
	return x.waits
}

// waitsOf lists the waited-in collectives of across's reading.
func waitsOf(targets map[waitKey][]int, waitsIn map[int]waitKey, cur map[int]now) []Wait {
	by := map[waitKey][]int{}
	for r, k := range waitsIn {
		by[k] = append(by[k], r)
	}
	keys := make([]waitKey, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y waitKey) int {
		if x.g.idx != y.g.idx {
			return x.g.idx - y.g.idx
		}
		return int(x.seq - y.seq)
	})
	out := make([]Wait, 0, len(keys))
	for _, k := range keys {
		rs := by[k]
		slices.Sort(rs)
		op := ""
		if c, ok := cur[rs[0]]; ok && c.e.Shared != nil {
			op = c.e.ProfilingName
		}
		out = append(out, Wait{PGName: k.g.name, PGDesc: k.g.desc, Seq: k.seq, Op: op, Waiting: rs, For: targets[k]})
	}
	return out
}

// RecentOp is one of a rank's last recorded ops, for a picture's lanes:
// its group, op, sequence number, state and times (Unix ns, 0 unknown).
type RecentOp struct {
	PGName, PGDesc string
	Op             string
	Seq            int64
	State          string
	// Done: the rank finished it (its state, or its group's completion
	// counter for a recorder that never moves states, gloo's).
	Done        bool
	CreatedNs   int64
	StartedNs   int64
	CompletedNs int64
}

// Bounds of Report.Recent: a few ops per rank, and none at all past a
// size where the picture groups ranks anyway (a million-rank load must
// not hold a second copy of its tails).
const (
	recentKept     = 8
	recentMaxRanks = 16384
)

// recent is each dumped rank's last ops, oldest first.
func (a *analysis) recent() map[int][]RecentOp {
	if len(a.dumps) > recentMaxRanks {
		return nil
	}
	out := make(map[int][]RecentOp, len(a.dumps))
	for _, d := range a.dumps {
		n := min(len(d.Entries), recentKept)
		ops := make([]RecentOp, 0, n)
		for _, e := range d.Entries[len(d.Entries)-n:] {
			if e.Shared == nil {
				continue
			}
			seq := e.CollectiveSeqID
			if e.IsP2P {
				seq = e.P2PSeqID
			}
			done := e.State == "completed"
			if g := a.resolve(&e, d.Rank); g != nil && !e.IsP2P && e.Op != nil {
				done = a.done(g, d.Rank, &e)
			}
			ops = append(ops, RecentOp{PGName: e.PGName, PGDesc: e.PGDesc, Op: e.ProfilingName, Seq: seq, State: e.State, Done: done,
				CreatedNs: e.TimeCreatedNs, StartedNs: e.TimeStartedNs, CompletedNs: e.TimeCompletedNs})
		}
		out[d.Rank] = ops
	}
	return out
}
