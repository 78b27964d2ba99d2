package flightrecorder

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// Options tune Analyze.
type Options struct {
	// Parity are the fr_trace switches used for the side-by-side verdict.
	Parity ParityOptions
	// PG keeps only groups whose name or description equals it.
	PG string
	// Ranks keeps only groups with any of these ranks, and only their rows
	// in lagging_ranks.
	Ranks []int
	// Transcript includes fr_trace's full log in the report.
	Transcript bool
	// MaxLagRows bounds lagging_ranks per group (0: 8).
	MaxLagRows int
	// Limits are the rank and group ceilings and the memory ceiling; zero
	// fields take PROBING_FR_* or the defaults.
	Limits Limits
	// Progress, when set, is told after every group (one call at a time).
	Progress func(Progress)
}

// pgData is one process group's entries, split by rank.
type pgData struct {
	g     *group
	coll  map[int][]*Entry // collectives and non-P2P coalesced ends
	p2p   map[int][]*Entry // sends and recvs (coalesced P2P terminators dropped)
	notes []string
}

// AnalyzeLoaded analyses loaded dumps and folds the loading problems into
// the report's data-quality section.
func AnalyzeLoaded(l *Loaded, opt Options) *Report {
	r, _ := AnalyzeLoadedContext(context.Background(), l, opt)
	return r
}

// AnalyzeLoadedContext is AnalyzeLoaded that stops with ctx's error once
// ctx is done.
func AnalyzeLoadedContext(ctx context.Context, l *Loaded, opt Options) (*Report, error) {
	r, err := AnalyzeContext(ctx, l.Dumps, opt)
	if err != nil {
		return nil, err
	}
	r.DataQuality.Files = append(r.DataQuality.Files, l.Problems...)
	r.DataQuality.Ignored = l.Ignored
	if len(r.DataQuality.Files) > 0 {
		r.DataQuality.Partial = true
		r.Summary += fmt.Sprintf(" %d file(s) could not be used (see data_quality).", len(r.DataQuality.Files))
	}
	return r, nil
}

// Analyze finds, for every process group, the first collective where ranks
// disagree or are missing, names the culprit ranks, and explains it with
// progress counters, states and timestamps.
func Analyze(dumps []*Dump, opt Options) *Report {
	r, _ := AnalyzeContext(context.Background(), dumps, opt)
	return r
}

// analyzeContext is AnalyzeContext (tracing.go) untraced.
func analyzeContext(ctx context.Context, dumps []*Dump, opt Options) (*Report, error) {
	lim, _ := opt.Limits.resolved()
	gctx, guard, stop := guardMemory(ctx, lim, "analysing")
	rep, err := analyzeGuarded(gctx, guard, dumps, opt)
	stop()
	if err != nil {
		return nil, ceilingErr(guard, err)
	}
	return rep, nil
}

