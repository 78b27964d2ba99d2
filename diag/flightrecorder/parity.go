package flightrecorder

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// This file replays torch's fr_trace (torch 2.15, build_db with default
// arguments) decision for decision: the same greedy walk over ranks in
// order, the same matching, the same error cases and the same log blocks.
// Its quirks are reproduced on purpose; Analyze corrects them.

// Block kinds: the messages fr_trace's error analysis can log, named.
const (
	BlockMissingRanks    = "MISSING_RANKS"          // "Not all ranks joining collective, sequence number: N"
	BlockAllToAll        = "ALLTOALL_IO_MISMATCH"   // "Input/output mismatch in the collective sequence number: N"
	BlockErrors          = "ERRORS"                 // "Collective sequence number: N has errors"
	BlockCannotDecide    = "UNDECIDED_MISSING_DUMP" // "We cannot decide what's wrong with this collective entry ..."
	BlockNoErrors        = "NO_ERRORS_FOUND"        // "No errors found for this collective entry, ..."
	BlockP2PMismatch     = "P2P_MISMATCH"           // the "MISMATCH" table of a coalesced P2P group
	BlockTooMany         = "TOO_MANY_MISMATCHES"    // "Too many mismatches for process_group ... aborting"
	BlockAbort           = "ABORT"                  // fr_trace raised and stopped
	BlockNoCoalescedEnd  = "NO_COALESCED_END"       // "Rank N does not have a coalesced end."
	BlockEmptyOpList     = "EMPTY_OP_LIST"          // "Rank N has an empty op list."
	BlockCoalescedP2POK  = "P2P_MATCH"              // the "Match" table of a coalesced P2P group
	defaultMismatchCap   = 10
	parityAbortKeyFormat = "KeyError: ('%s', %d)"
)

// RankError is one "Culprit rank N; Error type: ..." of an error block.
type RankError struct {
	Rank   int        `json:"rank"`
	State  MatchState `json:"state"`
	Detail string     `json:"detail,omitempty"`
}

// Info is the error as fr_trace's MatchInfo.
func (e RankError) Info() MatchInfo { return MatchInfo{State: e.State, Detail: e.Detail} }

// Block is one message of fr_trace's log, with the fields of the entry it
// was logged for.
type Block struct {
	Kind          string      `json:"kind"`
	Header        string      `json:"header"`
	GUID          string      `json:"-"`
	PGName        string      `json:"pg_name,omitempty"`
	PGDesc        string      `json:"pg_desc,omitempty"`
	Seq           int64       `json:"collective_seq_id"`
	RecordID      int64       `json:"record_id"`
	ProfilingName string      `json:"profiling_name,omitempty"`
	MissingRanks  []int       `json:"missing_ranks,omitempty"`
	InputNumel    int64       `json:"total_input_numel,omitempty"`
	OutputNumel   int64       `json:"total_output_numel,omitempty"`
	InputSizes    [][]int64   `json:"input_sizes,omitempty"`
	OutputSizes   [][]int64   `json:"output_sizes,omitempty"`
	ExpectedRanks []int       `json:"expected_ranks,omitempty"`
	State         string      `json:"collective_state,omitempty"`
	Errors        []RankError `json:"errors,omitempty"`
	Frames        []Frame     `json:"-"`
	Lines         []string    `json:"-"` // the exact log lines
}

// Culprits are the ranks an error block blames, ascending.
func (b *Block) Culprits() []int {
	var out []int
	for _, e := range b.Errors {
		out = append(out, e.Rank)
	}
	sort.Ints(out)
	return slices.Compact(out)
}

// IsProblem reports blocks that are a verdict on a process group (not the
// informational ones).
func (b *Block) IsProblem() bool {
	switch b.Kind {
	case BlockMissingRanks, BlockAllToAll, BlockErrors, BlockCannotDecide, BlockP2PMismatch:
		return true
	}
	return false
}

// ParityOptions are the fr_trace switches that change its verdicts.
type ParityOptions struct {
	AllowIncompleteRanks bool // --allow-incomplete-ranks
	MismatchCap          int  // --mismatch_cap; 0 means 10
}

// ParityResult is what fr_trace would have printed.
type ParityResult struct {
	Version     string   `json:"version"`
	Blocks      []Block  `json:"blocks"`
	Aborted     string   `json:"aborted,omitempty"` // the exception that stopped it
	Collectives int      `json:"collectives"`       // Collective records built
	Passed      int      `json:"passed"`            // of which pass_check (which missing ranks do not fail)
	Lines       []string `json:"-"`
}

