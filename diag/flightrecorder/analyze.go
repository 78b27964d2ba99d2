package flightrecorder

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/probing-mcp/probing-mcp/diag/rankset"
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
	// Limits are the rank and group ceilings; zero fields take PROBING_FR_*
	// or the defaults.
	Limits Limits
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

// AnalyzeContext is Analyze that stops with ctx's error once ctx is done.
// It checks between groups and inside the matching loops, and waits for
// the work it started, so nothing runs on (or holds memory) after it
// returns.
func AnalyzeContext(ctx context.Context, dumps []*Dump, opt Options) (*Report, error) {
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
		par, err := frTraceView(ctx, dumps, opt, &rep.FRTrace)
		parCh <- parityOut{par, err}
	}()
	dq := &rep.DataQuality
	for _, d := range dumps {
		for _, w := range d.Warnings {
			dq.Warnings = append(dq.Warnings, fmt.Sprintf("rank %d (%s): %s", d.Rank, d.Path, w))
		}
	}
	a := newAnalysis(ctx, dumps, dq, lim)
	rep.Ranks = a.rankSummary()

	var kept []*group
	for _, g := range a.groups.order {
		if a.keep(g, opt) {
			kept = append(kept, g)
			if a.data[g] == nil {
				a.data[g] = &pgData{g: g, coll: map[int][]*Entry{}, p2p: map[int][]*Entry{}}
			}
		}
	}
	reports := make([]PGReport, len(kept))
	notes := make([][]string, len(kept))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if ctx.Err() == nil {
					reports[i], notes[i] = a.analyzeGroup(ctx, kept[i], opt)
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
	po := <-parCh
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if po.err != nil {
		return nil, po.err
	}
	par := po.par
	for i := range reports {
		dq.Warnings = append(dq.Warnings, notes[i]...)
		reports[i].FRTrace = frTraceNote(par, &reports[i])
	}
	rep.ProcessGroups = reports
	sortGroups(rep.ProcessGroups)
	rep.Verdict = VerdictOK
	if len(rep.ProcessGroups) > 0 {
		rep.Verdict = rep.ProcessGroups[0].Verdict
	}
	dq.Partial = dq.Partial || len(rep.Ranks.MissingDump) > 0
	rep.Summary = summarize(rep)
	return rep, nil
}

// checkDumpRanks drops the dumps whose rank is outside [0, MaxRanks) (a
// live snapshot or a mapping can carry any number) and lists them as file
// problems.
func checkDumpRanks(dumps []*Dump, lim Limits, dq *DataQuality) []*Dump {
	kept := dumps
	for i, d := range dumps {
		err := lim.checkRank("rank", int64(d.Rank))
		if err == nil {
			if len(kept) < len(dumps) {
				kept = append(kept, d)
			}
			continue
		}
		if len(kept) == len(dumps) {
			kept = append([]*Dump(nil), dumps[:i]...)
		}
		r := d.Rank
		dq.Files = append(dq.Files, FileProblem{Path: d.Path, Rank: &r, Problem: err.Error() + "; not analysed"})
		dq.Partial = true
	}
	return kept
}

// frTraceView runs fr_trace's replay and fills view with its first block
// per group. fr_trace stops at missing dumps; then the view shows what it
// says when told to go on (--allow-incomplete-ranks).
func frTraceView(ctx context.Context, dumps []*Dump, opt Options, view *FRTraceView) (*ParityResult, error) {
	par, err := ParityContext(ctx, dumps, opt.Parity)
	if err != nil {
		return nil, err
	}
	view.Aborted = par.Aborted
	if par.Aborted != "" && !opt.Parity.AllowIncompleteRanks && strings.Contains(par.Aborted, "Missing dump files") {
		p2 := opt.Parity
		p2.AllowIncompleteRanks = true
		if par, err = ParityContext(ctx, dumps, p2); err != nil {
			return nil, err
		}
		view.AbortedIncomplete = par.Aborted
		view.UsedAllowIncomplete = true
	}
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
}

