package flightrecorder

// rankList is one rank's remaining entries. Python pops list items by
// index; here entries are marked removed and skipped, so that a pop is
// O(1) and positions stay stable while a step is being decided.
type rankList struct {
	rank    int
	entries []*Entry
	grp     []*group // each entry's group; nil where pg_config lacks it
	unknown bool     // some entry's group is unknown
	removed []bool
	skip    []int32 // for a removed i: a later position, maybe live
	live    int
	gone    bool                // popped from all_entries
	index   []map[int64][]int32 // by slot index, then seq: positions in list order
	// Per-position facts kept in flat arrays, so that the common lookup
	// touches neither the entry nor a map. There is one slot list per group
	// the rank has entries in, not one per group of the job: a job of
	// thousands of groups would otherwise cost ranks x groups.
	slots    [][]slot         // per group present: its entries in list order
	gnext    []int32          // per group present: first maybe-live index into slots
	slotOf   map[*group]int32 // group -> index into slots; nil in per-group runs (one slot)
	fixed    *group           // the group of every entry in a per-group run
	lastG    *group           // the last group slotIndex found, and its slot
	lastSlot int32
	tab      *sigTable // the table the signatures come from
}

// slot is what matching needs of one entry, packed so that the common
// lookup reads one cache line per rank instead of the entry itself.
type slot struct {
	pos    int32 // position in the rank's list
	state  uint8 // stateCode
	descOK bool  // the entry's desc is its group's desc
	sig    uint32
	seq    int64
}

// newRankList wraps one rank's entries; resolve (nil when every entry
// belongs to one known group) looks each entry's group up once.
func newRankList(rank int, entries []*Entry, resolve func(*Entry) *group) *rankList {
	l := &rankList{rank: rank, entries: entries, removed: make([]bool, len(entries)), skip: make([]int32, len(entries)), live: len(entries)}
	if resolve != nil {
		l.grp = make([]*group, len(entries))
		for i, e := range entries {
			l.grp[i] = resolve(e)
			l.unknown = l.unknown || l.grp[i] == nil
		}
	}
	return l
}

// prepare fills the per-group slots used by findSame and the matching
// fast path. fixed is the group of every entry in a per-group run.
func (l *rankList) prepare(fixed *group) {
	l.fixed = fixed
	groupOf := func(p int) *group {
		if fixed != nil {
			return fixed
		}
		return l.grp[p]
	}
	// Size each group's slots first: appending would copy them as they grow.
	var count []int32
	if fixed != nil {
		count = []int32{int32(len(l.entries))}
	} else {
		l.slotOf = map[*group]int32{}
		for p := range l.entries {
			g := groupOf(p)
			i, ok := l.slotOf[g]
			if !ok {
				i = int32(len(count))
				l.slotOf[g] = i
				count = append(count, 0)
			}
			count[i]++
		}
	}
	l.slots = make([][]slot, len(count))
	l.gnext = make([]int32, len(count))
	for i, n := range count {
		l.slots[i] = make([]slot, 0, n)
	}
	if len(l.entries) > 0 {
		l.tab = l.entries[0].sigTab
	}
	for p, e := range l.entries {
		g := groupOf(p)
		sl := slot{pos: int32(p), state: stateCode(e.State), descOK: e.PGDesc == g.desc, sig: e.Sig, seq: e.CollectiveSeqID}
		if e.sigTab != l.tab {
			sl.sig = 0 // numbers from another table mean nothing here
		}
		i := l.slotIndex(g)
		l.slots[i] = append(l.slots[i], sl)
	}
}

// slotIndex is the index into slots of group g's entries, or -1 when the
// rank has none.
func (l *rankList) slotIndex(g *group) int {
	if l.slotOf == nil {
		if g == l.fixed {
			return 0
		}
		return -1
	}
	if g == l.lastG { // consecutive lookups are for one group
		return int(l.lastSlot)
	}
	i, ok := l.slotOf[g]
	if !ok {
		return -1
	}
	l.lastG, l.lastSlot = g, i
	return int(i)
}

// stateCode numbers the states an entry can be in; 0 for anything else.
func stateCode(s string) uint8 {
	switch s {
	case "scheduled":
		return 1
	case "started":
		return 2
	case "completed":
		return 3
	}
	return 0
}

// nextLive returns the first live position >= i, or len(entries). A
// removed position's skip points past it; paths are compressed so that
// long runs of removed entries are crossed once.
func (l *rankList) nextLive(i int) int {
	j := i
	for j < len(l.entries) && l.removed[j] {
		j = int(l.skip[j])
	}
	for i < j && l.removed[i] {
		next := int(l.skip[i])
		l.skip[i] = int32(j)
		i = next
	}
	return j
}

func (l *rankList) head() int { return l.nextLive(0) }

func (l *rankList) remove(pos int) {
	if pos < len(l.entries) && !l.removed[pos] {
		l.removed[pos] = true
		l.skip[pos] = int32(pos + 1)
		l.live--
	}
}

// removeFrom pops the entry at pos and then n-1 more of the next live
// entries, like repeated list.pop(k) at a fixed index k.
func (l *rankList) removeFrom(pos, n int) {
	for ; n > 0; n-- {
		pos = l.nextLive(pos)
		if pos >= len(l.entries) {
			return
		}
		l.remove(pos)
	}
}