// FirstProblem returns the first problem block logged for a group (by
// guid), which fr_trace's readers take as its verdict on that group.
func (r *ParityResult) FirstProblem(guid string) *Block {
	for i := range r.Blocks {
		if b := &r.Blocks[i]; b.GUID == guid && b.IsProblem() {
			return b
		}
	}
	return nil
}

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
	for _, d := range dumps {
		for _, pc := range d.PGConfig {
			if pc.Name == "" && !strict {
				unnamed++
				continue
			}
			ms := sets.of(pc.Ranks)
			key := pc.Name + "|" + ms.key
			g, ok := t.byGUID[key]
			if !ok {
				g = &group{idx: len(t.order), guid: key, pyGUID: pc.Name + strconv.FormatInt(ms.hash, 10),
					name: pc.Name, desc: pc.Desc, members: ms.members}
				t.byGUID[key] = g
				t.order = append(t.order, g)
			} else if g.desc != pc.Desc {
				msg := fmt.Sprintf("mismatch in desc %s vs %s for group %s", g.desc, pc.Desc, g.pyGUID)
				if strict {
					return nil, nil, fmt.Errorf("AssertionError: %s", msg)
				}
				notes = append(notes, fmt.Sprintf("rank %d: %s (kept %q)", d.Rank, msg, g.desc))
			}
			t.guidOf[nameRank{pc.Name, d.Rank}] = g
		}
	}
	if unnamed > 0 {
		notes = append(notes, fmt.Sprintf("%d pg_config entries have an empty name (torch's generic gloo recorder writes them, with group-local ranks); ignored, group membership is inferred from the entries", unnamed))
	}
	return t, notes, nil
}

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
	slots  [][]slot         // per group present: its entries in list order
	gnext  []int32          // per group present: first maybe-live index into slots
	slotOf map[*group]int32 // group -> index into slots; nil in per-group runs (one slot)
	fixed  *group           // the group of every entry in a per-group run
	tab    *sigTable        // the table the signatures come from
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
	if i, ok := l.slotOf[g]; ok {
		return int(i)
	}
	return -1
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

// abortError stops the replay the way an exception stops fr_trace.
type abortError struct{ msg string }

func (e abortError) Error() string { return e.msg }

// engine runs fr_trace's build_collectives over a set of rank lists.
type engine struct {
	lists    []*rankList // all_entries, in insertion order
	byRank   map[int]*rankList
	groups   *groupTable
	dumps    map[int]bool
	major    int
	minor    int
	cap      int
	mismatch map[string]int
	out      *ParityResult
	// corrected switches fixes on: expected ranks are the group members
	// that left a dump, every rank's own coalesced group is cleaned up, and
	// unknown op names are compared verbatim instead of aborting.
	corrected bool
	matched   map[string]int   // fully matched collectives per guid
	fixed     *group           // when set, every entry belongs to this group (per-group runs)
	expected  map[*group][]int // members with a dump, per group (corrected runs)
	cand      *rankPos         // scratch for the record being decided
	found     *rankPos
	ctx       context.Context // checked every few hundred steps; nil: never done
	err       error           // ctx's error, when it stopped the run
}

func (en *engine) log(line string) { en.out.Lines = append(en.out.Lines, line) }

// groupAt is the group of the entry at position p, raising fr_trace's
// KeyError when the rank's pg_config lacks it.
func (en *engine) groupAt(l *rankList, p int) *group {
	if en.fixed != nil {
		return en.fixed
	}
	g := l.grp[p]
	if g == nil {
		panic(abortError{fmt.Sprintf(parityAbortKeyFormat, l.entries[p].PGName, l.rank)})
	}
	return g
}

// resolver looks entries up in the group table, as _pg_guids does.
func (en *engine) resolver(rank int) func(*Entry) *group {
	if en.fixed != nil {
		return nil
	}
	return func(e *Entry) *group { return en.groups.guidOf[nameRank{e.PGName, rank}] }
}

// findSame returns the first live entry of l in group g with the given
// description and sequence number, or -1, and its slot when the fast path
// found it. fr_trace scans the whole list for it; here the group's first
// live entry is tried first and an index by (group, seq) finds the rest,
// unless the list holds entries of unknown groups, whose lookup must raise
// exactly where fr_trace's scan would.
func (en *engine) findSame(l *rankList, g *group, desc string, seq int64) (int, *slot) {
	if l.unknown {
		for p := l.nextLive(0); p < len(l.entries); p = l.nextLive(p + 1) {
			e := l.entries[p]
			if en.groupAt(l, p) == g && e.PGDesc == desc && e.CollectiveSeqID == seq {
				return p, nil
			}
		}
		return -1, nil
	}
	if l.slots == nil {
		l.prepare(en.fixed)
	}
	// Fast path: ranks walk their collectives in the same order, so the
	// group's first live entry on this rank is almost always the one.
	gi := l.slotIndex(g)
	if gi >= 0 {
		gs, i := l.slots[gi], l.gnext[gi]
		for int(i) < len(gs) && l.removed[gs[i].pos] {
			i++
		}
		l.gnext[gi] = i
		if int(i) < len(gs) {
			sl := &gs[i]
			// In a per-group run the description is a label of the group,
			// and a rank that spells it differently still takes part.
			if sl.seq == seq && (en.fixed != nil || (sl.descOK && desc == g.desc) || l.entries[sl.pos].PGDesc == desc) {
				return int(sl.pos), sl
			}
		}
	}
	if en.fixed != nil {
		for p := l.nextLive(0); p < len(l.entries); p = l.nextLive(p + 1) {
			if l.entries[p].CollectiveSeqID == seq {
				return p, nil
			}
		}
		return -1, nil
	}
	if gi < 0 {
		return -1, nil
	}
	if l.index == nil {
		l.index = make([]map[int64][]int32, len(l.slots))
		for p, e := range l.entries {
			i := l.slotIndex(l.grp[p])
			if l.index[i] == nil {
				l.index[i] = map[int64][]int32{}
			}
			l.index[i][e.CollectiveSeqID] = append(l.index[i][e.CollectiveSeqID], int32(p))
		}
	}
	for _, p := range l.index[gi][seq] {
		if !l.removed[p] && l.entries[p].PGDesc == desc {
			return int(p), nil
		}
	}
	return -1, nil
}