func newAnalysis(ctx context.Context, dumps []*Dump, dq *DataQuality, lim Limits) *analysis {
	a := &analysis{dumps: dumps, byRank: map[int]*Dump{}, data: map[*group]*pgData{}, wrapped: map[int]bool{},
		dq: dq, unknownOp: map[string][]int{}, major: 99, minor: 99, pgid: map[*group]map[int]int64{}, lim: lim}
	for _, d := range dumps {
		a.byRank[d.Rank] = d
		if d.Major < a.major || (d.Major == a.major && d.Minor < a.minor) {
			a.major, a.minor = d.Major, d.Minor
		}
	}
	groups, notes, _ := buildGroups(dumps, false)
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
	all := map[int]bool{}
	for _, d := range a.dumps {
		all[d.Rank] = true
	}
	for _, g := range a.groups.order {
		for _, r := range g.members {
			all[r] = true
		}
	}
	defaultDone := false
	for _, k := range order {
		members := inferred[k]
		how := "the ranks whose entries name it"
		if k.desc == "default_pg" && !defaultDone {
			// There is one default group: a second name claiming it is
			// inferred from its entries like any other.
			defaultDone = true
			members = members[:0]
			for r := range all {
				members = append(members, r)
			}
			how = "every rank (it is the default group)"
		}
		sort.Ints(members)
		members = slices.Compact(members)
		gk := groupKey(k.name, members)
		g, ok := a.groups.byGUID[gk]
		if !ok {
			g = &group{idx: len(a.groups.order), guid: gk, pyGUID: k.name + fmt.Sprint(pyFrozensetHash(members)), name: k.name, desc: k.desc, members: members}
			a.groups.byGUID[gk] = g
			a.groups.order = append(a.groups.order, g)
		}
		for _, r := range members {
			a.groups.guidOf[nameRank{k.name, r}] = g
		}
		a.dq.Warnings = append(a.dq.Warnings, fmt.Sprintf("pg %q (%s) is not in pg_config; members inferred from %s: %s", k.name, k.desc, how, rankset.Format(members)))
	}
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
		lastWasP2P := map[*group]bool{}
		var lastName string
		var lastG *group
		var lastPD *pgData
		for i := range d.Entries {
			e := &d.Entries[i]
			a.noteTimes(e)
			g, pd := lastG, lastPD
			if g == nil || e.PGName != lastName { // entries of one group come in runs: look up once per run
				g = a.resolve(e, d.Rank)
				if g == nil {
					unresolved[fmt.Sprintf("rank %d: pg %q", d.Rank, e.PGName)]++
					continue
				}
				if _, ok := a.groups.guidOf[nameRank{e.PGName, d.Rank}]; !ok {
					a.groups.guidOf[nameRank{e.PGName, d.Rank}] = g
					a.dq.Warnings = append(a.dq.Warnings, fmt.Sprintf(
						"rank %d: entries name pg %q, which its pg_config lacks; used the group its peers registered (ranks %s)",
						d.Rank, e.PGName, rankset.Format(g.members)))
				}
				if a.pgid[g] == nil {
					a.pgid[g] = map[int]int64{}
				}
				pd = a.data[g]
				if pd == nil {
					pd = &pgData{g: g, coll: map[int][]*Entry{}, p2p: map[int][]*Entry{}}
					a.data[g] = pd
				}
				lastName, lastG, lastPD = e.PGName, g, pd
			}
			a.pgid[g][d.Rank] = e.PGID
			if e.Op.Err != "" && !e.Op.IsP2POp() && e.Op.Type != "coalesced" {
				a.unknownOp[e.ProfilingName] = appendLast(a.unknownOp[e.ProfilingName], d.Rank)
			}
			isP2P := e.Op.IsP2POp()
			if e.Op.Type == "coalesced" && (e.IsP2P || lastWasP2P[g]) {
				lastWasP2P[g] = false
				continue // the end marker of a batch of sends/recvs: pairing does not need it
			}
			lastWasP2P[g] = isP2P
			if isP2P {
				pd.p2p[d.Rank] = append(pd.p2p[d.Rank], e)
			} else {
				pd.coll[d.Rank] = append(pd.coll[d.Rank], e)
			}
		}
	}
	for _, k := range sortedKeys(unresolved) {
		a.dq.Warnings = append(a.dq.Warnings, fmt.Sprintf("%s: %d entries of a group that no dump registers for this rank; skipped", k, unresolved[k]))
	}
	for name, ranks := range a.unknownOp {
		a.dq.Warnings = append(a.dq.Warnings, fmt.Sprintf("op %q (ranks %s) is unknown to fr_trace (it aborts there); compared by name, sizes and dtypes", name, rankset.Format(ranks)))
	}
	slices.Sort(a.dq.Warnings[len(a.dq.Warnings)-len(a.unknownOp):])
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

