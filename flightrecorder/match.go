package flightrecorder

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// MatchState is the outcome of comparing two ranks' entries, with the names
// fr_trace uses.
type MatchState int

// Match states, in fr_trace's order.
const (
	FullyMatched MatchState = iota
	CollectiveTypeMismatch
	SizeOrSyntaxMismatch
	CollectiveStateMismatch
	CollectiveDtypeMismatch
	Undecided
)

var matchStateNames = [...]string{
	"FULLY_MATCHED", "COLLECTIVE_TYPE_MISMATCH", "SIZE_OR_SYNTAX_MISMATCH",
	"COLLECTIVE_STATE_MISMATCH", "COLLECTIVE_DTYPE_MISMATCH", "UNDECIDED",
}

func (s MatchState) String() string { return matchStateNames[s] }

// MarshalText writes the state's name in JSON.
func (s MatchState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// MatchInfo is a state plus the detail text fr_trace prints with it.
type MatchInfo struct {
	State  MatchState
	Detail string
}

// String is fr_trace's str(MatchInfo): "Error type: STATE[, detail]".
func (m MatchInfo) String() string {
	if m.Detail != "" {
		return "Error type: " + m.State.String() + ", " + m.Detail
	}
	return "Error type: " + m.State.String()
}

// unevenCollectives may legitimately differ in sizes across ranks.
var unevenCollectives = map[string]bool{"all_to_all": true, "all_to_all_single": true}

// Match compares entry a (the reference) with entry b of another rank in a
// process group of pgSize members, with torch 2.15's Op.match rules. The
// rules are asymmetric, as in fr_trace: a is assumed right.
func Match(a, b *Entry, pgSize int) MatchInfo {
	if a.Sig != 0 && a.Sig == b.Sig && a.sigTab == b.sigTab && a.sigSimple && a.State == b.State {
		return MatchInfo{State: FullyMatched} // same op, sizes and dtypes, and no rule that fails on equal entries
	}
	ta, tb := a.Op.Type, b.Op.Type
	srcMatches := a.Op.Src == AnySource || b.Op.Src == AnySource || a.Op.Src == b.Op.Src
	switch {
	case ta == "send":
		if tb == "recv" && srcMatches && a.Op.Dst == b.Op.Dst && sizesEqual(a.InputSizes, b.OutputSizes) {
			return MatchInfo{State: FullyMatched}
		}
		return MatchInfo{State: SizeOrSyntaxMismatch}
	case ta == "recv":
		if tb == "send" && srcMatches && a.Op.Dst == b.Op.Dst && sizesEqual(a.OutputSizes, b.InputSizes) {
			return MatchInfo{State: FullyMatched}
		}
		return MatchInfo{State: SizeOrSyntaxMismatch}
	case collectives[ta] || (ta != "coalesced" && a.Op.Err != ""):
		// Unknown op names (fr_trace aborts on them) are compared verbatim
		// with the generic collective rules.
		if ta != tb {
			return MatchInfo{CollectiveTypeMismatch, fmt.Sprintf(
				"Expected collective type: '%s' does not match found collective type: '%s'", ta, tb)}
		}
		if !unevenCollectives[ta] && ta != "scatter" && !sizesEqual(a.InputSizes, b.InputSizes) {
			return MatchInfo{SizeOrSyntaxMismatch, fmt.Sprintf(
				"Expected input sizes: '%s' does not match found input sizes: '%s'", pyList(a.InputSizes), pyList(b.InputSizes))}
		}
		if !unevenCollectives[ta] && ta != "gather" && !sizesEqual(a.OutputSizes, b.OutputSizes) {
			return MatchInfo{SizeOrSyntaxMismatch, fmt.Sprintf(
				"Expected output sizes: '%s' does not match found output sizes: '%s'", pyList(a.OutputSizes), pyList(b.OutputSizes))}
		}
		if (ta == "all_reduce" || ta == "allreduce_coalesced") && !sizesEqual(a.InputSizes, b.OutputSizes) {
			return MatchInfo{SizeOrSyntaxMismatch, fmt.Sprintf(
				"Expected input sizes: '%s' does not match found output sizes: '%s'", pyList(a.InputSizes), pyList(b.OutputSizes))}
		}
		switch ta {
		case "all_gather", "_all_gather_base", "all_gather_into_tensor_coalesced":
			if !gatheredNumelMatches(b.OutputSizes, a.InputSizes, pgSize) {
				return MatchInfo{SizeOrSyntaxMismatch, fmt.Sprintf(
					"Found input numel '%d * pg size %d' does not match output numel '%d'", firstNumel(b.InputSizes), pgSize, firstNumel(b.OutputSizes))}
			}
		case "reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced":
			if !gatheredNumelMatches(b.InputSizes, a.OutputSizes, pgSize) {
				return MatchInfo{SizeOrSyntaxMismatch, fmt.Sprintf(
					"Found input numel '%d' does not match output numel '%d * pg size %d'", firstNumel(b.InputSizes), firstNumel(b.OutputSizes), pgSize)}
			}
		}
		if dtypeMismatch(a, b) {
			return MatchInfo{CollectiveDtypeMismatch, fmt.Sprintf(
				"Expected dtypes: '%s' does not match found dtype: '%s/%s/%s'",
				pySet(a.InputDtypes), pySet(a.OutputDtypes), pySet(b.InputDtypes), pySet(b.OutputDtypes))}
		}
		if a.State != b.State {
			return MatchInfo{CollectiveStateMismatch, fmt.Sprintf(
				"Expected state: '%s' does not match found state: '%s'", a.State, b.State)}
		}
		if unevenCollectives[ta] {
			return MatchInfo{State: Undecided}
		}
	case ta == "coalesced":
		if tb != ta {
			return MatchInfo{State: SizeOrSyntaxMismatch}
		}
	}
	return MatchInfo{State: FullyMatched}
}

// firstNumel is math.prod(sizes[0]); an empty list (where Python would raise
// IndexError) counts as 0 elements.
func firstNumel(sizes [][]int64) int64 {
	if len(sizes) == 0 {
		return 0
	}
	return prod(sizes[0])
}

func gatheredNumelMatches(gathered, shard [][]int64, pgSize int) bool {
	if len(gathered) > 0 && len(shard) > 0 && prod(gathered[0]) == prod(shard[0])*int64(pgSize) {
		return true
	}
	var g, s int64
	for _, x := range gathered {
		g += prod(x)
	}
	for _, x := range shard {
		s += prod(x)
	}
	return len(gathered) == pgSize*len(shard) && g == s*int64(pgSize)
}

// dtypeMismatch follows fr_trace: dtype lists compared as sets, and only
// where the first tensor of the compared sides is not a scalar.
func dtypeMismatch(a, b *Entry) bool {
	first := func(s [][]int64) bool { return len(s) > 0 && len(s[0]) > 0 }
	t := a.Op.Type
	if t != "scatter" && t != "gather" && t != "broadcast" &&
		!setEqual(a.InputDtypes, a.OutputDtypes) && first(a.InputSizes) && first(a.OutputSizes) {
		return true
	}
	if t != "scatter" && t != "broadcast" &&
		!setEqual(a.InputDtypes, b.InputDtypes) && first(a.InputSizes) && first(b.InputSizes) {
		return true
	}
	return t != "gather" && !setEqual(a.OutputDtypes, b.OutputDtypes) && first(a.OutputSizes) && first(b.OutputSizes)
}

func setEqual(a, b []string) bool {
	in := func(x string, l []string) bool {
		for _, y := range l {
			if x == y {
				return true
			}
		}
		return false
	}
	for _, x := range a {
		if !in(x, b) {
			return false
		}
	}
	for _, x := range b {
		if !in(x, a) {
			return false
		}
	}
	return true
}

// pySet renders a set of strings like Python (sorted, since CPython's string
// set order changes from run to run anyway).
func pySet(items []string) string {
	seen := map[string]bool{}
	var uniq []string
	for _, s := range items {
		if !seen[s] {
			seen[s] = true
			uniq = append(uniq, s)
		}
	}
	if len(uniq) == 0 {
		return "set()"
	}
	sort.Strings(uniq)
	for i, s := range uniq {
		uniq[i] = "'" + s + "'"
	}
	return "{" + strings.Join(uniq, ", ") + "}"
}

// pyIntSet renders a set of small ints like CPython: {1, 2}, or set().
// Past maxPySetRanks it stops, with the count: "{0, 1, …, 4095, … (N ranks
// in all)}" (fr_trace would print all of a million ranks, per block).
func pyIntSet(ranks []int) string {
	if len(ranks) == 0 {
		return "set()"
	}
	b := make([]byte, 0, 8*min(len(ranks), maxPySetRanks)+32)
	b = append(b, '{')
	for i, r := range ranks {
		if i == maxPySetRanks {
			b = fmt.Appendf(b, ", … (%d ranks in all)", len(ranks))
			break
		}
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, int64(r), 10)
	}
	return string(append(b, '}'))
}

// maxPySetRanks bounds the ranks of one set in fr_trace's log lines.
const maxPySetRanks = 4096