func (en *engine) checkOp(e *Entry) {
	if e.opBad && !en.corrected {
		panic(abortError{"AssertionError: " + e.Op.Err})
	}
}

func (en *engine) match(a, b *Entry, g *group) MatchInfo {
	en.checkOp(a)
	en.checkOp(b)
	return Match(a, b, len(g.members))
}

// rankPos maps ranks to list positions: fr_trace's found/candidate dicts.
// It is an array with one slot per rank of the engine (numbered by a
// rankIndex) plus the list of ranks set, so that a 1000-rank collective
// costs no hashing; the engine reuses two of them.
type rankPos struct {
	idx   *rankIndex
	pos   []int32 // by rank number in idx; -1 when absent
	ranks []int
}

func newRankPos(idx *rankIndex) *rankPos {
	rp := &rankPos{idx: idx, pos: make([]int32, idx.n)}
	for i := range rp.pos {
		rp.pos[i] = -1
	}
	return rp
}

// set records rank r at position p. Every rank the engine meets is in its
// index (its lists and its groups' members).
func (rp *rankPos) set(r, p int) {
	i := rp.idx.of(r)
	if rp.pos[i] < 0 {
		rp.ranks = append(rp.ranks, r)
	}
	rp.pos[i] = int32(p)
}

func (rp *rankPos) has(r int) bool {
	i := rp.idx.of(r)
	return i >= 0 && rp.pos[i] >= 0
}

// at is r's position; r must be set.
func (rp *rankPos) at(r int) int { return int(rp.pos[rp.idx.of(r)]) }

func (rp *rankPos) len() int { return len(rp.ranks) }

func (rp *rankPos) reset() {
	for _, r := range rp.ranks {
		rp.pos[rp.idx.of(r)] = -1
	}
	rp.ranks = rp.ranks[:0]
}

// moveTo adds every rank to dst and empties rp.
func (rp *rankPos) moveTo(dst *rankPos) {
	for _, r := range rp.ranks {
		dst.set(r, rp.at(r))
	}
	rp.reset()
}

// matchRecord is fr_trace's MatchStateRecord.
type matchRecord struct {
	expected     []int     // sorted
	first        *rankList // other ranks are those still present, but this one
	entry        *Entry
	candidate    *rankPos // rank -> position (first rank -> its position too)
	found        *rankPos
	errors       []RankError
	hasUndecided bool
}

func (en *engine) expectedOf(g *group) []int {
	if !en.corrected {
		return g.members
	}
	if out, ok := en.expected[g]; ok {
		return out
	}
	var out []int
	for _, r := range g.members {
		if en.dumps[r] {
			out = append(out, r)
		}
	}
	if en.expected == nil {
		en.expected = map[*group][]int{}
	}
	en.expected[g] = out
	return out
}

// rankIndex numbers the ranks the engine can meet: those of its lists and
// the members of its groups (only the fixed one in a per-group run).
func (en *engine) rankIndex() *rankIndex {
	var ranks []int
	for _, l := range en.lists {
		ranks = append(ranks, l.rank)
	}
	lists := [][]int{ranks}
	if en.fixed != nil {
		lists = append(lists, en.fixed.members)
	} else {
		for _, g := range en.groups.order {
			lists = append(lists, g.members)
		}
	}
	return newRankIndex(lists...)
}