func (a *analysis) rankSummary() RankSummary {
	rs := RankSummary{ReferenceTimeNs: a.refTime}
	named := map[int]bool{}
	for _, g := range a.groups.order {
		for _, r := range g.members {
			named[r] = true
		}
	}
	versions := map[string][]int{}
	formats := map[string]bool{}
	for _, d := range a.dumps {
		rs.Dumped = append(rs.Dumped, d.Rank)
		named[d.Rank] = true
		versions[d.Version] = append(versions[d.Version], d.Rank)
		formats[d.Format] = true
		for _, st := range d.PGStatus {
			if st.LastStarted >= 0 {
				a.timingOn = true
			}
		}
	}
	rs.Expected = len(named)
	for r := range named {
		if a.byRank[r] == nil {
			rs.MissingDump = append(rs.MissingDump, r)
		}
	}
	sort.Ints(rs.MissingDump)
	if rs.MissingDump == nil {
		rs.MissingDump = []int{}
	}
	rs.DumpedText = rankset.Format(rs.Dumped)
	if len(versions) == 1 {
		rs.Versions = a.dumps[0].Version
	} else {
		var parts []string
		for _, v := range sortedKeys(versions) {
			parts = append(parts, fmt.Sprintf("%s (ranks %s)", v, rankset.Format(versions[v])))
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
	pr := PGReport{PGName: g.name, PGDesc: g.desc, Members: g.members, MembersText: rankset.Format(g.members),
		Size: len(g.members), Verdict: VerdictOK, CollectiveSeqID: -1, RecordID: -1,
		MissingRanks: []int{}, CulpritRanks: []int{}, MissingDumps: []int{}, LaggingRanks: []Lag{}, guid: g.guid}
	// Which members can be compared: those with a dump, minus those whose
	// ring wrapped past every entry of this group (they say nothing).
	var ranks []int
	for _, r := range g.members {
		switch {
		case a.byRank[r] == nil:
			pr.MissingDumps = append(pr.MissingDumps, r)
		case len(pd.coll[r]) == 0 && len(pd.p2p[r]) == 0 && a.wrapped[r]:
			pd.notes = append(pd.notes, fmt.Sprintf("rank %d's ring wrapped past every entry of this group; not compared", r))
		default:
			ranks = append(ranks, r)
		}
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
			Line: fmt.Sprintf("%s: no dump from rank(s) %s; verdict drawn from ranks %s", pgLabel(g), rankset.Format(pr.MissingDumps), rankset.Format(ranks))})
	}
	pr.Finding.Evidence = append(pr.Finding.Evidence, pd.notes...)
	pr.LaggingRanks, pr.LagTruncated = a.selectLags(lags, opt)
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
	en := &engine{byRank: map[int]*rankList{}, groups: a.groups, dumps: dumped, major: a.major, minor: a.minor,
		cap: defaultMismatchCap, mismatch: map[string]int{}, out: out, matched: map[string]int{}, corrected: true, fixed: g, ctx: ctx}
	any := false
	for _, r := range ranks {
		l := newRankList(r, lists[r], nil)
		en.lists = append(en.lists, l)
		en.byRank[r] = l
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

func pgLabel(g *group) string {
	if g.desc == "" || g.desc == "undefined" {
		return "pg " + g.name
	}
	return fmt.Sprintf("pg %s (%s)", g.name, g.desc)
}

// entryAt is a rank's first entry with collective sequence number seq.
func entryAt(l []*Entry, seq int64) *Entry {
	i := sort.Search(len(l), func(i int) bool { return l[i].CollectiveSeqID >= seq })
	for ; i < len(l) && l[i].CollectiveSeqID == seq; i++ {
		return l[i]
	}
	// Sequence numbers are not always sorted (coalesced groups share one):
	// fall back to a scan.
	for _, e := range l {
		if e.CollectiveSeqID == seq {
			return e
		}
	}
	return nil
}

// signature is what must agree across ranks for one collective.
func signature(e *Entry) string {
	return fmt.Sprintf("%s in=%s out=%s dtypes=%s/%s", e.Op.Type, pyList(e.InputSizes), pyList(e.OutputSizes), pySet(e.InputDtypes), pySet(e.OutputDtypes))
}

// explainBlock turns the group's first problem block into the verdict, with
// culprits chosen by majority where fr_trace blames "the other rank".
func (a *analysis) explainBlock(pr *PGReport, b *Block, lists map[int][]*Entry, lags map[int]*Lag) {
	g := a.groups.byGUID[b.GUID]
	pr.CollectiveSeqID, pr.ProfilingName, pr.RecordID = b.Seq, b.ProfilingName, b.RecordID
	label := pgLabel(g)
	switch b.Kind {
	case BlockMissingRanks:
		pr.Verdict = VerdictMissingRanks
		pr.MissingRanks = b.MissingRanks
		pr.CulpritRanks = b.MissingRanks
		pr.Finding = a.missingFinding(g, b, lists, lags)
		if len(b.MissingRanks) > 0 {
			if last := lastEntry(lists[b.MissingRanks[0]]); last != nil {
				pr.CulpritFrames = last.Frames
			}
		}
		pr.PeerFrames = b.Frames
	case BlockCannotDecide:
		pr.Verdict = "UNDECIDED"
		pr.MissingRanks = []int{}
		pr.Finding = Finding{Kind: KindInsufficient, Seq: b.Seq, Ranks: b.MissingRanks, Confidence: confidenceLow,
			Line: fmt.Sprintf("%s: no dump from rank(s) %s; cannot decide #%d %s", label, rankset.Format(b.MissingRanks), b.Seq, opOf(b.ProfilingName))}
	case BlockAllToAll:
		pr.Verdict = SizeOrSyntaxMismatch.String()
		pr.Finding = Finding{Kind: KindAllToAllSplit, Seq: b.Seq, Confidence: confidenceMedium,
			Line: fmt.Sprintf("%s: #%d %s total input %d != total output %d elements; no single rank can be blamed", label, b.Seq, opOf(b.ProfilingName), b.InputNumel, b.OutputNumel)}
	case BlockP2PMismatch:
		pr.Verdict = SizeOrSyntaxMismatch.String()
		pr.Finding = Finding{Kind: KindP2PMismatch, Seq: b.Seq, Confidence: confidenceMedium,
			Line: fmt.Sprintf("%s: batched send/recv around #%d do not pair up", label, b.Seq)}
	case BlockErrors:
		a.explainErrors(pr, g, b, lists, lags)
	}
}

func opOf(profilingName string) string {
	if i := strings.LastIndexByte(profilingName, ':'); i >= 0 {
		return profilingName[i+1:]
	}
	return profilingName
}

func lastEntry(l []*Entry) *Entry {
	if len(l) == 0 {
		return nil
	}
	return l[len(l)-1]
}

// missingFinding explains ranks that never joined a collective.
func (a *analysis) missingFinding(g *group, b *Block, lists map[int][]*Entry, lags map[int]*Lag) Finding {
	f := Finding{Kind: KindMissingRank, Seq: b.Seq, Ranks: b.MissingRanks, Confidence: confidenceHigh}
	var waiting []int
	var pendingWaiters int
	var oldest *Entry
	missing := make(map[int]bool, len(b.MissingRanks))
	for _, r := range b.MissingRanks {
		missing[r] = true
	}
	for _, r := range b.ExpectedRanks {
		if missing[r] {
			continue
		}
		if e := entryAt(lists[r], b.Seq); e != nil {
			waiting = append(waiting, r)
			if !a.done(g, r, e) {
				pendingWaiters++
				if oldest == nil || e.TimeCreatedNs < oldest.TimeCreatedNs {
					oldest = e
				}
			}
		}
	}
	var parts []string
	for _, r := range b.MissingRanks {
		l := lags[r]
		switch {
		case l == nil:
			parts = append(parts, fmt.Sprintf("rank %d never joined #%d", r, b.Seq))
		case l.LastEnqueued >= 0 && l.LastEnqueued < b.Seq:
			parts = append(parts, fmt.Sprintf("rank %d completed #%d and never enqueued #%d", r, l.LastCompleted, b.Seq))
		default:
			parts = append(parts, fmt.Sprintf("rank %d (last completed #%d, last enqueued #%d) never joined #%d", r, l.LastCompleted, l.LastEnqueued, b.Seq))
		}
	}
	line := fmt.Sprintf("%s: %s; %s in #%d %s", pgLabel(g), strings.Join(parts, ", "), ranksAre(waiting), b.Seq, opOf(b.ProfilingName))
	if oldest != nil {
		line += fmt.Sprintf(" (%s %s before the last recorded event%s)", oldest.State, fmtAge(a.refTime-oldest.TimeCreatedNs), timeoutText(oldest))
	}
	peak := int64(-1)
	for _, l := range lags {
		peak = max(peak, l.LastEnqueued)
	}
	if peak > b.Seq {
		line += fmt.Sprintf("; peers reached #%d", peak)
	}
	if pendingWaiters == 0 {
		f.Confidence = confidenceLow
		line += "; the peers completed it, so the rank is behind in this snapshot rather than proven stuck"
	}
	f.Line = line
	f.Evidence = append(f.Evidence, b.Header)
	return f
}

// ranksAre is "rank 3 is" or "ranks 0-2 are".
func ranksAre(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d is", rs[0])
	}
	return "ranks " + rankset.Format(rs) + " are"
}

// ranksWord is "rank 3" or "ranks 0-2".
func ranksWord(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	return "ranks " + rankset.Format(rs)
}

func fmtAge(ns int64) string {
	if ns < 0 {
		ns = 0
	}
	s := float64(ns) / 1e9
	switch {
	case s >= 100:
		return fmt.Sprintf("%.0f s", s)
	case s >= 1:
		return fmt.Sprintf("%.1f s", s)
	}
	return fmt.Sprintf("%.0f ms", s*1000)
}

func timeoutText(e *Entry) string {
	if e.TimeoutMs <= 0 {
		return ""
	}
	return fmt.Sprintf(", timeout %s", fmtAge(e.TimeoutMs*1_000_000))
}

// explainErrors picks culprits by majority vote on the op signature (then
// on the state) at the failing sequence number; a tie keeps fr_trace's
// culprits and says so.
func (a *analysis) explainErrors(pr *PGReport, g *group, b *Block, lists map[int][]*Entry, lags map[int]*Lag) {
	bySig := map[string][]int{}
	entries := map[int]*Entry{}
	var order []string
	for _, r := range b.ExpectedRanks {
		e := entryAt(lists[r], b.Seq)
		if e == nil {
			continue
		}
		entries[r] = e
		key := signature(e)
		if _, ok := bySig[key]; !ok {
			order = append(order, key)
		}
		bySig[key] = append(bySig[key], r)
	}
	groupsBy := bySig
	stateVote := len(bySig) == 1
	if stateVote { // same op everywhere: the disagreement is the state
		groupsBy = map[string][]int{}
		order = nil
		for _, r := range b.ExpectedRanks {
			if e := entries[r]; e != nil {
				if _, ok := groupsBy[e.State]; !ok {
					order = append(order, e.State)
				}
				groupsBy[e.State] = append(groupsBy[e.State], r)
			}
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return len(groupsBy[order[i]]) > len(groupsBy[order[j]]) })
	parity := b.Culprits()
	culprits := parity
	majority := ""
	conf := confidenceHigh
	tie := len(order) > 1 && len(groupsBy[order[0]]) == len(groupsBy[order[1]])
	if len(order) > 1 && !tie {
		majority = order[0]
		culprits = nil
		for _, key := range order[1:] {
			culprits = append(culprits, groupsBy[key]...)
		}
		sort.Ints(culprits)
	} else {
		conf = confidenceLow
	}
	pr.CulpritRanks = culprits
	// The verdict: how the culprit's entry differs from the majority's.
	state := b.Errors[0].State
	var ref, bad *Entry
	if len(order) > 0 && len(culprits) > 0 {
		ref = entries[groupsBy[order[0]][0]]
		bad = entries[culprits[0]]
		if ref != nil && bad != nil && !tie {
			if mi := Match(ref, bad, len(g.members)); mi.State != FullyMatched && mi.State != Undecided {
				state = mi.State
			}
		}
	}
	if tie {
		for _, e := range b.Errors {
			if e.Rank == culprits[0] {
				state = e.State
			}
		}
	}
	pr.Verdict = state.String()
	if bad != nil {
		pr.CulpritFrames = bad.Frames
	}
	if ref != nil {
		pr.PeerFrames = ref.Frames
	}
	f := Finding{Seq: b.Seq, Ranks: culprits, Minority: culprits, Confidence: conf, Evidence: []string{b.Header}}
	if !stateVote {
		f.MajoritySignature = majority
	}
	var sides []string
	for _, key := range order {
		rs := groupsBy[key]
		desc := key
		if !stateVote {
			e := entries[rs[0]]
			desc = describeOp(e, state)
		}
		sides = append(sides, fmt.Sprintf("%s %s", ranksWord(rs), desc))
	}
	label := pgLabel(g)
	switch state {
	case CollectiveTypeMismatch:
		f.Kind = KindTypeDivergence
		f.Line = fmt.Sprintf("%s: #%d code-path divergence: %s", label, b.Seq, strings.Join(sides, " vs "))
	case SizeOrSyntaxMismatch:
		f.Kind = KindShapeMismatch
		f.Line = fmt.Sprintf("%s: #%d size mismatch: %s", label, b.Seq, strings.Join(sides, " vs "))
	case CollectiveDtypeMismatch:
		f.Kind = KindDtypeMismatch
		f.Line = fmt.Sprintf("%s: #%d dtype mismatch: %s", label, b.Seq, strings.Join(sides, " vs "))
	default:
		f.Kind = KindStateMismatch
		f.Line = fmt.Sprintf("%s: #%d %s state differs: %s", label, b.Seq, opOf(b.ProfilingName), strings.Join(sides, " vs "))
		if stuck, r := a.pendingAt(g, entries); stuck != nil {
			f.Line += fmt.Sprintf("; the unfinished side is %s old%s", fmtAge(a.refTime-stuck.TimeCreatedNs), timeoutText(stuck))
			if a.timedOut(g, r, stuck) || (stuck.TimeoutMs > 0 && a.refTime-stuck.TimeCreatedNs > stuck.TimeoutMs*1_000_000) {
				f.Confidence = confidenceHigh
			} else {
				f.Confidence = confidenceLow
				f.Line += " (within its timeout: may just be in flight)"
			}
		}
	}
	if tie {
		f.Line += fmt.Sprintf(" (a tie: cannot tell which side is wrong; fr_trace blames rank %s)", rankset.Format(parity))
	}
	pr.Finding = f
}

// pendingAt is the oldest unfinished entry among entries, and its rank.
func (a *analysis) pendingAt(g *group, entries map[int]*Entry) (*Entry, int) {
	var oldest *Entry
	rank := -1
	for r, e := range entries {
		if !a.done(g, r, e) && (oldest == nil || e.TimeCreatedNs < oldest.TimeCreatedNs) {
			oldest, rank = e, r
		}
	}
	return oldest, rank
}

// describeOp names the part of an op that the mismatch is about.
func describeOp(e *Entry, state MatchState) string {
	switch state {
	case CollectiveDtypeMismatch:
		return fmt.Sprintf("%s %s/%s", e.Op.Type, pySet(e.InputDtypes), pySet(e.OutputDtypes))
	case SizeOrSyntaxMismatch:
		return fmt.Sprintf("%s in %s out %s", e.Op.Type, pyList(e.InputSizes), pyList(e.OutputSizes))
	}
	return e.Op.Type
}

// lagTable is each compared rank's progress: pg_status counters where the
// dump has them (joined to the group through the entries' pg_id), else what
// the entries show.
func (a *analysis) lagTable(g *group, ranks []int, lists map[int][]*Entry) map[int]*Lag {
	lags := map[int]*Lag{}
	for _, r := range ranks {
		l := &Lag{Rank: r, LastEnqueued: -1, LastStarted: -1, LastCompleted: -1, Source: "entries"}
		st, found := a.status(g, r)
		if found {
			l.LastEnqueued, l.LastStarted, l.LastCompleted, l.Source = st.LastEnqueued, st.LastStarted, st.LastCompleted, "pg_status"
		}
		for _, e := range lists[r] {
			if !found {
				l.LastEnqueued = max(l.LastEnqueued, e.CollectiveSeqID)
				if e.State == "completed" {
					l.LastCompleted = max(l.LastCompleted, e.CollectiveSeqID)
				}
				if e.State == "started" || e.State == "completed" && a.timingOn {
					l.LastStarted = max(l.LastStarted, e.CollectiveSeqID)
				}
			}
			if l.Pending == nil && !a.done(g, r, e) {
				l.Pending = &PendingOp{Seq: e.CollectiveSeqID, ProfilingName: e.ProfilingName, State: e.State,
					AgeSeconds: float64(a.refTime-e.TimeCreatedNs) / 1e9, TimeoutMs: e.TimeoutMs, TimedOut: a.timedOut(g, r, e)}
			}
		}
		lags[r] = l
	}
	// Behind: how far a rank is from the most advanced member, in enqueued
	// or in completed collectives, whichever is worse.
	peakDone, peakEnq := int64(-1), int64(-1)
	for _, l := range lags {
		peakDone, peakEnq = max(peakDone, l.LastCompleted), max(peakEnq, l.LastEnqueued)
	}
	for _, l := range lags {
		l.Behind, l.EnqueueLag = max(0, peakDone-l.LastCompleted), max(0, peakEnq-l.LastEnqueued)
		switch {
		case l.LastEnqueued >= 0 && l.LastEnqueued < peakEnq && l.LastEnqueued == l.LastCompleted:
			l.Note = fmt.Sprintf("completed #%d and never enqueued #%d; peers reached #%d", l.LastCompleted, l.LastCompleted+1, peakEnq)
		case l.Pending != nil && l.Pending.TimedOut:
			l.Note = fmt.Sprintf("#%d timed out (retired, %s)", l.Pending.Seq, l.Pending.State)
		case l.Pending != nil:
			l.Note = fmt.Sprintf("#%d %s for %s", l.Pending.Seq, l.Pending.State, fmtAge(int64(l.Pending.AgeSeconds*1e9)))
		}
	}
	return lags
}

// selectLags orders the rows worst first (most behind, then the oldest
// pending op) and keeps the first MaxLagRows.
func (a *analysis) selectLags(lags map[int]*Lag, opt Options) ([]Lag, bool) {
	rows := make([]Lag, 0, len(lags))
	for _, l := range lags {
		if len(opt.Ranks) > 0 && !slices.Contains(opt.Ranks, l.Rank) {
			continue
		}
		rows = append(rows, *l)
	}
	// A rank that never enqueued what its peers did is the likeliest cause;
	// one that enqueued it but finished less may only be waiting for it.
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].EnqueueLag != rows[j].EnqueueLag {
			return rows[i].EnqueueLag > rows[j].EnqueueLag
		}
		if rows[i].Behind != rows[j].Behind {
			return rows[i].Behind > rows[j].Behind
		}
		ai, aj := pendingAge(rows[i]), pendingAge(rows[j])
		if ai != aj {
			return ai > aj
		}
		return rows[i].Rank < rows[j].Rank
	})
	// Only ranks that are behind or hold a pending op are worth a row.
	kept := rows[:0]
	for _, l := range rows {
		if l.Behind > 0 || l.EnqueueLag > 0 || l.Pending != nil {
			kept = append(kept, l)
		}
	}
	if len(kept) > opt.MaxLagRows {
		return kept[:opt.MaxLagRows], true
	}
	return kept, false
}

