package flightrecorder

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"sync"

	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Member sets. A dump's groups can share one rank list (the pickle memo,
// or the interner for lists written alike): sixteen groups of a million
// ranks are one list of a million. Everything the analysis derives from a
// list alone (its sorted members, its key, the members without a dump,
// its text) is derived once per distinct list and shared, read-only, by
// every group that names it; only what depends on the group's entries is
// computed per group, and that follows the ranks with a dump.

// maxRankText bounds a rank set written into the report (a set with
// holes everywhere is megabytes of ranges): the ranges that fit, then the
// count.
const maxRankText = 1024

// memberSet is one distinct rank list, ready for the group table.
type memberSet struct {
	members []int  // sorted, distinct; read-only
	digest  string // the count and a hash of the members: the member part of a group key
	hash    int64  // CPython's hash(frozenset(members)), for fr_trace's group names

	once     sync.Once
	missing  []int  // members without a dump, cap == len: appending copies
	present  []int  // members with a dump
	text     string // members as bounded ranges
	missText string // missing as bounded ranges

	pyOnce    sync.Once
	pyMembers string // fr_trace's {0, 1, ...}, clipped
	pyMissing string
}

// memberSets makes each distinct rank list a memberSet once. A list is
// found by its slice first (groups sharing one), then by its content
// (dumps decoded apart hold equal lists in different slices). The facts
// that depend on which ranks have a dump are for the dumps it was made
// with; the analysis and its fr_trace replay share one.
type memberSets struct {
	mu       sync.Mutex
	byList   map[rankListID]listEntry
	byDigest map[string]*memberSet
	dumped   []int // sorted ranks with a dump
}

type rankListID struct {
	addr uintptr
	n    int
}

// listEntry keeps the list it was found by alive, so that its address
// cannot be reused by another list while the table holds it.
type listEntry struct {
	src []int
	ms  *memberSet
}

func newMemberSets(dumps []*Dump) *memberSets {
	s := &memberSets{byList: map[rankListID]listEntry{}, byDigest: map[string]*memberSet{}}
	s.setDumped(dumps)
	return s
}

// setDumped says which dumps the facts are for; before any is asked.
func (s *memberSets) setDumped(dumps []*Dump) {
	s.dumped = s.dumped[:0]
	for _, d := range dumps {
		s.dumped = append(s.dumped, d.Rank)
	}
	slices.Sort(s.dumped)
	s.dumped = slices.Compact(s.dumped)
}

// rankText is a rank set for the report: ranges, bounded by maxRankText.
func rankText(ranks []int) string { return rankset.FormatMax(ranks, maxRankText) }

// of returns the member set of a pg_config rank list (any order).
func (s *memberSets) of(ranks []int) *memberSet {
	id := rankListID{addr(ranks), len(ranks)}
	s.mu.Lock()
	e, ok := s.byList[id]
	s.mu.Unlock()
	if ok {
		return e.ms
	}
	members := ranks
	if !sortedDistinct(ranks) {
		members = sortedDistinctCopy(ranks)
	}
	ms := s.ofSorted(members)
	s.mu.Lock()
	s.byList[id] = listEntry{ranks, ms}
	s.mu.Unlock()
	return ms
}

// ofSorted returns the member set of sorted, distinct members.
func (s *memberSets) ofSorted(members []int) *memberSet {
	d := digestOf(members)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ms, ok := s.byDigest[d]; ok {
		return ms
	}
	ms := &memberSet{members: members, digest: d, hash: pyFrozensetHash(members)}
	s.byDigest[d] = ms
	return ms
}

// facts splits the members into those with a dump and those without,
// once: a merge of two sorted lists, whatever the number of groups.
func (s *memberSets) facts(ms *memberSet) *memberSet {
	ms.once.Do(func() {
		walk := func(f func(r int, dumped bool)) {
			d := s.dumped
			for _, r := range ms.members {
				for len(d) > 0 && d[0] < r {
					d = d[1:]
				}
				f(r, len(d) > 0 && d[0] == r)
			}
		}
		n := 0 // count first: a million members in one allocation, not a doubling series
		walk(func(_ int, dumped bool) {
			if dumped {
				n++
			}
		})
		present, missing := make([]int, 0, n), make([]int, 0, len(ms.members)-n)
		walk(func(r int, dumped bool) {
			if dumped {
				present = append(present, r)
			} else {
				missing = append(missing, r)
			}
		})
		ms.missing, ms.present = missing, present
		ms.text, ms.missText = rankText(ms.members), rankText(missing)
	})
	return ms
}