// run is build_collectives' main loop.
func (en *engine) run() {
	idx := en.rankIndex()
	en.cand, en.found = newRankPos(idx), newRankPos(idx)
	defer func() {
		if r := recover(); r != nil {
			ab, ok := r.(abortError)
			if !ok {
				panic(r)
			}
			en.out.Aborted = ab.msg
			en.addBlock(Block{Kind: BlockAbort, Header: ab.msg})
			en.log(ab.msg)
		}
	}()
	next := 0 // lists before it are gone; only the first list ever goes
	for step := 0; ; step++ {
		if step%256 == 0 && en.ctx != nil {
			if en.err = en.ctx.Err(); en.err != nil {
				return
			}
		}
		for next < len(en.lists) && en.lists[next].gone {
			next++
		}
		if next == len(en.lists) {
			return
		}
		first := en.lists[next]
		if first.live == 0 {
			first.gone = true
			continue
		}
		pos := first.head()
		cur := first.entries[pos]
		g := en.groupAt(first, pos)
		rec := en.newRecord(g, first, cur, pos)
		group := en.findCoalesced(g, first)
		if len(group) > 1 {
			en.coalesced(g, first, rec, len(group))
		} else {
			en.checkCurrentEntryMatch(g, cur, rec, func(r int) *rankList { return en.byRank[r] })
			en.errorAnalysis(g, first.rank, cur, rec, func(r int) *rankList { return en.byRank[r] })
			if rec.allFound() && en.mismatch[g.guid] == 0 {
				en.addCollective(g, true, true)
				for _, r := range rec.found.ranks {
					en.byRank[r].remove(rec.found.at(r))
				}
			} else {
				en.addCollective(g, len(rec.errors) == 0, false)
				for _, r := range rec.candidate.ranks {
					en.byRank[r].remove(rec.candidate.at(r))
				}
			}
		}
		if !first.removed[pos] {
			// Nothing popped the first rank's entry: its rank is not a member
			// of the entry's group (a pg_config that leaves the rank out).
			// fr_trace pops nothing then and loops forever; the replay drops
			// the entry and goes on, so that every step makes progress.
			first.remove(pos)
			en.log(fmt.Sprintf("(replay: rank %d is not a member of group %s; its entry %d was dropped, where fr_trace would loop forever)", first.rank, g.pyGUID, cur.RecordID))
		}
		if en.mismatch[g.guid] > en.cap {
			msg := fmt.Sprintf("Too many mismatches for process_group %s: %s aborting", g.pyGUID, g.desc)
			en.addBlock(Block{Kind: BlockTooMany, Header: msg, GUID: g.guid, PGName: g.name, PGDesc: g.desc})
			en.log(msg)
			return
		}
	}
}

// addCollective counts a Collective record. passCheck is fr_trace's
// pass_check (true unless the record carries errors, so also for missing
// ranks); matched means every expected rank agreed.
func (en *engine) addCollective(g *group, passCheck, matched bool) {
	en.out.Collectives++
	if passCheck {
		en.out.Passed++
	}
	if matched {
		en.matched[g.guid]++
	}
}

func (en *engine) newRecord(g *group, first *rankList, cur *Entry, pos int) *matchRecord {
	en.cand.reset()
	en.found.reset()
	rec := &matchRecord{expected: en.expectedOf(g), first: first, entry: cur, candidate: en.cand, found: en.found}
	rec.candidate.set(first.rank, pos)
	return rec
}

// isOther: rank o is still in all_entries and is not the first rank (the
// record's other_ranks; it does not change while one step is decided).
func (en *engine) isOther(rec *matchRecord, o int) bool {
	l := en.byRank[o]
	return l != nil && !l.gone && l != rec.first
}

// checkCurrentEntryMatch compares cur with the first same-group, same-seq
// entry of every other expected rank still present.
func (en *engine) checkCurrentEntryMatch(g *group, cur *Entry, rec *matchRecord, listOf func(int) *rankList) {
	checked := false // fr_trace parses the op only once it has something to compare
	var curState uint8
	if cur.Sig != 0 && cur.sigSimple {
		curState = stateCode(cur.State)
	}
	for _, o := range rec.expected {
		if !en.isOther(rec, o) {
			continue
		}
		l := listOf(o)
		if l == nil {
			continue
		}
		if p, sl := en.findSame(l, g, cur.PGDesc, cur.CollectiveSeqID); p >= 0 {
			if !checked {
				en.checkOp(cur)
				checked = true
			}
			// Fast path: the same signature and state is a full match (what
			// Match says), decided without loading the other rank's entry.
			if curState != 0 && sl != nil && sl.sig == cur.Sig && l.tab == cur.sigTab && sl.state == curState {
				if en.mismatch[g.guid] == 0 {
					rec.found.set(o, p)
					rec.hasUndecided = false
				} else {
					rec.candidate.set(o, p)
				}
				continue
			}
			e := l.entries[p]
			info := en.match(cur, e, g)
			if (info.State == FullyMatched || info.State == Undecided) && en.mismatch[g.guid] == 0 {
				rec.found.set(o, p)
				rec.hasUndecided = info.State == Undecided
			} else {
				rec.candidate.set(o, p)
				if info.State != FullyMatched && info.State != Undecided {
					rec.errors = append(rec.errors, RankError{Rank: o, State: info.State, Detail: info.Detail})
				}
			}
		}
	}
}