func pendingAge(l Lag) float64 {
	if l.Pending == nil {
		return -1
	}
	return l.Pending.AgeSeconds
}

// p2pFinding pairs every rank's sends with its peers' receives, per
// direction and in order, and reports the first pair that disagrees or a
// pending op whose peer never posted the other side.
func (a *analysis) p2pFinding(pr *PGReport, g *group, ranks []int, pd *pgData) (Finding, bool) {
	compared := map[int]bool{}
	for _, r := range ranks {
		compared[r] = true
	}
	type dir struct{ src, dst int }
	sends, recvs := map[dir][]*Entry{}, map[dir][]*Entry{}
	var dirs []dir
	add := func(m map[dir][]*Entry, k dir, e *Entry) {
		if _, ok := sends[k]; !ok {
			if _, ok := recvs[k]; !ok {
				dirs = append(dirs, k)
			}
		}
		m[k] = append(m[k], e)
	}
	for _, r := range ranks {
		for _, e := range pd.p2p[r] {
			src, dst := localToGlobal(g, e.Op.Src), localToGlobal(g, e.Op.Dst)
			switch {
			case e.Op.Type == "send" && src == r && dst >= 0:
				add(sends, dir{r, dst}, e)
			case e.Op.Type == "recv" && dst == r && src >= 0:
				add(recvs, dir{src, r}, e)
			}
		}
	}
	for _, k := range dirs {
		s, rv := sends[k], recvs[k]
		if !compared[k.src] || !compared[k.dst] {
			continue
		}
		n := min(len(s), len(rv))
		for i := 0; i < n; i++ {
			if mi := Match(s[i], rv[i], len(g.members)); mi.State != FullyMatched {
				if pr != nil {
					pr.Verdict, pr.CollectiveSeqID, pr.ProfilingName, pr.RecordID = SizeOrSyntaxMismatch.String(), s[i].CollectiveSeqID, s[i].ProfilingName, s[i].RecordID
					pr.CulpritRanks = []int{k.src, k.dst}
					pr.CulpritFrames, pr.PeerFrames = s[i].Frames, rv[i].Frames
				}
				return Finding{Kind: KindP2PMismatch, Seq: s[i].CollectiveSeqID, Ranks: []int{k.src, k.dst}, Confidence: confidenceMedium,
					Line: fmt.Sprintf("%s: send #%d from rank %d to rank %d sends %s but the matching recv expects %s", pgLabel(g), i+1, k.src, k.dst, pyList(s[i].InputSizes), pyList(rv[i].OutputSizes))}, true
			}
		}
		var extra []*Entry
		var waiter, absent int
		var side string
		if len(s) > n {
			extra, waiter, absent, side = s[n:], k.src, k.dst, "send"
		} else if len(rv) > n {
			extra, waiter, absent, side = rv[n:], k.dst, k.src, "recv"
		}
		for _, e := range extra {
			if e.State == "completed" || a.wrapped[absent] {
				continue
			}
			if pr != nil {
				pr.Verdict, pr.CollectiveSeqID, pr.ProfilingName, pr.RecordID = VerdictMissingRanks, e.CollectiveSeqID, e.ProfilingName, e.RecordID
				pr.MissingRanks, pr.CulpritRanks = []int{absent}, []int{absent}
				pr.PeerFrames = e.Frames
			}
			other := map[string]string{"send": "recv", "recv": "send"}[side]
			return Finding{Kind: KindP2PUnmatched, Seq: e.CollectiveSeqID, Ranks: []int{absent}, Confidence: confidenceHigh,
				Line: fmt.Sprintf("%s: rank %d's %s (%s, %s %s before the last recorded event) has no matching %s posted on rank %d",
					pgLabel(g), waiter, side, e.ProfilingName, e.State, fmtAge(a.refTime-e.TimeCreatedNs), other, absent)}, true
		}
	}
	return Finding{}, false
}

