package flightrecorder

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// group is a process group identified as fr_trace does: name + member set.
type group struct {
	idx     int    // position in groupTable.order
	guid    string // name + "|" + the member set's digest (ours); pyGUID is fr_trace's
	pyGUID  string
	name    string
	desc    string
	members []int      // sorted, distinct; shared with other groups: read-only
	set     *memberSet // what members are, computed once however many groups name them
}

// has reports whether rank r is a member (a binary search: a map per group
// would cost tens of bytes per membership).
func (g *group) has(r int) bool {
	_, ok := slices.BinarySearch(g.members, r)
	return ok
}

type nameRank struct {
	name string
	rank int
}

// groupTable is build_groups_memberships: groups by guid, and the guid of
// every (pg name, rank) pair.
type groupTable struct {
	byGUID map[string]*group
	order  []*group
	guidOf map[nameRank]*group
}

// buildGroups reads every rank's pg_config. strict=true aborts like fr_trace
// on a desc mismatch; otherwise the first desc wins and a note is returned.
func buildGroups(dumps []*Dump, strict bool, sets *memberSets) (*groupTable, []string, error) {
	t := &groupTable{byGUID: map[string]*group{}, guidOf: map[nameRank]*group{}}
	var notes []string
	unnamed := 0
	// Groups by name and member set: every rank of a 16384-rank job names
	// the default group; its members are compared once, not per rank.
	type nameSet struct {
		name string
		ms   *memberSet
	}
	byNameSet := map[nameSet]*group{}
	for _, d := range dumps {
		for _, pc := range d.PGConfig {
			if pc.Name == "" && !strict {
				unnamed++
				continue
			}
			ms := sets.of(pc.Ranks)
			g, existed := byNameSet[nameSet{pc.Name, ms}]
			if !existed {
				g, existed = t.add(pc.Name, pc.Desc, ms)
				byNameSet[nameSet{pc.Name, ms}] = g
			}
			if existed && g.desc != pc.Desc {
				msg := fmt.Sprintf("mismatch in desc %s vs %s for group %s", g.desc, pc.Desc, g.pyGUID)
				if strict {
					return nil, nil, fmt.Errorf("AssertionError: %s", msg)
				}
				notes = append(notes, fmt.Sprintf("rank %d: mismatch in desc %s vs %s for group %s (kept %s)", d.Rank,
					jobtext.Quote(g.desc, jobtext.Name), jobtext.Quote(pc.Desc, jobtext.Name), jobtext.Quote(g.pyGUID, jobtext.Name), jobtext.Quote(g.desc, jobtext.Name)))
			}
			t.guidOf[nameRank{pc.Name, d.Rank}] = g
		}
	}
	if unnamed > 0 {
		notes = append(notes, fmt.Sprintf("%d pg_config entries have an empty name (torch's generic gloo recorder writes them, with group-local ranks); ignored, group membership is inferred from the entries", unnamed))
	}
	return t, notes, nil
}

// add returns the group of this name and member set, creating it (with
// desc) when it is new; existed reports one already there.
func (t *groupTable) add(name, desc string, ms *memberSet) (g *group, existed bool) {
	key := name + "|" + ms.digest
	if g, ok := t.byGUID[key]; ok {
		return g, true
	}
	g = &group{idx: len(t.order), guid: key, pyGUID: name + strconv.FormatInt(ms.hash, 10),
		name: name, desc: desc, members: ms.members, set: ms}
	t.byGUID[key] = g
	t.order = append(t.order, g)
	return g, false
}