func (rec *matchRecord) foundToCandidate() { rec.found.moveTo(rec.candidate) }

func (rec *matchRecord) candidateToFound() { rec.candidate.moveTo(rec.found) }

// allFound: found holds exactly the expected ranks.
func (rec *matchRecord) allFound() bool {
	if rec.found.len() != len(rec.expected) {
		return false
	}
	for _, r := range rec.expected {
		if !rec.found.has(r) {
			return false
		}
	}
	return true
}

func (en *engine) errorAnalysis(g *group, firstRank int, cur *Entry, rec *matchRecord, listOf func(int) *rankList) {
	var missing []int
	for _, r := range rec.expected {
		if !rec.candidate.has(r) && !rec.found.has(r) {
			missing = append(missing, r)
		}
	}
	allDumped := func(rs []int) bool {
		for _, r := range rs {
			if !en.dumps[r] {
				return false
			}
		}
		return true
	}
	switch {
	case len(missing) > 0 && allDumped(missing):
		en.mismatch[g.guid]++
		en.logEntry(Block{Kind: BlockMissingRanks, MissingRanks: missing},
			fmt.Sprintf("Not all ranks joining collective, sequence number: %d", cur.CollectiveSeqID), g, cur, rec)
		rec.foundToCandidate()
	case rec.candidate.len() == 1 && allDumped(rec.expected):
		if rec.hasUndecided {
			in, out := firstNumel(cur.InputSizes), firstNumel(cur.OutputSizes)
			for _, r := range rec.found.ranks {
				e := listOf(r).entries[rec.found.at(r)]
				in += firstNumel(e.InputSizes)
				out += firstNumel(e.OutputSizes)
			}
			fail := in != out && !(en.major <= 2 && en.minor <= 3)
			if fail {
				en.mismatch[g.guid]++
				en.logEntry(Block{Kind: BlockAllToAll, InputNumel: in, OutputNumel: out},
					fmt.Sprintf("Input/output mismatch in the collective sequence number: %d", cur.CollectiveSeqID), g, cur, rec)
				rec.foundToCandidate()
				rec.errors = append(rec.errors, RankError{Rank: firstRank, State: SizeOrSyntaxMismatch})
			} else {
				rec.candidateToFound()
			}
		} else {
			rec.candidateToFound()
		}
	case len(rec.errors) > 0:
		en.mismatch[g.guid]++
		en.logEntry(Block{Kind: BlockErrors, Errors: rec.errors},
			fmt.Sprintf("Collective sequence number: %d has errors", cur.CollectiveSeqID), g, cur, rec)
		rec.foundToCandidate()
	default:
		rec.foundToCandidate()
		var noDump []int
		for _, r := range rec.expected {
			if !en.dumps[r] {
				noDump = append(noDump, r)
			}
		}
		if len(noDump) > 0 {
			en.mismatch[g.guid]++
			msg := fmt.Sprintf("We cannot decide what's wrong with this collective entry because we missed FR dumps from ranks (%s) so we don't have enough information. If you want to debug further use -j to dump all raw trace", pyIntSet(noDump))
			en.addBlock(en.entryBlock(Block{Kind: BlockCannotDecide, Header: msg, MissingRanks: noDump}, g, cur, rec))
			en.log(msg)
		} else {
			msg := "No errors found for this collective entry, There could be some other reasons why we see collective timeout."
			en.addBlock(en.entryBlock(Block{Kind: BlockNoErrors, Header: msg}, g, cur, rec))
			en.log(msg)
		}
	}
}

func (en *engine) entryBlock(b Block, g *group, cur *Entry, rec *matchRecord) Block {
	b.GUID, b.PGName, b.PGDesc = g.guid, cur.PGName, cur.PGDesc
	b.Seq, b.RecordID, b.ProfilingName = cur.CollectiveSeqID, cur.RecordID, cur.ProfilingName
	b.InputSizes, b.OutputSizes, b.State, b.Frames = cur.InputSizes, cur.OutputSizes, cur.State, cur.Frames
	b.ExpectedRanks = rec.expected
	return b
}

func (en *engine) addBlock(b Block) { en.out.Blocks = append(en.out.Blocks, b) }

