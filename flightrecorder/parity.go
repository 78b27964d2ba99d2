package flightrecorder

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
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
	Version string  `json:"version"`
	Blocks  []Block `json:"blocks"`
	Aborted string  `json:"aborted,omitempty"` // the exception that stopped it
	// Skipped says why the replay was not run: fr_trace's work (and log)
	// per collective follows the members without a dump, and past
	// maxReplayMissing of them it would be megabytes of rank sets.
	Skipped     string   `json:"skipped,omitempty"`
	Collectives int      `json:"collectives"` // Collective records built
	Passed      int      `json:"passed"`      // of which pass_check (which missing ranks do not fail)
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

// abortError stops the replay the way an exception stops fr_trace.
type abortError struct{ msg string }

func (e abortError) Error() string { return e.msg }

// engine runs fr_trace's build_collectives over a set of rank lists.
type engine struct {
	lists    []*rankList // all_entries, in insertion order
	byRank   listsByRank // set by run
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
	corrected  bool
	matched    map[string]int   // fully matched collectives per guid
	fixed      *group           // when set, every entry belongs to this group (per-group runs)
	expected   map[*group][]int // members with a dump, per group (corrected runs)
	noDump     map[*group][]int // expected ranks without a dump, per group
	sets       *memberSets      // the member sets' shared facts (fr_trace runs)
	logBytes   int              // of Lines, bounded by maxLogBytes
	infoBlocks int              // blocks that are no verdict, bounded by maxInfoBlocks
	cand       *rankPos         // scratch for the record being decided
	found      *rankPos
	ctx        context.Context // checked every few hundred steps; nil: never done
	err        error           // ctx's error, when it stopped the run
}

// log keeps a line of fr_trace's log, up to maxLogBytes in all; past it
// one line says that the rest was not kept.
func (en *engine) log(line string) {
	switch {
	case en.logBytes < maxLogBytes:
		en.out.Lines = append(en.out.Lines, line)
	case en.logBytes != math.MaxInt:
		en.out.Lines = append(en.out.Lines, fmt.Sprintf("(replay: the log passed %d bytes; the rest is not kept)", maxLogBytes))
		en.logBytes = math.MaxInt
		return
	default:
		return
	}
	en.logBytes += len(line)
}