func analyzeGuarded(ctx context.Context, guard *memGuard, dumps []*Dump, opt Options) (*Report, error) {
	rep := &Report{ProcessGroups: []PGReport{}}
	if opt.MaxLagRows <= 0 {
		opt.MaxLagRows = defaultMaxLagRows
	}
	lim, limErr := opt.Limits.resolved()
	opt.Limits = lim
	if limErr != nil {
		rep.DataQuality.Warnings = append(rep.DataQuality.Warnings, limErr.Error()+"; the default is used")
	}
	dumps = checkDumpRanks(dumps, lim, &rep.DataQuality)
	sets := newMemberSets(dumps)
	dumps = admitMemberships(dumps, lim, sets, &rep.DataQuality)
	if len(dumps) == 0 {
		rep.Verdict = "UNDECIDED"
		rep.Summary = "No dumps to analyse."
		rep.DataQuality.Partial = true
		return rep, ctx.Err()
	}
	// fr_trace's own verdict, for the side-by-side view, computed while the
	// groups are analysed.
	type parityOut struct {
		par *ParityResult
		err error
	}
	parCh := make(chan parityOut, 1)
	go func() {
		par, err := frTraceView(ctx, dumps, opt, sets, &rep.FRTrace)
		parCh <- parityOut{par, err}
	}()
	dq := &rep.DataQuality
	for _, d := range dumps {
		for _, w := range d.Warnings {
			dq.Warnings = append(dq.Warnings, fmt.Sprintf("rank %d (%s): %s", d.Rank, jobtext.QuoteTail(d.Path, jobtext.Path), w))
		}
	}
	a := newAnalysis(ctx, dumps, dq, lim, sets)
	rep.Ranks = a.rankSummary()
	rep.Created = a.created()
	rep.Recent = a.recent()

	var kept []*group
	for _, g := range a.groups.order {
		if a.keep(g, opt) {
			kept = append(kept, g)
			if a.data[g] == nil {
				a.data[g] = &pgData{g: g, coll: map[int][]*Entry{}, p2p: map[int][]*Entry{}}
			}
		}
	}
	if len(kept) == 0 && len(a.groups.order) > 0 && (opt.PG != "" || len(opt.Ranks) > 0) {
		var have []string
		for i, g := range a.groups.order {
			if i == 20 {
				have = append(have, fmt.Sprintf("and %d more", len(a.groups.order)-i))
				break
			}
			h := jobtext.Quote(g.name, jobtext.Name)
			if g.desc != "" && g.desc != g.name {
				h += " (" + jobtext.Quote(g.desc, jobtext.Name) + ")"
			}
			have = append(have, h)
		}
		what := []string{}
		if opt.PG != "" {
			what = append(what, fmt.Sprintf("pg %q", opt.PG))
		}
		if len(opt.Ranks) > 0 {
			what = append(what, "ranks "+rankText(opt.Ranks))
		}
		rep.NoMatch = fmt.Sprintf("no process group matches %s; the dumps' groups are: %s (pass one of those names or descriptions, or ranks they hold: %s)",
			strings.Join(what, " and "), strings.Join(have, ", "), rep.Ranks.DumpedText)
	}
	reports := make([]PGReport, len(kept))
	notes := make([][]string, len(kept))
	prog := newProgress(opt.Progress, "analyse", len(kept))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if ctx.Err() == nil && guard.check() {
					reports[i], notes[i] = a.analyzeGroup(ctx, kept[i], opt)
					prog.add(1, 0, 0)
				}
			}
		}()
	}
	for i := range kept {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	var po parityOut
	select {
	case po = <-parCh:
	default:
		prog.phase("replay", 1)
		po = <-parCh
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if po.err != nil {
		return nil, po.err
	}
	par := po.par
	for i := range reports {
		dq.Warnings = append(dq.Warnings, notes[i]...)
		if par.Skipped == "" {
			reports[i].FRTrace = frTraceNote(par, &reports[i])
		}
	}
	rep.ProcessGroups = reports
	sortGroups(rep.ProcessGroups)
	if opt.PG == "" && len(opt.Ranks) == 0 {
		rep.Across = a.across(rep.ProcessGroups)
	}
	rep.Verdict = VerdictOK
	if len(rep.ProcessGroups) > 0 {
		rep.Verdict = rep.ProcessGroups[0].Verdict
	}
	dq.Partial = dq.Partial || len(rep.Ranks.MissingDump) > 0
	rep.Summary = summarize(rep)
	return rep, nil
}

// frTraceView runs fr_trace's replay and fills view with its first block
// per group. fr_trace stops at missing dumps; then the view shows what it
// says when told to go on (--allow-incomplete-ranks).
func frTraceView(ctx context.Context, dumps []*Dump, opt Options, sets *memberSets, view *FRTraceView) (*ParityResult, error) {
	par, err := parityContext(ctx, dumps, opt.Parity, sets)
	if err != nil {
		return nil, err
	}
	view.Aborted = par.Aborted
	if par.Aborted != "" && !opt.Parity.AllowIncompleteRanks && strings.Contains(par.Aborted, "Missing dump files") {
		p2 := opt.Parity
		p2.AllowIncompleteRanks = true
		if par, err = parityContext(ctx, dumps, p2, sets); err != nil {
			return nil, err
		}
		view.AbortedIncomplete = par.Aborted
		view.UsedAllowIncomplete = true
	}
	view.Skipped = par.Skipped
	seen := map[string]bool{}
	for _, b := range par.Blocks {
		if b.IsProblem() && !seen[b.GUID] {
			seen[b.GUID] = true
			view.Blocks = append(view.Blocks, b)
		}
	}
	if opt.Transcript {
		view.Transcript = par.Lines
	}
	return par, nil
}

// analysis holds what all groups share. Groups are analysed in parallel;
// during that phase it is read-only.
type analysis struct {
	dumps     []*Dump
	byRank    map[int]*Dump
	groups    *groupTable
	data      map[*group]*pgData
	wrapped   map[int]bool
	major     int
	minor     int
	refTime   int64
	timingOn  bool
	dq        *DataQuality
	unknownOp map[string][]int // op name -> ranks
	pgid      map[*group]map[int]int64
	statuses  map[*group]map[int]PGStatus // by rank, where it has them; filled once after split
	lim       Limits
	sets      *memberSets
}

func newAnalysis(ctx context.Context, dumps []*Dump, dq *DataQuality, lim Limits, sets *memberSets) *analysis {
	a := &analysis{dumps: dumps, byRank: map[int]*Dump{}, data: map[*group]*pgData{}, wrapped: map[int]bool{},
		dq: dq, unknownOp: map[string][]int{}, major: 99, minor: 99, pgid: map[*group]map[int]int64{}, lim: lim, sets: sets}
	for _, d := range dumps {
		a.byRank[d.Rank] = d
		if d.Major < a.major || (d.Major == a.major && d.Minor < a.minor) {
			a.major, a.minor = d.Major, d.Minor
		}
	}
	groups, notes, _ := buildGroups(dumps, false, sets)
	a.groups = groups
	dq.Warnings = append(dq.Warnings, notes...)
	a.inferGroups(ctx)
	a.split(ctx)
	a.indexStatuses()
	return a
}

// indexStatuses joins every rank's pg_status to the groups through the
// pg_id its entries carry, once, so that the per-entry completion checks of
// the parallel phase are map reads. Only the ranks that have counters for
// a group are stored: memory follows the (group, rank) pairs present.
func (a *analysis) indexStatuses() {
	byID := map[int]map[string]PGStatus{} // per rank: pg_status by pg id (the last one wins, as before)
	a.statuses = map[*group]map[int]PGStatus{}
	for g, ids := range a.pgid {
		rs := map[int]PGStatus{}
		for r, id := range ids {
			sts, ok := byID[r]
			if !ok {
				sts = map[string]PGStatus{}
				for _, st := range a.byRank[r].PGStatus {
					sts[st.PGID] = st
				}
				byID[r] = sts
			}
			if st, ok := sts[strconv.FormatInt(id, 10)]; ok {
				rs[r] = st
			}
		}
		a.statuses[g] = rs
	}
}

// inferGroups creates the groups that entries name but no pg_config
// registers (gloo's recorder leaves pg_config unusable). Members are the
// ranks whose entries name the group; the default group holds every rank.
// A member that never recorded an op on such a group cannot be seen, and
// the warning says so.
func (a *analysis) inferGroups(ctx context.Context) {
	type key struct{ name, desc string }
	inferred := map[key][]int{}
	var order []key
	skipped := 0
	for _, d := range a.dumps {
		if ctx.Err() != nil {
			return // the caller reports it
		}
		lastKnown := "\x00"
		for i := range d.Entries {
			e := &d.Entries[i]
			if e.PGName == lastKnown {
				continue // entries of one group come in runs
			}
			if a.resolve(e, d.Rank) != nil {
				lastKnown = e.PGName
				continue
			}
			k := key{e.PGName, e.PGDesc}
			if _, ok := inferred[k]; !ok {
				if len(order) == a.lim.MaxGroups {
					skipped++
					continue
				}
				order = append(order, k)
			}
			inferred[k] = appendLast(inferred[k], d.Rank)
		}
	}
	if skipped > 0 {
		a.dq.Warnings = append(a.dq.Warnings, fmt.Sprintf("entries name more than %d process groups that no pg_config registers; the entries of the rest are not analysed (%d runs; set %s higher if a job really has that many)",
			a.lim.MaxGroups, skipped, EnvMaxGroups))
	}
	defaultDone := false
	for _, k := range order {
		members := inferred[k]
		how := "the ranks whose entries name it"
		if k.desc == "default_pg" && !defaultDone {
			// There is one default group: a second name claiming it is
			// inferred from its entries like any other.
			defaultDone = true
			members = a.allRanks()
			how = "every rank (it is the default group)"
		} else {
			sort.Ints(members)
			members = slices.Compact(members)
		}
		ms := a.sets.ofSorted(members)
		g, _ := a.groups.add(k.name, k.desc, ms)
		for _, r := range a.sets.presentOf(ms) {
			// Only ranks with a dump have entries to resolve.
			a.groups.guidOf[nameRank{k.name, r}] = g
		}
		a.dq.Warnings = append(a.dq.Warnings, fmt.Sprintf("%s is not in pg_config; members inferred from %s: %s", PGLabel(k.name, k.desc), how, a.sets.textOf(ms)))
	}
}

// allRanks is every rank the dumps name: their own, and the members of
// every group, sorted; each distinct member list is read once.
func (a *analysis) allRanks() []int {
	lists := [][]int{a.sets.dumped}
	for _, g := range a.groups.order {
		lists = append(lists, g.members)
	}
	return unionOf(lists)
}

// resolve finds the group of an entry. A rank registers a group lazily, so
// an entry can name a group its own pg_config lacks: then the group of that
// name its peers registered, if exactly one contains the rank, is used.
func (a *analysis) resolve(e *Entry, rank int) *group {
	if g, ok := a.groups.guidOf[nameRank{e.PGName, rank}]; ok {
		return g
	}
	var match *group
	for _, g := range a.groups.order {
		if g.name == e.PGName && g.has(rank) {
			if match != nil {
				return nil
			}
			match = g
		}
	}
	return match
}

// split files every entry under its group and rank, collectives and P2P
// apart, and notes timing and the reference time.
func (a *analysis) split(ctx context.Context) {
	unresolved := map[string]int{}
	for _, d := range a.dumps {
		if ctx.Err() != nil {
			return // the caller reports it
		}
		if len(d.Entries) > 0 && d.Entries[0].RecordID > 0 {
			a.wrapped[d.Rank] = true
		}
		// A rank's entries name a handful of groups, interleaved: each is
		// resolved once per dump, and what is filed under it is gathered
		// here and stored once, not looked up per entry.
		var mine []*rankGroup
		var cur *rankGroup
		for i := range d.Entries {
			e := &d.Entries[i]
			a.noteTimes(e)
			if cur == nil || e.PGName != cur.name {
				cur = nil
				for _, rg := range mine {
					if rg.name == e.PGName {
						cur = rg
						break
					}
				}
				if cur == nil {
					cur = a.rankGroupOf(e, d.Rank)
					mine = append(mine, cur)
				}
			}
			if cur.g == nil {
				unresolved[fmt.Sprintf("rank %d: pg %s", d.Rank, jobtext.Quote(e.PGName, jobtext.Name))]++
				continue
			}
			cur.pgid = e.PGID
			if e.opBad && !e.Op.IsP2POp() && e.Op.Type != "coalesced" {
				a.unknownOp[e.ProfilingName] = appendLast(a.unknownOp[e.ProfilingName], d.Rank)
			}
			isP2P := e.Op.IsP2POp()
			if e.Op.Type == "coalesced" && (e.IsP2P || cur.lastWasP2P) {
				cur.lastWasP2P = false
				continue // the end marker of a batch of sends/recvs: pairing does not need it
			}
			cur.lastWasP2P = isP2P
			if isP2P {
				cur.p2p = append(cur.p2p, e)
			} else {
				cur.coll = append(cur.coll, e)
			}
		}
		for _, rg := range mine {
			if rg.g == nil {
				continue
			}
			a.pgid[rg.g][d.Rank] = rg.pgid
			if len(rg.coll) > 0 {
				rg.pd.coll[d.Rank] = appendOrTake(rg.pd.coll[d.Rank], rg.coll)
			}
			if len(rg.p2p) > 0 {
				rg.pd.p2p[d.Rank] = appendOrTake(rg.pd.p2p[d.Rank], rg.p2p)
			}
		}
	}
	for _, k := range sortedKeys(unresolved) {
		a.dq.Warnings = append(a.dq.Warnings, fmt.Sprintf("%s: %d entries of a group that no dump registers for this rank; skipped", k, unresolved[k]))
	}
	for name, ranks := range a.unknownOp {
		a.dq.Warnings = append(a.dq.Warnings, fmt.Sprintf("op %s (ranks %s) is unknown to fr_trace (it aborts there); compared by name, sizes and dtypes", jobtext.Quote(name, jobtext.Name), rankText(ranks)))
	}
	slices.Sort(a.dq.Warnings[len(a.dq.Warnings)-len(a.unknownOp):])
}

// rankGroup is what split gathers of one rank's entries of one group.
type rankGroup struct {
	name       string
	g          *group // nil: no group found; the entries are counted as unresolved
	pd         *pgData
	coll, p2p  []*Entry
	lastWasP2P bool
	pgid       int64 // the pg_id of the group's last entry
}

func appendOrTake(prev, more []*Entry) []*Entry {
	if len(prev) == 0 {
		return more
	}
	return append(prev, more...)
}

// rankGroupOf resolves the group of e's name for rank, the first time the
// rank's dump names it.
func (a *analysis) rankGroupOf(e *Entry, rank int) *rankGroup {
	rg := &rankGroup{name: e.PGName}
	g := a.resolve(e, rank)
	if g == nil {
		return rg
	}
	if _, ok := a.groups.guidOf[nameRank{e.PGName, rank}]; !ok {
		a.groups.guidOf[nameRank{e.PGName, rank}] = g
		a.dq.Warnings = append(a.dq.Warnings, fmt.Sprintf(
			"rank %d: entries name pg %s, which its pg_config lacks; used the group its peers registered (ranks %s)",
			rank, jobtext.Quote(e.PGName, jobtext.Name), a.sets.textOf(g.set)))
	}
	if a.pgid[g] == nil {
		a.pgid[g] = map[int]int64{}
	}
	pd := a.data[g]
	if pd == nil {
		pd = &pgData{g: g, coll: map[int][]*Entry{}, p2p: map[int][]*Entry{}}
		a.data[g] = pd
	}
	rg.g, rg.pd = g, pd
	return rg
}

// appendLast appends r unless it is already the last element: enough where
// a rank's values are appended in one run (one dump after another), and
// O(1) where a search of the list would make a large job quadratic.
func appendLast(s []int, r int) []int {
	if len(s) > 0 && s[len(s)-1] == r {
		return s
	}
	return append(s, r)
}

// status is rank r's pg_status counters for group g, joined through the
// process-local pg_id its entries carry.
func (a *analysis) status(g *group, r int) (PGStatus, bool) {
	st, ok := a.statuses[g][r]
	return st, ok
}

// done reports whether rank r finished collective e: its state says so, or
// the rank's pg_status completion counter passed it. The generic (gloo)
// recorder never moves states past "scheduled", so the counter is the only
// evidence of completion there.
func (a *analysis) done(g *group, r int, e *Entry) bool {
	if e.State == "completed" {
		return true
	}
	if st, ok := a.status(g, r); ok && !e.Op.IsP2POp() && e.CollectiveSeqID <= st.LastCompleted {
		return true
	}
	return false
}

// timedOut: retired by the watchdog without completing.
func (a *analysis) timedOut(g *group, r int, e *Entry) bool { return e.Retired && !a.done(g, r, e) }

func (a *analysis) noteTimes(e *Entry) {
	for _, t := range []int64{e.TimeCreatedNs, e.TimeStartedNs, e.TimeCompletedNs} {
		if t > a.refTime {
			a.refTime = t
		}
	}
	if e.State == "started" || e.HasDuration || e.TimeStartedNs > 0 {
		a.timingOn = true
	}
}

// created is each dumped rank's last entries' creation times, oldest
// first (record order is creation order within one recorder).
func (a *analysis) created() map[int][]int64 {
	out := map[int][]int64{}
	for _, d := range a.dumps {
		var ts []int64
		for i := len(d.Entries) - 1; i >= 0 && len(ts) < createdKept; i-- {
			if t := d.Entries[i].TimeCreatedNs; t > 0 {
				ts = append(ts, t)
			}
		}
		slices.Sort(ts)
		if len(ts) > 0 {
			out[d.Rank] = ts
		}
	}
	return out
}

func (a *analysis) rankSummary() RankSummary {
	rs := RankSummary{ReferenceTimeNs: a.refTime}
	named := a.allRanks()
	versions := map[string][]int{}
	formats := map[string]bool{}
	for _, d := range a.dumps {
		rs.Dumped = append(rs.Dumped, d.Rank)
		versions[d.Version] = append(versions[d.Version], d.Rank)
		formats[d.Format] = true
		for _, st := range d.PGStatus {
			if st.LastStarted >= 0 {
				a.timingOn = true
			}
		}
	}
	rs.Expected = len(named)
	rs.MissingDump = without(named, a.sets.dumped)
	rs.MissingText = rankText(rs.MissingDump)
	if rs.MissingDump == nil {
		rs.MissingDump = []int{}
	}
	rs.DumpedText = rankText(rs.Dumped)
	if len(versions) == 1 {
		rs.Versions = a.dumps[0].Version
	} else {
		var parts []string
		for _, v := range sortedKeys(versions) {
			parts = append(parts, fmt.Sprintf("%s (ranks %s)", v, rankText(versions[v])))
		}
		rs.Versions = strings.Join(parts, ", ")
		a.dq.Warnings = append(a.dq.Warnings, "dumps have different format versions ("+rs.Versions+"); fr_trace refuses this, here they are analysed together with the oldest version's rules")
	}
	rs.Formats = strings.Join(sortedKeys(formats), "+")
	rs.TimingOn = a.timingOn
	return rs
}

func (a *analysis) keep(g *group, opt Options) bool {
	if opt.PG != "" && g.name != opt.PG && g.desc != opt.PG {
		return false
	}
	if len(opt.Ranks) > 0 {
		for _, r := range opt.Ranks {
			if g.has(r) {
				return true
			}
		}
		return false
	}
	return true
}

// analyzeGroup is the corrected analysis of one group. It returns the
// data-quality warnings it found rather than adding them, as groups run in
// parallel.
func (a *analysis) analyzeGroup(ctx context.Context, g *group, opt Options) (PGReport, []string) {
	pd := a.data[g]
	// The member set's facts are shared with every group naming the same
	// list (read-only): the members without a dump are not walked per group.
	pr := PGReport{PGName: g.name, PGDesc: g.desc, Members: g.members, MembersText: a.sets.textOf(g.set),
		Size: len(g.members), Verdict: VerdictOK, CollectiveSeqID: -1, RecordID: -1,
		MissingRanks: []int{}, CulpritRanks: []int{}, MissingDumps: a.sets.missingOf(g.set), MissingDumpsText: a.sets.missingTextOf(g.set),
		LaggingRanks: []Lag{}, guid: g.guid}
	// Which members can be compared: those with a dump, minus those whose
	// ring wrapped past every entry of this group (they say nothing).
	var ranks []int
	for _, r := range a.sets.presentOf(g.set) {
		if len(pd.coll[r]) == 0 && len(pd.p2p[r]) == 0 && a.wrapped[r] {
			pd.notes = append(pd.notes, fmt.Sprintf("rank %d's ring wrapped past every entry of this group; not compared", r))
			continue
		}
		ranks = append(ranks, r)
	}
	// Align on the collectives every compared rank still holds: a ring that
	// wrapped dropped the oldest ones, on each rank at a different point.
	start, last := int64(-1), int64(-1)
	for _, r := range ranks {
		if l := pd.coll[r]; len(l) > 0 {
			start = max(start, l[0].CollectiveSeqID)
			last = max(last, l[len(l)-1].CollectiveSeqID)
		}
	}
	pr.Window = Window{First: start, Last: last}
	lists := map[int][]*Entry{}
	for _, r := range ranks {
		for _, e := range pd.coll[r] {
			if e.CollectiveSeqID >= start {
				lists[r] = append(lists[r], e)
			}
		}
	}
	res := a.runGroup(ctx, g, ranks, lists)
	pr.Matched = res.matched
	var warnings []string
	if res.aborted != "" {
		warnings = append(warnings, fmt.Sprintf("%s: matching stopped: %s", pgLabel(g), res.aborted))
	}

	lags := a.lagTable(g, ranks, lists)
	if b := res.first; b != nil {
		a.explainBlock(&pr, b, lists, lags)
	} else if f, ok := a.p2pFinding(&pr, g, ranks, pd); ok {
		pr.Finding = f
	} else if len(pr.MissingDumps) > 0 {
		pr.Finding = a.insufficientFinding(&pr, g, ranks, lists, lags)
	} else if f, ok := a.pendingFinding(&pr, g, ranks, lists, lags); ok {
		pr.Finding = f
	} else {
		pr.Finding = a.okFinding(&pr, g, ranks, lists)
	}
	if pr.Finding.Kind != KindP2PUnmatched && pr.Finding.Kind != KindP2PMismatch && res.first != nil {
		if f, ok := a.p2pFinding(nil, g, ranks, pd); ok {
			pr.Secondary = append(pr.Secondary, f)
		}
	}
	if f, ok := a.timedOutFinding(g, ranks, lists); ok && pr.Finding.Kind != KindTimedOut {
		pr.Secondary = append(pr.Secondary, f)
	}
	if len(pr.MissingDumps) > 0 && pr.Finding.Kind != KindInsufficient {
		pr.Secondary = append(pr.Secondary, Finding{Kind: KindInsufficient, Confidence: confidenceHigh, Seq: -1, Ranks: pr.MissingDumps,
			Line: fmt.Sprintf("%s: no dump from rank(s) %s; verdict drawn from ranks %s", pgLabel(g), rankText(pr.MissingDumps), rankText(ranks))})
	}
	pr.Finding.Evidence = append(pr.Finding.Evidence, pd.notes...)
	pr.LaggingRanks, pr.LagTruncated = a.selectLags(lags, opt)
	pr.Arrival = arrival(g, ranks, lists)
	// JSON readers get arrays, never null.
	for _, l := range []*[]int{&pr.MissingRanks, &pr.CulpritRanks, &pr.MissingDumps} {
		if *l == nil {
			*l = []int{}
		}
	}
	pr.severity = kindSeverity[pr.Finding.Kind]
	pr.oldestPending = a.oldestPending(g, ranks, lists)
	return pr, warnings
}

var kindSeverity = map[string]int{
	KindTypeDivergence: 90, KindShapeMismatch: 85, KindDtypeMismatch: 80, KindAllToAllSplit: 78,
	KindP2PMismatch: 75, KindMissingRank: 70, KindP2PUnmatched: 65, KindTimedOut: 60, KindStuck: 50,
	KindStateMismatch: 40, KindInsufficient: 30, KindUnknownOp: 20, KindHealthy: 0,
}

type groupResult struct {
	first   *Block
	matched int
	blocks  []Block
	aborted string
}

// runGroup runs the fr_trace matcher on one group's aligned collectives,
// with every member that left a dump as the expected set.
func (a *analysis) runGroup(ctx context.Context, g *group, ranks []int, lists map[int][]*Entry) groupResult {
	out := &ParityResult{}
	dumped := map[int]bool{}
	for _, r := range ranks {
		dumped[r] = true
	}
	// Expected are the members compared (ranks), and the engine meets no
	// other rank: its per-rank arrays follow them, not the group's size.
	en := &engine{groups: a.groups, dumps: dumped, major: a.major, minor: a.minor,
		cap: defaultMismatchCap, mismatch: map[string]int{}, out: out, matched: map[string]int{}, corrected: true, fixed: g, ctx: ctx,
		expected: map[*group][]int{g: ranks}}
	any := false
	for _, r := range ranks {
		l := newRankList(r, lists[r], nil)
		en.lists = append(en.lists, l)
		any = any || len(lists[r]) > 0
	}
	if any {
		en.run()
	}
	res := groupResult{matched: en.matched[g.guid], blocks: out.Blocks, aborted: out.Aborted}
	for i := range out.Blocks {
		if out.Blocks[i].IsProblem() {
			res.first = &out.Blocks[i]
			break
		}
	}
	return res
}