// logEntry is EntryState.log: the block fr_trace prints for an error case.
func (en *engine) logEntry(b Block, header string, g *group, cur *Entry, rec *matchRecord) {
	b = en.entryBlock(b, g, cur, rec)
	b.Header = header
	groupInfo := cur.PGName
	if cur.PGDesc != "undefined" {
		groupInfo = cur.PGName + ":" + cur.PGDesc
	}
	lines := []string{header,
		fmt.Sprintf("internal record id: %d", cur.RecordID),
		"group info: " + groupInfo,
		"collective: " + cur.ProfilingName}
	if len(b.MissingRanks) > 0 {
		lines = append(lines, "missing ranks: "+pyIntSet(b.MissingRanks))
	}
	if b.Kind == BlockAllToAll {
		lines = append(lines, fmt.Sprintf("total input numel: %d", b.InputNumel), fmt.Sprintf("total output numel: %d", b.OutputNumel))
	}
	lines = append(lines,
		"input sizes: "+pyList(cur.InputSizes),
		"output sizes: "+pyList(cur.OutputSizes),
		fmt.Sprintf("world size: %d", len(rec.expected)),
		"expected ranks: "+pyIntSet(rec.expected),
		"collective state: "+cur.State)
	if len(b.Errors) > 0 {
		errs := slices.Clone(b.Errors)
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].Rank < errs[j].Rank })
		b.Errors = errs
		var parts []string
		for _, e := range errs {
			parts = append(parts, fmt.Sprintf("Culprit rank %d; %s", e.Rank, e.Info()))
		}
		lines = append(lines, "error msg: "+strings.Join(parts, ", "))
	}
	var frames []string
	for _, f := range cur.Frames {
		frames = append(frames, f.String())
	}
	lines = append(lines, "collective stack trace: \n "+strings.Join(frames, "\n"))
	b.Lines = lines
	en.addBlock(b)
	en.out.Lines = append(en.out.Lines, lines...)
}

// findCoalesced is find_coalesced_group[_with_non_p2p] on one rank's list:
// positions of the entries sharing the head's sequence key.
func (en *engine) findCoalesced(g *group, l *rankList) []int {
	var found []int
	var key int64
	started := false
	for p := l.nextLive(0); p < len(l.entries); p = l.nextLive(p + 1) {
		e := l.entries[p]
		if en.groupAt(l, p) != g {
			continue
		}
		switch {
		case !started:
			key = e.CollectiveSeqID
			if e.IsP2P {
				key = e.P2PSeqID
			}
			started = true
			found = append(found, p)
			continue
		case !e.IsP2P && e.CollectiveSeqID == key, e.IsP2P && e.P2PSeqID == key:
			found = append(found, p)
			continue
		}
		break
	}
	if len(found) <= 1 {
		return nil
	}
	last := l.entries[found[len(found)-1]].ProfilingName
	if en.major <= 2 && en.minor < 7 {
		if last != "nccl:coalesced" && !en.corrected {
			panic(abortError{"AssertionError"})
		}
	} else if strings.HasPrefix(last, "nccl:") && !strings.HasSuffix(last, "_coalesced") {
		msg := fmt.Sprintf("Rank %d does not have a coalesced end.", l.rank)
		en.addBlock(Block{Kind: BlockNoCoalescedEnd, Header: msg, GUID: g.guid, PGName: g.name, PGDesc: g.desc})
		en.log(msg)
	}
	return found
}

// coalesced is the coalesced branch of build_collectives.
func (en *engine) coalesced(g *group, first *rankList, rec *matchRecord, num int) {
	// Gather every expected rank's group (set.pop order: ascending for the
	// small rank numbers of a job; see the package tests).
	type rankGroup struct {
		rank int
		pos  []int
	}
	var groups []rankGroup
	for _, r := range rec.expected {
		l := en.byRank[r]
		var pos []int
		if l != nil && !l.gone {
			pos = en.findCoalesced(g, l)
		}
		for _, p := range pos {
			e := l.entries[p]
			en.checkOp(e)
			switch e.Op.Type {
			case "send":
				if src := localToGlobal(g, e.Op.Src); src != r {
					panic(abortError{fmt.Sprintf("AssertionError: Send src error: %d expected but %s is set", r, pyOptInt(src))})
				}
			case "recv":
				if dst := localToGlobal(g, e.Op.Dst); dst != r {
					panic(abortError{fmt.Sprintf("AssertionError: Recv dst error: %d expected but %s is set", r, pyOptInt(dst))})
				}
			}
		}
		groups = append(groups, rankGroup{r, pos})
	}
	var match bool
	if en.major <= 2 && en.minor < 7 {
		match = en.matchCoalescedP2POnly(g, groups2map(groups, func(x rankGroup) (int, []int) { return x.rank, x.pos }))
	} else {
		match = en.matchCoalescedWithNonP2P(g, rec, groups2map(groups, func(x rankGroup) (int, []int) { return x.rank, x.pos }))
	}
	if match && en.mismatch[g.guid] == 0 {
		en.addCollective(g, true, true)
	} else {
		en.mismatch[g.guid]++
		if match && en.out.Collectives == 0 && !en.corrected {
			panic(abortError{"IndexError: list index out of range"})
		}
	}
	for _, rg := range groups {
		if len(rg.pos) == 0 {
			continue
		}
		l := en.byRank[rg.rank]
		if en.corrected { // each rank's own group
			for _, p := range rg.pos {
				l.remove(p)
			}
			continue
		}
		l.removeFrom(rg.pos[0], num) // fr_trace pops the first rank's group length on every rank
	}
}

