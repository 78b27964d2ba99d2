package flightrecorder

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

func pgLabel(g *group) string { return PGLabel(g.name, g.desc) }

// PGLabel names a process group in a line: its name and description are
// the dump's text, quoted (jobtext).
func PGLabel(name, desc string) string {
	if desc == "" || desc == "undefined" {
		return "pg " + jobtext.Quote(name, jobtext.Name)
	}
	return fmt.Sprintf("pg %s (%s)", jobtext.Quote(name, jobtext.Name), jobtext.Quote(desc, jobtext.Name))
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
				pr.CulpritFrames, pr.CulpritFramesAt = last.Frames, a.framesAt(b.MissingRanks[0], last, true)
			}
		}
		pr.PeerFrames = b.Frames
	case BlockCannotDecide:
		pr.Verdict = "UNDECIDED"
		pr.MissingRanks = []int{}
		pr.Finding = Finding{Kind: KindInsufficient, Seq: b.Seq, Ranks: b.MissingRanks, Confidence: confidenceLow,
			Line: fmt.Sprintf("%s: no dump from rank(s) %s; cannot decide #%d %s", label, rankText(b.MissingRanks), b.Seq, opOf(b.ProfilingName))}
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

// opOf is the op of a profiling name ("nccl:all_reduce"), quoted: the
// dump's text.
func opOf(profilingName string) string {
	if i := strings.LastIndexByte(profilingName, ':'); i >= 0 {
		profilingName = profilingName[i+1:]
	}
	return jobtext.Quote(profilingName, jobtext.Name)
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
		line += fmt.Sprintf(" (%s %s before the last recorded event%s)", jobtext.Token(oldest.State, jobtext.Name), fmtAge(a.refTime-oldest.TimeCreatedNs), timeoutText(oldest))
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
	return "ranks " + rankText(rs) + " are"
}

// ranksWord is "rank 3" or "ranks 0-2".
func ranksWord(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	return "ranks " + rankText(rs)
}

// framesAt names the entry whose stack is shown for rank.
func (a *analysis) framesAt(rank int, e *Entry, last bool) *FramesAt {
	return &FramesAt{Rank: rank, Seq: e.CollectiveSeqID, Op: e.ProfilingName, AgeNs: max(a.refTime-e.TimeCreatedNs, 0), Last: last}
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
		pr.CulpritFrames, pr.CulpritFramesAt = bad.Frames, a.framesAt(culprits[0], bad, false)
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
		desc := jobtext.Token(key, jobtext.Name)
		if !stateVote {
			e := entries[rs[0]]
			desc = jobtext.Quote(describeOp(e, state), jobtext.Line) // the dump's op, sizes, dtypes
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
		f.Line += fmt.Sprintf(" (a tie: cannot tell which side is wrong; fr_trace blames rank %s)", rankText(parity))
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
			l.Note = fmt.Sprintf("#%d timed out (retired, %s)", l.Pending.Seq, jobtext.Token(l.Pending.State, jobtext.Name))
		case l.Pending != nil:
			l.Note = fmt.Sprintf("#%d %s for %s", l.Pending.Seq, jobtext.Token(l.Pending.State, jobtext.Name), fmtAge(int64(l.Pending.AgeSeconds*1e9)))
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
					pr.CulpritFramesAt = a.framesAt(k.src, s[i], false)
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
					pgLabel(g), waiter, side, jobtext.Quote(e.ProfilingName, jobtext.Name), jobtext.Token(e.State, jobtext.Name), fmtAge(a.refTime-e.TimeCreatedNs), other, absent)}, true
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
		return fmt.Sprintf("; pg_status: ranks %s started it, ranks %s never did", rankText(launched), rankText(notLaunched))
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
		Line: fmt.Sprintf("%s: #%d retired without completion on ranks %s (timed out or aborted)", pgLabel(g), s, rankText(bySeq[s]))}, true
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
		Line: fmt.Sprintf("%s: no dump from rank(s) %s; ranks %s agree through #%d", pgLabel(g), rankText(pr.MissingDumps), rankText(ranks), agreed)}
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