// pendingFinding reports work that is pending without any disagreement:
// every rank stuck in the same collective, or ops retired by the watchdog.
func (a *analysis) pendingFinding(pr *PGReport, g *group, ranks []int, lists map[int][]*Entry, lags map[int]*Lag) (Finding, bool) {
	if f, ok := a.timedOutFinding(g, ranks, lists); ok {
		pr.CollectiveSeqID = f.Seq
		if e := entryAt(lists[f.Ranks[0]], f.Seq); e != nil {
			pr.ProfilingName, pr.RecordID = e.ProfilingName, e.RecordID
		}
		f.Line += a.launchHint(f.Seq, ranks, lags)
		return f, true
	}
	var seq int64 = -1
	var oldest *Entry
	all := true
	for _, r := range ranks {
		l := lags[r]
		if l == nil || l.Pending == nil {
			all = false
			break
		}
		if seq == -1 {
			seq = l.Pending.Seq
		} else if l.Pending.Seq != seq {
			all = false
			break
		}
		e := entryAt(lists[r], seq)
		if e != nil && (oldest == nil || e.TimeCreatedNs < oldest.TimeCreatedNs) {
			oldest = e
		}
	}
	if !all || len(ranks) == 0 || oldest == nil {
		return Finding{}, false
	}
	pr.CollectiveSeqID, pr.ProfilingName, pr.RecordID = seq, oldest.ProfilingName, oldest.RecordID
	what := "entered"
	suspect := "suspect the network, NCCL/gloo or a GPU"
	if oldest.State == "scheduled" {
		if a.timingOn {
			what, suspect = "enqueued but never launched", "suspect a rank that never launched it"
		} else {
			what, suspect = "enqueued", "timing is off (TORCH_NCCL_ENABLE_TIMING), so launched and queued look alike"
		}
	}
	return Finding{Kind: KindStuck, Seq: seq, Ranks: ranks, Confidence: confidenceMedium,
		Line: fmt.Sprintf("%s: all %d ranks %s #%d %s, none completed it (oldest %s before the last recorded event%s); %s",
			pgLabel(g), len(ranks), what, seq, opOf(oldest.ProfilingName), fmtAge(a.refTime-oldest.TimeCreatedNs), timeoutText(oldest), suspect)}, true
}