type orderedGroups struct {
	ranks []int
	pos   map[int][]int
}

func groups2map[T any](xs []T, kv func(T) (int, []int)) *orderedGroups {
	og := &orderedGroups{pos: map[int][]int{}}
	for _, x := range xs {
		r, p := kv(x)
		og.ranks = append(og.ranks, r)
		og.pos[r] = p
	}
	return og
}

func localToGlobal(g *group, local int) int {
	if local < 0 || local >= len(g.members) {
		return -1
	}
	return g.members[local]
}

func pyOptInt(n int) string {
	if n < 0 {
		return "None"
	}
	return strconv.Itoa(n)
}

// p2pOps turns each rank's group into its remaining ops (positions).
func (en *engine) opsOf(og *orderedGroups) map[int][]*Entry {
	ops := map[int][]*Entry{}
	for _, r := range og.ranks {
		l := en.byRank[r]
		for _, p := range og.pos[r] {
			ops[r] = append(ops[r], l.entries[p])
		}
	}
	return ops
}

// matchCoalescedP2POnly is match_coalesced_groups (versions before 2.7).
func (en *engine) matchCoalescedP2POnly(g *group, og *orderedGroups) bool {
	ops := en.opsOf(og)
	for _, r := range og.ranks {
		l := ops[r]
		if len(l) == 0 {
			return false
		}
		if l[len(l)-1].Op.Type != "coalesced" {
			panic(abortError{"AssertionError"})
		}
		ops[r] = l[:len(l)-1]
	}
	return en.pairP2P(g, og.ranks, ops, true)
}

// pairP2P is the peer-matching loop shared by both coalesced matchers.
func (en *engine) pairP2P(g *group, order []int, ops map[int][]*Entry, p2pOnly bool) bool {
	present := map[int]bool{}
	for _, r := range order {
		present[r] = true
	}
	for {
		first := -1
		for _, r := range order {
			if present[r] {
				first = r
				break
			}
		}
		if first < 0 {
			break
		}
		mine := ops[first]
		if len(mine) == 0 {
			present[first] = false
			continue
		}
		op := mine[0]
		if !op.Op.IsP2POp() {
			if p2pOnly {
				panic(abortError{"NotImplementedError: coalesced collective ops"})
			}
			panic(abortError{"AssertionError: can't get dst of non-p2p op"})
		}
		peer := localToGlobal(g, op.Op.Dst)
		if peer < 0 {
			panic(abortError{"IndexError: list index out of range"})
		}
		if !present[peer] {
			panic(abortError{fmt.Sprintf("KeyError: %d", peer)})
		}
		idx := -1
		for i, other := range ops[peer] {
			if Match(op, other, len(g.members)).State == FullyMatched {
				idx = i
				break
			}
			if !other.Op.IsP2POp() {
				panic(abortError{"AssertionError: can't get src of non-p2p op"})
			}
			if op.Op.Dst == other.Op.Src {
				break
			}
		}
		if idx < 0 {
			en.addBlock(Block{Kind: BlockP2PMismatch, Header: "MISMATCH", GUID: g.guid, PGName: g.name, PGDesc: g.desc,
				Seq: op.CollectiveSeqID, RecordID: op.RecordID, ProfilingName: op.ProfilingName, Frames: op.Frames})
			en.log("MISMATCH ")
			return false
		}
		ops[first] = mine[1:]
		ops[peer] = slices.Delete(slices.Clone(ops[peer]), idx, idx+1)
	}
	en.addBlock(Block{Kind: BlockCoalescedP2POK, Header: "Match", GUID: g.guid, PGName: g.name, PGDesc: g.desc})
	en.log("Match ")
	return true
}