// missingOf is the members without a dump, sorted; shared, read-only.
func (s *memberSets) missingOf(ms *memberSet) []int { return s.facts(ms).missing }

// presentOf is the members with a dump, sorted; shared, read-only.
func (s *memberSets) presentOf(ms *memberSet) []int { return s.facts(ms).present }

// textOf is the members as ranges, bounded by maxRankText.
func (s *memberSets) textOf(ms *memberSet) string { return s.facts(ms).text }

// missingTextOf is the members without a dump as ranges, bounded.
func (s *memberSets) missingTextOf(ms *memberSet) string { return s.facts(ms).missText }

// pySets are the members and the members without a dump as fr_trace
// prints sets, clipped (see pyIntSet); made once per list.
func (s *memberSets) pySets(ms *memberSet) (members, missing string) {
	s.facts(ms)
	ms.pyOnce.Do(func() {
		ms.pyMembers, ms.pyMissing = pyIntSet(ms.members), pyIntSet(ms.missing)
	})
	return ms.pyMembers, ms.pyMissing
}

// hasDump reports whether rank r left a dump.
func (s *memberSets) hasDump(r int) bool {
	_, ok := slices.BinarySearch(s.dumped, r)
	return ok
}

// digestOf names a sorted member list by its length and a 128-bit hash of
// its ranks: a group key of a few dozen bytes where the ranks written out
// would be megabytes, built once per distinct list. The hash is seeded
// per process (maphash, at memory speed): it names lists within one
// analysis only, and a file cannot be built to collide with another.
func digestOf(members []int) string {
	var h1, h2 maphash.Hash
	h1.SetSeed(digestSeeds[0])
	h2.SetSeed(digestSeeds[1])
	var buf [8 * 512]byte
	for rest := members; len(rest) > 0; {
		n := min(len(rest), 512)
		for i, r := range rest[:n] {
			binary.LittleEndian.PutUint64(buf[8*i:], uint64(r))
		}
		h1.Write(buf[:8*n])
		h2.Write(buf[:8*n])
		rest = rest[n:]
	}
	return fmt.Sprintf("%d:%016x%016x", len(members), h1.Sum64(), h2.Sum64())
}

var digestSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// unionOf is the sorted union of sorted member lists, each distinct slice
// taken once (sixteen groups naming one list cost one). A single list is
// returned as it is: read-only.
func unionOf(lists [][]int) []int {
	seen := map[rankListID]bool{}
	var distinct [][]int
	for _, l := range lists {
		id := rankListID{addr(l), len(l)}
		if len(l) == 0 || seen[id] {
			continue
		}
		seen[id] = true
		distinct = append(distinct, l)
	}
	switch len(distinct) {
	case 0:
		return nil
	case 1:
		return distinct[0]
	}
	var all []int
	for _, l := range distinct {
		all = append(all, l...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// without is the sorted a minus the sorted b.
func without(a, b []int) []int {
	var out []int
	for _, r := range a {
		for len(b) > 0 && b[0] < r {
			b = b[1:]
		}
		if len(b) == 0 || b[0] != r {
			out = append(out, r)
		}
	}
	return out
}

// sortedDistinctCopy is ranks sorted and distinct, in one allocation of their size.
func sortedDistinctCopy(ranks []int) []int {
	out := slices.Clone(ranks)
	slices.Sort(out)
	return slices.Clip(slices.Compact(out))
}

func sortedDistinct(s []int) bool {
	for i := 1; i < len(s); i++ {
		if s[i] <= s[i-1] {
			return false
		}
	}
	return true
}

// pyFrozensetHash is CPython's hash(frozenset(ints)) for non-negative ints
// below 2**61-1, which fr_trace appends to group names.
func pyFrozensetHash(ranks []int) int64 {
	shuffle := func(h uint64) uint64 { return ((h ^ 89869747) ^ (h << 16)) * 3644798167 }
	var h uint64
	uniq := ranks
	if !sortedDistinct(uniq) {
		uniq = sortedDistinctCopy(ranks)
	}
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
