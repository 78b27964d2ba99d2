// Package rankset prints and parses sets of ranks as compact ranges, the way
// people write them: "0-511,513-1023". A 1024-rank job's rank list is then a
// dozen characters in an LLM's context, not four kilobytes.
package rankset

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Format renders ranks (any order, duplicates allowed) as sorted ranges.
// An empty set is "".
func Format(ranks []int) string {
	if len(ranks) == 0 {
		return ""
	}
	s := slices.Compact(slices.Sorted(slices.Values(ranks)))
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}

// MaxParsed bounds how many ranks Parse expands, so "0-999999999" is an
// error rather than a gigabyte.
const MaxParsed = 1 << 20

// Parse reads "0-3,7,9-10" (spaces allowed) into sorted, unique ranks.
func Parse(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil || a < 0 {
			return nil, fmt.Errorf("rank set %q: %q is not a rank or a range like 0-7", s, part)
		}
		b := a
		if isRange {
			b, err = strconv.Atoi(strings.TrimSpace(hi))
			if err != nil || b < a {
				return nil, fmt.Errorf("rank set %q: %q is not a range like 0-7", s, part)
			}
		}
		if len(out)+(b-a+1) > MaxParsed {
			return nil, fmt.Errorf("rank set %q: more than %d ranks", s, MaxParsed)
		}
		for r := a; r <= b; r++ {
			out = append(out, r)
		}
	}
	return slices.Compact(slices.Sorted(slices.Values(out))), nil
}

// MaxText is how much of a rank set a text rendering shows: a large job's
// sets with holes (every tenth node down) run to kilobytes.
const MaxText = 120

// Short cuts a long formatted rank set at a range boundary within MaxText
// bytes and says how many ranks it holds in all (a JSON answer keeps the
// whole set; text for a person or a model shows this).
func Short(set string) string { return ShortTo(set, MaxText) }

// ShortTo is Short within max bytes (a set named again, after the line
// that gave it at MaxText, needs less).
func ShortTo(set string, max int) string {
	if len(set) <= max {
		return set
	}
	cut := strings.LastIndexByte(set[:max], ',')
	if cut < 0 {
		return set
	}
	n := 0
	if rs, err := Parse(set); err == nil {
		n = len(rs)
	}
	return fmt.Sprintf("%s,… (%d ranks in all)", set[:cut], n)
}