// matchCoalescedWithNonP2P is match_coalesced_groups_with_non_p2p (2.7+).
func (en *engine) matchCoalescedWithNonP2P(g *group, rec *matchRecord, og *orderedGroups) bool {
	ops := en.opsOf(og)
	isP2P := false
	for _, r := range og.ranks {
		for _, e := range ops[r] {
			if e.Op.IsP2POp() {
				isP2P = true
			}
		}
	}
	for _, r := range og.ranks {
		l := ops[r]
		if len(l) == 0 {
			msg := fmt.Sprintf("Rank %d has an empty op list.", r)
			en.addBlock(Block{Kind: BlockEmptyOpList, Header: msg, GUID: g.guid, PGName: g.name, PGDesc: g.desc})
			en.log(msg)
			continue
		}
		if isP2P && l[len(l)-1].Op.Type == "coalesced" {
			ops[r] = l[:len(l)-1]
		}
	}
	if isP2P {
		return en.pairP2P(g, og.ranks, ops, false)
	}
	// Non-P2P: match op by op through the ordinary record machinery, over
	// private copies of the group lists (fr_trace deep-copies them).
	lists := map[int]*rankList{}
	for _, r := range og.ranks {
		var es []*Entry
		for _, p := range og.pos[r] {
			es = append(es, en.byRank[r].entries[p])
		}
		lists[r] = newRankList(r, es, en.resolver(r))
	}
	present := map[int]bool{}
	for _, r := range og.ranks {
		present[r] = true
	}
	for {
		first := -1
		for _, r := range og.ranks {
			if present[r] {
				first = r
				break
			}
		}
		if first < 0 {
			return true
		}
		if len(ops[first]) == 0 {
			present[first] = false
			continue
		}
		l := lists[first]
		pos := l.head()
		if pos >= len(l.entries) {
			panic(abortError{"IndexError: list index out of range"})
		}
		cur := l.entries[pos]
		ops[first] = ops[first][1:]
		rec.entry, rec.errors = cur, nil
		rec.candidate.reset()
		rec.found.reset()
		rec.candidate.set(first, pos)
		listOf := func(r int) *rankList { return lists[r] }
		en.checkCurrentEntryMatch(g, cur, rec, listOf)
		en.errorAnalysis(g, first, cur, rec, listOf)
		if rec.allFound() && en.mismatch[g.guid] == 0 {
			for _, r := range rec.found.ranks {
				lists[r].remove(rec.found.at(r))
				if r != first && len(ops[r]) > 0 {
					ops[r] = ops[r][1:]
				}
			}
			continue
		}
		en.addCollective(g, len(rec.errors) == 0, false)
		return false
	}
}

// Parity runs fr_trace's analysis over dumps (ranks in ascending order, the
// order fr_trace's own tests use).
func Parity(dumps []*Dump, opt ParityOptions) *ParityResult {
	out, _ := ParityContext(context.Background(), dumps, opt)
	return out
}

// ParityContext is Parity that stops with ctx's error once ctx is done.
func ParityContext(ctx context.Context, dumps []*Dump, opt ParityOptions) (*ParityResult, error) {
	out := &ParityResult{}
	if len(dumps) == 0 {
		out.Aborted = "AssertionError: no files loaded"
		return out, nil
	}
	if opt.MismatchCap <= 0 {
		opt.MismatchCap = defaultMismatchCap
	}
	version := dumps[0].Version
	out.Version = version
	abort := func(msg string) (*ParityResult, error) {
		out.Aborted = msg
		out.Blocks = append(out.Blocks, Block{Kind: BlockAbort, Header: msg})
		out.Lines = append(out.Lines, msg)
		return out, nil
	}
	for _, d := range dumps {
		if d.Version != version {
			return abort(fmt.Sprintf("AssertionError: Rank %d has different version %s from the given version %s", d.Rank, d.Version, version))
		}
	}
	major, minor, err := ParseVersion(version)
	if err != nil {
		return abort("AssertionError: " + err.Error())
	}
	// Entries without a process_group were not kept; fr_trace reads the key
	// of every entry and raises on them.
	for _, d := range dumps {
		if d.noGroup > 0 {
			return abort("KeyError: 'process_group'")
		}
	}
	// align_trace_from_beginning: cut every rank at the largest first record id.
	var cut int64
	for _, d := range dumps {
		if len(d.Entries) > 0 && d.Entries[0].RecordID > cut {
			cut = d.Entries[0].RecordID
		}
	}
	groups, _, err := buildGroups(dumps, true)
	if err != nil {
		return abort(err.Error())
	}
	dumped := map[int]bool{}
	for _, d := range dumps {
		dumped[d.Rank] = true
	}
	if !opt.AllowIncompleteRanks {
		var missing []int
		seen := map[int]bool{}
		for _, g := range groups.order {
			for _, r := range g.members {
				if !dumped[r] && !seen[r] {
					seen[r] = true
					missing = append(missing, r)
				}
			}
		}
		sort.Ints(missing)
		if len(missing) > 0 {
			return abort("AssertionError: Missing dump files from ranks " + pyIntSet(missing))
		}
	}
	en := &engine{byRank: map[int]*rankList{}, groups: groups, dumps: dumped, major: major, minor: minor,
		cap: opt.MismatchCap, mismatch: map[string]int{}, out: out, matched: map[string]int{}, ctx: ctx}
	for _, d := range dumps {
		var es []*Entry
		for i := range d.Entries {
			if d.Entries[i].RecordID >= cut {
				es = append(es, &d.Entries[i])
			}
		}
		l := newRankList(d.Rank, es, en.resolver(d.Rank))
		en.lists = append(en.lists, l)
		en.byRank[d.Rank] = l
	}
	en.run()
	if en.err != nil {
		return nil, en.err
	}
	return out, nil
}