// launchHint uses pg_status to tell ranks that launched an op from ranks
// that never did.
func (a *analysis) launchHint(seq int64, ranks []int, lags map[int]*Lag) string {
	var launched, notLaunched []int
	for _, r := range ranks {
		l := lags[r]
		if l == nil || l.Source != "pg_status" || l.LastStarted < 0 {
			continue
		}
		if l.LastStarted >= seq {
			launched = append(launched, r)
		} else {
			notLaunched = append(notLaunched, r)
		}
	}
	if len(launched) > 0 && len(notLaunched) > 0 {
		return fmt.Sprintf("; pg_status: ranks %s started it, ranks %s never did", rankset.Format(launched), rankset.Format(notLaunched))
	}
	return ""
}

func (a *analysis) timedOutFinding(g *group, ranks []int, lists map[int][]*Entry) (Finding, bool) {
	bySeq := map[int64][]int{}
	var seqs []int64
	for _, r := range ranks {
		for _, e := range lists[r] {
			if a.timedOut(g, r, e) {
				if _, ok := bySeq[e.CollectiveSeqID]; !ok {
					seqs = append(seqs, e.CollectiveSeqID)
				}
				// Ranks are distinct and each adds one: a plain append.
				bySeq[e.CollectiveSeqID] = append(bySeq[e.CollectiveSeqID], r)
				break // the first timed-out op of each rank
			}
		}
	}
	if len(seqs) == 0 {
		return Finding{}, false
	}
	slices.Sort(seqs)
	s := seqs[0]
	return Finding{Kind: KindTimedOut, Seq: s, Ranks: bySeq[s], Confidence: confidenceHigh,
		Line: fmt.Sprintf("%s: #%d retired without completion on ranks %s (timed out or aborted)", pgLabel(g), s, rankset.Format(bySeq[s]))}, true
}