// Bounds of the replay: its log, and the members without a dump it walks
// (an fr_trace run with --allow-incomplete-ranks walks and prints them at
// every collective it cannot decide).
const (
	maxLogBytes      = 8 << 20
	maxInfoBlocks    = 4096
	maxReplayMissing = 1 << 16
)

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
	// A rank's entries name a handful of groups: the last few found are
	// kept, so that the lookup by (name, rank) is made once per name.
	var names []string
	var groups []*group
	return func(e *Entry) *group {
		for i, n := range names {
			if n == e.PGName {
				return groups[i]
			}
		}
		g := en.groups.guidOf[nameRank{e.PGName, rank}]
		if len(names) < 8 {
			names, groups = append(names, e.PGName), append(groups, g)
		}
		return g
	}
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
	switch {
	case en.fixed != nil && en.corrected:
		// The analysis' per-group run meets the ranks it compares only.
	case en.fixed != nil:
		lists = append(lists, en.fixed.members)
	default:
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
	en.byRank = newListsByRank(idx, en.lists)
	defer func() {
		if r := recover(); r != nil {
			ab, ok := r.(abortError)
			if !ok {
				panic(r)
			}
			en.out.Aborted = ab.msg
			en.addBlock(Block{Kind: BlockAbort, Header: ab.msg})
			en.out.Lines = append(en.out.Lines, ab.msg) // past the log's bound too
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
			en.checkCurrentEntryMatch(g, cur, rec, func(r int) *rankList { return en.byRank.get(r) })
			en.errorAnalysis(g, first.rank, cur, rec, func(r int) *rankList { return en.byRank.get(r) })
			if rec.allFound() && en.mismatch[g.guid] == 0 {
				en.addCollective(g, true, true)
				for _, r := range rec.found.ranks {
					en.byRank.get(r).remove(rec.found.at(r))
				}
			} else {
				en.addCollective(g, len(rec.errors) == 0, false)
				for _, r := range rec.candidate.ranks {
					en.byRank.get(r).remove(rec.candidate.at(r))
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
			en.out.Lines = append(en.out.Lines, msg)
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
	l := en.byRank.get(o)
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

// noDumpOf is the expected ranks of g without a dump, once per group (the
// member set's, shared, in fr_trace's runs).
func (en *engine) noDumpOf(g *group, expected []int) []int {
	if out, ok := en.noDump[g]; ok {
		return out
	}
	var out []int
	if en.sets != nil && !en.corrected {
		out = en.sets.missingOf(g.set)
	} else {
		for _, r := range expected {
			if !en.dumps[r] {
				out = append(out, r)
			}
		}
	}
	if en.noDump == nil {
		en.noDump = map[*group][]int{}
	}
	en.noDump[g] = out
	return out
}

// pyExpected is fr_trace's text of the expected set: the member set's,
// made once, in fr_trace's runs.
func (en *engine) pyExpected(g *group, expected []int) string {
	if en.sets != nil && !en.corrected {
		s, _ := en.sets.pySets(g.set)
		return s
	}
	return pyIntSet(expected)
}

func (en *engine) errorAnalysis(g *group, firstRank int, cur *Entry, rec *matchRecord, listOf func(int) *rankList) {
	// The expected ranks that joined neither side, kept only while every
	// one of them has a dump (the case that needs them): a member without a
	// dump makes the rest unneeded, and a million-member group a million.
	var missing []int
	missingDumped := true
	for _, r := range rec.expected {
		if !rec.candidate.has(r) && !rec.found.has(r) {
			if !en.dumps[r] {
				missingDumped = false
				break
			}
			missing = append(missing, r)
		}
	}
	noDump := en.noDumpOf(g, rec.expected)
	switch {
	case len(missing) > 0 && missingDumped:
		en.mismatch[g.guid]++
		en.logEntry(Block{Kind: BlockMissingRanks, MissingRanks: missing},
			fmt.Sprintf("Not all ranks joining collective, sequence number: %d", cur.CollectiveSeqID), g, cur, rec)
		rec.foundToCandidate()
	case rec.candidate.len() == 1 && len(noDump) == 0:
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
		if len(noDump) > 0 {
			en.mismatch[g.guid]++
			msg := fmt.Sprintf("We cannot decide what's wrong with this collective entry because we missed FR dumps from ranks (%s) so we don't have enough information. If you want to debug further use -j to dump all raw trace", en.pyNoDump(g, noDump))
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

// addBlock keeps a block; past maxInfoBlocks, only the problem blocks
// (verdicts) are kept: a coalesced step logs one per member without ops.
func (en *engine) addBlock(b Block) {
	if !b.IsProblem() && b.Kind != BlockAbort && b.Kind != BlockTooMany {
		if en.infoBlocks++; en.infoBlocks > maxInfoBlocks {
			return
		}
	}
	en.out.Blocks = append(en.out.Blocks, b)
}

// pyNoDump is fr_trace's text of the ranks without a dump: the member
// set's, made once, in fr_trace's runs.
func (en *engine) pyNoDump(g *group, noDump []int) string {
	if en.sets != nil && !en.corrected {
		_, s := en.sets.pySets(g.set)
		return s
	}
	return pyIntSet(noDump)
}

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
		"expected ranks: "+en.pyExpected(g, rec.expected),
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
	for _, l := range lines {
		en.log(l)
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
	return parityContext(ctx, dumps, opt, newMemberSets(dumps))
}

// parityContext is ParityContext with the member sets of an analysis of
// the same dumps.
func parityContext(ctx context.Context, dumps []*Dump, opt ParityOptions, sets *memberSets) (*ParityResult, error) {
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
	groups, _, err := buildGroups(dumps, true, sets)
	if err != nil {
		return abort(err.Error())
	}
	dumped := map[int]bool{}
	for _, d := range dumps {
		dumped[d.Rank] = true
	}
	var lists [][]int
	missingMembers := 0
	for _, g := range groups.order {
		lists = append(lists, g.members)
		missingMembers += len(sets.missingOf(g.set))
	}
	if !opt.AllowIncompleteRanks {
		if missing := without(unionOf(lists), sets.dumped); len(missing) > 0 {
			return abort("AssertionError: Missing dump files from ranks " + pyIntSet(missing))
		}
	}
	if missingMembers > maxReplayMissing {
		out.Skipped = fmt.Sprintf("fr_trace's replay was not run: its groups have %d members without a dump in all, over the %d it is replayed for (at each collective it cannot decide, fr_trace walks and prints every one of them)",
			missingMembers, maxReplayMissing)
		return out, nil
	}
	en := &engine{groups: groups, dumps: dumped, major: major, minor: minor,
		cap: opt.MismatchCap, mismatch: map[string]int{}, out: out, matched: map[string]int{}, ctx: ctx, sets: sets}
	for _, d := range dumps {
		var es []*Entry
		for i := range d.Entries {
			if d.Entries[i].RecordID >= cut {
				es = append(es, &d.Entries[i])
			}
		}
		l := newRankList(d.Rank, es, en.resolver(d.Rank))
		en.lists = append(en.lists, l)
	}
	en.run()
	if en.err != nil {
		return nil, en.err
	}
	return out, nil
}
