package flightrecorder

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// frTraceNote compares our verdict on a group with fr_trace's first block.
func frTraceNote(par *ParityResult, pr *PGReport) *FRTraceNote {
	n := &FRTraceNote{Verdict: VerdictOK}
	b := par.FirstProblem(pr.guid)
	switch {
	case b != nil:
		n.Header, n.Verdict, n.Seq = b.Header, blockVerdict(b), b.Seq
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

// Matters says whether fr_trace's view of the group would change what a
// reader does: another culprit, or another hung collective. Its crash on
// dumps it cannot read, the same answer in other words, or two "cannot
// decide"s do not; they are data quality, said once.
func (n *FRTraceNote) Matters(pr *PGReport) bool {
	switch {
	case n == nil || n.Agrees || n.Verdict == "ABORTED":
		return false
	case n.Verdict == "UNDECIDED" && pr.Verdict == "UNDECIDED":
		return false
	case n.Seq != 0 && pr.CollectiveSeqID != 0 && n.Seq != pr.CollectiveSeqID:
		return true
	}
	return !slices.Equal(nonNil(n.CulpritRanks), nonNil(pr.CulpritRanks))
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
			rankText(n.CulpritRanks), rankText(pr.CulpritRanks))
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
			fmt.Fprintf(&b, " among the dumped ranks (no dump from %s)", rankText(rep.Ranks.MissingDump))
		}
		b.WriteString(".")
		return b.String()
	}
	top := bad[0]
	if x := rep.Across; x != nil && acrossSays(x, top) {
		// The group-by-group verdict names a rank that waits elsewhere, or
		// not the rank the waits lead to: the whole-dump reading leads.
		fmt.Fprintf(&b, "Verdict %s. Across the groups: %s", top.Verdict, x.Line)
		if len(x.Culprits) > 0 {
			fmt.Fprintf(&b, ". Culprit rank(s): %s", x.CulpritsText)
		} else {
			b.WriteString(". No culprit named")
		}
		if len(x.Victims) > 0 {
			fmt.Fprintf(&b, ". The group views below name %s, which wait%s in other groups (victims, not culprits)",
				rankWord(x.Victims), map[bool]string{true: "s", false: ""}[len(x.Victims) == 1])
		}
		fmt.Fprintf(&b, ". First group: %s.", top.Finding.Line)
	} else {
		fmt.Fprintf(&b, "Verdict %s. %s", top.Verdict, top.Finding.Line)
		if len(top.CulpritRanks) > 0 {
			fmt.Fprintf(&b, ". Culprit rank(s): %s", rankText(top.CulpritRanks))
		}
		b.WriteString(".")
	}
	if len(bad) > 1 {
		fmt.Fprintf(&b, " %d more group(s) affected.", len(bad)-1)
	}
	if top.FRTrace.Matters(&top) {
		fmt.Fprintf(&b, " fr_trace would say %s here (data quality says how it differs).", top.FRTrace.Verdict)
	}
	return b.String()
}

// acrossSays reports whether the cross-group reading changes what the top
// group's verdict says: only for verdicts about who did not arrive (a
// mismatch is its own evidence), and only when it names other culprits
// or calls one of the group's culprits a victim.
func acrossSays(x *Across, top PGReport) bool {
	switch top.Finding.Kind {
	case KindMissingRank, KindStuck, KindTimedOut, KindInsufficient:
	default:
		return false
	}
	return len(x.Victims) > 0 || !slices.Equal(x.Culprits, top.CulpritRanks)
}
