package diagnosis

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// FromComm builds the collective side of a Model from comm rows: each
// rank's history (oldest first), what it issued per group, and the
// collective it is in (its last row, still running). A group is named by
// its members (the agent sees no process-group ids), so two groups over
// the same ranks read as one. world, when known (> 0), adds every rank of
// the job, with NoEvidence for those without rows, so that membership
// comes from the job and not from who left evidence. Problems name rows
// that could not be used.
func FromComm(rows []evidence.CommRow, world int) (Model, []string) {
	m := Model{Groups: map[string][]int{}, Ranks: map[int]*Rank{}}
	var problems []string
	if world > evidence.MaxWorld {
		problems = append(problems, fmt.Sprintf("world size %d is over %d: membership taken from the rows only", world, evidence.MaxWorld))
		world = 0
	}
	sorted := append([]evidence.CommRow(nil), rows...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Rank != sorted[j].Rank {
			return sorted[i].Rank < sorted[j].Rank
		}
		return sorted[i].TimestampUS < sorted[j].TimestampUS
	})
	last := map[int]evidence.CommRow{}
	bad := 0
	groups := groupCache{}
	anyPeer := 0
	for _, row := range sorted {
		if row.Rank < 0 || row.GroupSeq <= 0 {
			bad++
			continue
		}
		var g string
		if peer := row.P2PPeer(); peer >= 0 {
			// A point-to-point call is one message of the channel from
			// sender to receiver: the k-th send pairs with the k-th
			// receive, so the channel is a group of two with its own count.
			src, dst := row.Rank, peer
			if recvOps[row.Op] {
				src, dst = peer, row.Rank
			}
			g = p2pGroup(src, dst)
			m.Groups[g] = []int{src, dst}
		} else if evidence.P2POps[row.Op] {
			// No peer (a receive from any rank, or an older agent's row,
			// counted on its group): whom it waits for is not recorded, and
			// it must not shift the group's own count.
			anyPeer++
			g = p2pAnyGroup
			m.Groups[g] = nil
		} else {
			var members []int
			var err error
			g, members, err = groups.of(row.Ranks, world)
			if err != nil {
				bad++
				continue
			}
			m.Groups[g] = members
		}
		rk := m.Ranks[row.Rank]
		if rk == nil {
			rk = &Rank{Rank: row.Rank, Issued: map[string]int64{}}
			m.Ranks[row.Rank] = rk
		}
		op := Op{Group: g, Seq: row.GroupSeq, Name: row.Op}
		rk.History = append(rk.History, op)
		rk.Issued[g] = max(rk.Issued[g], row.GroupSeq)
		last[row.Rank] = row
	}
	if bad > 0 {
		problems = append(problems, fmt.Sprintf("%d comm_collective row(s) without a rank, a group_seq or a readable participate_ranks were left out", bad))
	}
	if anyPeer > 0 {
		problems = append(problems, fmt.Sprintf("%d point-to-point row(s) name no peer (a receive from any rank, or an agent that records no peer): nobody is taken to wait for them", anyPeer))
	}
	for r, row := range last {
		rk := m.Ranks[r]
		if row.DurationMS < 0 {
			op := rk.History[len(rk.History)-1]
			rk.Status, rk.In = InCollective, &op
		} else {
			rk.Status = Running
		}
	}
	for r := 0; r < world; r++ {
		if m.Ranks[r] == nil {
			m.Ranks[r] = &Rank{Rank: r, Status: NoEvidence, Issued: map[string]int64{}}
		}
	}
	return m, problems
}

// groupCache remembers groupOf's answers for one pass over the rows: a
// large job's rows name the same few groups thousands of times, and each
// naming costs the group's size.
type groupCache map[string]groupEntry

type groupEntry struct {
	name    string
	members []int // shared: read only
	err     error
}

func (c groupCache) of(ranks string, world int) (string, []int, error) {
	k := ranks
	if ranks == "" {
		k = "\x00" + strconv.Itoa(world)
	}
	if e, ok := c[k]; ok {
		return e.name, e.members, e.err
	}
	name, members, err := groupOf(ranks, world)
	c[k] = groupEntry{name, members, err}
	return name, members, err
}

// groupOf names a group by its members.
func groupOf(ranks string, world int) (string, []int, error) {
	if ranks == "" {
		if world <= 0 {
			return "", nil, fmt.Errorf("no participate_ranks and no world size")
		}
		all := make([]int, world)
		for i := range all {
			all[i] = i
		}
		return rankset.Format(all), all, nil
	}
	var rs []int
	if err := json.Unmarshal([]byte(ranks), &rs); err != nil || len(rs) == 0 {
		return "", nil, fmt.Errorf("participate_ranks %q is not a list of ranks", ranks)
	}
	sort.Ints(rs)
	return rankset.Format(rs), rs, nil
}

// recvOps receive: their peer is the sender.
var recvOps = map[string]bool{"recv": true, "irecv": true}

// p2pGroup names the channel of messages from src to dst.
func p2pGroup(src, dst int) string { return fmt.Sprintf("p2p %d>%d", src, dst) }

// p2pAnyGroup holds the point-to-point calls that name no peer.
const p2pAnyGroup = "p2p ?"

// p2pChannel reads a channel's name back; ok is false for a group. It is
// called per edge and per rank of large jobs: no fmt scanning.
func p2pChannel(g string) (src, dst int, ok bool) {
	rest, found := strings.CutPrefix(g, "p2p ")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(rest, ">")
	if !found {
		return 0, 0, false
	}
	src, err1 := strconv.Atoi(a)
	dst, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return src, dst, true
}
