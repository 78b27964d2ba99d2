package flightrecorder

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// group is a process group identified as fr_trace does: name + member set.
type group struct {
	idx     int    // position in groupTable.order
	guid    string // name + "|" + sorted members (ours); pyGUID is fr_trace's
	pyGUID  string
	name    string
	desc    string
	members []int // sorted, distinct; may be shared with other groups
}

// has reports whether rank r is a member (a binary search: a map per group
// would cost tens of bytes per membership).
func (g *group) has(r int) bool {
	_, ok := slices.BinarySearch(g.members, r)
	return ok
}

func groupKey(name string, members []int) string {
	return name + "|" + membersKey(members)
}

// membersKey is the member part of a group key: "0,1,2".
func membersKey(members []int) string {
	var b strings.Builder
	for i, r := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r))
	}
	return b.String()
}

// memberSet is a pg_config rank list made ready for the group table.
type memberSet struct {
	members []int // sorted, distinct
	key     string
	hash    int64
}

// memberSets converts each distinct rank list once. Dumps share one slice
// between groups that name the same list (a memo reference in a pickle),
// and such a slice costs one walk, not one per group.
type memberSets map[rankListID]*memberSet

type rankListID struct {
	addr uintptr
	n    int
}

func (ms memberSets) of(ranks []int) *memberSet {
	id := rankListID{addr(ranks), len(ranks)}
	if m, ok := ms[id]; ok {
		return m
	}
	members := slices.Compact(slices.Sorted(slices.Values(ranks)))
	m := &memberSet{members: members, key: membersKey(members), hash: pyFrozensetHash(members)}
	ms[id] = m
	return m
}

// pyFrozensetHash is CPython's hash(frozenset(ints)) for non-negative ints
// below 2**61-1, which fr_trace appends to group names.
func pyFrozensetHash(ranks []int) int64 {
	shuffle := func(h uint64) uint64 { return ((h ^ 89869747) ^ (h << 16)) * 3644798167 }
	var h uint64
	uniq := slices.Compact(slices.Sorted(slices.Values(ranks)))
	for _, r := range uniq {
		h ^= shuffle(uint64(r))
	}
	h ^= (uint64(len(uniq)) + 1) * 1927868237
	h ^= (h >> 11) ^ (h >> 25)
	h = h*69069 + 907133923
	if h == math.MaxUint64 {
		h = 590923713
	}
	return int64(h)
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
func buildGroups(dumps []*Dump, strict bool) (*groupTable, []string, error) {
	t := &groupTable{byGUID: map[string]*group{}, guidOf: map[nameRank]*group{}}
	var notes []string
	unnamed := 0
	sets := memberSets{}
	// Groups by name and member set: every rank of a 16384-rank job names
	// the default group, whose key string is 100 KB; it is built once.
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
				key := pc.Name + "|" + ms.key
				if g, existed = t.byGUID[key]; !existed {
					g = &group{idx: len(t.order), guid: key, pyGUID: pc.Name + strconv.FormatInt(ms.hash, 10),
						name: pc.Name, desc: pc.Desc, members: ms.members}
					t.byGUID[key] = g
					t.order = append(t.order, g)
				}
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