// lastCompletedEverywhere is the highest sequence number every compared
// rank completed.
func (a *analysis) lastCompletedEverywhere(g *group, ranks []int, lists map[int][]*Entry) int64 {
	var last int64 = -1
	for i, r := range ranks {
		var done int64 = -1
		for _, e := range lists[r] {
			if a.done(g, r, e) {
				done = max(done, e.CollectiveSeqID)
			}
		}
		if i == 0 || done < last {
			last = done
		}
	}
	return last
}

// insufficientFinding: some members left no dump and the others agree. If
// the others all wait in the same collective, the silent ranks are the
// suspects.
func (a *analysis) insufficientFinding(pr *PGReport, g *group, ranks []int, lists map[int][]*Entry, lags map[int]*Lag) Finding {
	pr.Verdict = "UNDECIDED"
	agreed := a.lastCompletedEverywhere(g, ranks, lists)
	pr.CollectiveSeqID = agreed
	f := Finding{Kind: KindInsufficient, Seq: agreed, Ranks: pr.MissingDumps, Confidence: confidenceMedium,
		Line: fmt.Sprintf("%s: no dump from rank(s) %s; ranks %s agree through #%d", pgLabel(g), rankset.Format(pr.MissingDumps), rankset.Format(ranks), agreed)}
	if stuck, ok := a.pendingFinding(pr, g, ranks, lists, lags); ok && stuck.Kind == KindStuck {
		pr.Verdict = "UNDECIDED"
		f.Seq = stuck.Seq
		f.Line += fmt.Sprintf(" and all wait in #%d %s; the rank(s) without a dump are the likely culprits", stuck.Seq, opOf(pr.ProfilingName))
		pr.CulpritRanks = pr.MissingDumps
		f.Evidence = append(f.Evidence, stuck.Line)
	}
	return f
}

func (a *analysis) okFinding(pr *PGReport, g *group, ranks []int, lists map[int][]*Entry) Finding {
	lastMatched := a.lastCompletedEverywhere(g, ranks, lists)
	pr.CollectiveSeqID = lastMatched
	if len(ranks) == 0 || pr.Window.First < 0 {
		return Finding{Kind: KindHealthy, Seq: -1, Confidence: confidenceHigh, Line: fmt.Sprintf("%s: no collectives recorded", pgLabel(g))}
	}
	return Finding{Kind: KindHealthy, Seq: lastMatched, Confidence: confidenceHigh,
		Line: fmt.Sprintf("%s: %d collectives matched, window #%d-#%d", pgLabel(g), pr.Matched, pr.Window.First, pr.Window.Last)}
}

func (a *analysis) oldestPending(g *group, ranks []int, lists map[int][]*Entry) int64 {
	var t int64
	for _, r := range ranks {
		for _, e := range lists[r] {
			if !a.done(g, r, e) && e.TimeCreatedNs > 0 && (t == 0 || e.TimeCreatedNs < t) {
				t = e.TimeCreatedNs
			}
		}
	}
	return t
}

// frTraceNote compares our verdict on a group with fr_trace's first block.
func frTraceNote(par *ParityResult, pr *PGReport) *FRTraceNote {
	n := &FRTraceNote{Verdict: VerdictOK}
	b := par.FirstProblem(pr.guid)
	switch {
	case b != nil:
		n.Header, n.Verdict = b.Header, blockVerdict(b)
		n.MissingRanks, n.CulpritRanks = b.MissingRanks, b.Culprits()
		if b.Kind == BlockMissingRanks {
			n.CulpritRanks = b.MissingRanks
		}
	case par.Aborted != "":
		n.Verdict, n.Header = "ABORTED", par.Aborted
	}
	if b != nil && b.Kind == BlockCannotDecide {
		// fr_trace's "missing" ranks here are the ones without a dump.
		n.Agrees = pr.Verdict == "UNDECIDED" && slices.Equal(n.MissingRanks, nonNil(pr.MissingDumps))
	} else {
		n.Agrees = n.Verdict == pr.Verdict && slices.Equal(n.MissingRanks, nonNil(pr.MissingRanks)) &&
			(n.Verdict == VerdictOK || n.Verdict == "UNDECIDED" || slices.Equal(n.CulpritRanks, nonNil(pr.CulpritRanks)))
	}
	if !n.Agrees {
		n.Why = whyDifferent(n, pr)
	}
	return n
}

func nonNil(s []int) []int {
	if len(s) == 0 {
		return nil
	}
	return s
}

// blockVerdict maps an fr_trace block to a verdict name.
func blockVerdict(b *Block) string {
	switch b.Kind {
	case BlockMissingRanks:
		return VerdictMissingRanks
	case BlockErrors:
		errs := slices.Clone(b.Errors)
		sort.SliceStable(errs, func(i, j int) bool { return errs[i].Rank < errs[j].Rank })
		return errs[0].State.String()
	case BlockAllToAll, BlockP2PMismatch:
		return SizeOrSyntaxMismatch.String()
	case BlockCannotDecide:
		return "UNDECIDED"
	}
	return VerdictOK
}

func whyDifferent(n *FRTraceNote, pr *PGReport) string {
	switch {
	case n.Verdict == "ABORTED":
		return "fr_trace stopped before reaching this group: " + n.Header
	case n.Verdict == VerdictMissingRanks && pr.Verdict == VerdictOK:
		return "fr_trace's missing ranks are false alarms: it matches send/recv by collective sequence number against every group member (idle ranks look missing), or its record-id alignment was shifted by another group's ops; here P2P ops are paired per peer and ranks are aligned per group"
	case n.Verdict == SizeOrSyntaxMismatch.String() && pr.Verdict == VerdictOK:
		return "fr_trace pairs batched send/recv through the peer's first op and stops at the peer's own send, which fails valid bidirectional batches; here sends and receives are paired per direction"
	case n.Verdict == pr.Verdict && !slices.Equal(n.CulpritRanks, nonNil(pr.CulpritRanks)):
		return fmt.Sprintf("fr_trace blames every rank that differs from the first rank it reads (%s); here the minority against the majority signature is blamed (%s)",
			rankset.Format(n.CulpritRanks), rankset.Format(pr.CulpritRanks))
	case n.Verdict == "UNDECIDED" || pr.Verdict == "UNDECIDED":
		return "missing dumps: fr_trace cannot decide any collective of a group with a missing member; here the members with dumps are compared"
	}
	return "fr_trace reaches this group in a different state (it aligns all groups by record id and stops every group at the first one to exceed the mismatch cap)"
}

// sortGroups puts the most severe verdicts first; among equals, the group
// whose pending op is oldest, since the first hang starves the rest.
func sortGroups(prs []PGReport) {
	slices.SortStableFunc(prs, func(x, y PGReport) int {
		if c := cmp.Compare(y.severity, x.severity); c != 0 {
			return c
		}
		if x.oldestPending != y.oldestPending {
			if x.oldestPending == 0 {
				return 1
			}
			if y.oldestPending == 0 {
				return -1
			}
			return cmp.Compare(x.oldestPending, y.oldestPending)
		}
		return 0
	})
}

func summarize(rep *Report) string {
	var b strings.Builder
	var bad []PGReport
	for _, pr := range rep.ProcessGroups {
		if pr.Finding.Kind != KindHealthy {
			bad = append(bad, pr)
		}
	}
	fmt.Fprintf(&b, "%d rank dump(s) (%s), %d process group(s). ", len(rep.Ranks.Dumped), rep.Ranks.DumpedText, len(rep.ProcessGroups))
	if len(bad) == 0 {
		b.WriteString("Verdict OK: every process group matched")
		if len(rep.Ranks.MissingDump) > 0 {
			fmt.Fprintf(&b, " among the dumped ranks (no dump from %s)", rankset.Format(rep.Ranks.MissingDump))
		}
		b.WriteString(".")
		return b.String()
	}
	top := bad[0]
	fmt.Fprintf(&b, "Verdict %s. %s", top.Verdict, top.Finding.Line)
	if len(top.CulpritRanks) > 0 {
		fmt.Fprintf(&b, ". Culprit rank(s): %s", rankset.Format(top.CulpritRanks))
	}
	b.WriteString(".")
	if len(bad) > 1 {
		fmt.Fprintf(&b, " %d more group(s) affected.", len(bad)-1)
	}
	if top.FRTrace != nil && !top.FRTrace.Agrees {
		fmt.Fprintf(&b, " fr_trace would say %s here; the group's fr_trace note says why.", top.FRTrace.Verdict)
	}
	return b.String()
}
