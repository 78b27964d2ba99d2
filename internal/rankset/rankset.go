// Package rankset prints and parses sets of ranks as compact ranges, the way
// people write them: "0-511,513-1023". A 1024-rank job's rank list is then a
// dozen characters in an LLM's context, not four kilobytes.
package rankset

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Format renders ranks (any order, duplicates allowed) as sorted ranges.
// An empty set is "".
func Format(ranks []int) string { return FormatMax(ranks, 0) }

// FormatMax is Format within about limit bytes (0: no bound): the ranges
// that fit, then ",… (N ranks in all)". A set with holes everywhere (a
// million ranks, every other one) is megabytes of ranges; a report holds
// at most limit of it. Sorted, distinct input is read in place; anything
// else is sorted in a copy.
func FormatMax(ranks []int, limit int) string {
	if len(ranks) == 0 {
		return ""
	}
	s := ranks
	if !sortedDistinct(s) {
		s = slices.Clone(ranks)
		slices.Sort(s)
		s = slices.Compact(s)
	}
	var b []byte
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		mark := len(b)
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(s[i]), 10)
		if j > i {
			b = append(b, '-')
			b = strconv.AppendInt(b, int64(s[j]), 10)
		}
		if limit > 0 && len(b) > limit && mark > 0 {
			return string(b[:mark]) + fmt.Sprintf(",… (%d ranks in all)", len(s))
		}
		i = j + 1
	}
	return string(b)
}

func sortedDistinct(s []int) bool {
	for i := 1; i < len(s); i++ {
		if s[i] <= s[i-1] {
			return false
		}
	}
	return true
}

// Count is how many ranks a formatted set names, without expanding it:
// "0-999999" is a million. A set cut by FormatMax or Short gives the
// count it carries. -1 when s is not a rank set.
func Count(s string) int {
	if i := strings.Index(s, "… ("); i >= 0 {
		var n int
		if _, err := fmt.Sscanf(s[i+len("… ("):], "%d ranks in all)", &n); err == nil {
			return n
		}
		return -1
	}
	n := 0
	if ranges(s, func(a, b int) error { n += b - a + 1; return nil }) != nil {
		return -1
	}
	return n
}

// ranges calls fn with each part of "0-3,7,9-10" as a closed range, in
// the order written; an error names the part that is not a rank or a
// range, or is fn's.
func ranges(s string, fn func(a, b int) error) error {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil || a < 0 {
			return fmt.Errorf("rank set %q: %q is not a rank or a range like 0-7", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil || b < a {
				return fmt.Errorf("rank set %q: %q is not a range like 0-7", s, part)
			}
		}
		if err := fn(a, b); err != nil {
			return err
		}
	}
	return nil
}

// MaxParsed bounds how many ranks Parse expands, so "0-999999999" is an
// error rather than a gigabyte.
const MaxParsed = 1 << 20

// Parse reads "0-3,7,9-10" (spaces allowed) into sorted, unique ranks.
func Parse(s string) ([]int, error) {
	var out []int
	err := ranges(s, func(a, b int) error {
		if len(out)+(b-a+1) > MaxParsed {
			return fmt.Errorf("rank set %q: more than %d ranks", s, MaxParsed)
		}
		for r := a; r <= b; r++ {
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return slices.Compact(slices.Sorted(slices.Values(out))), nil
}

// Known reads a set this program wrote itself (a report's culprits): its
// ranks, or nil for an empty or unreadable one.
func Known(s string) []int {
	rs, _ := Parse(s)
	return rs
}

// MaxText is how much of a rank set a text rendering shows: a large job's
// sets with holes (every tenth node down) run to kilobytes.
const MaxText = 120

// Short cuts a long formatted rank set at a range boundary within MaxText
// bytes and says how many ranks it holds in all (a JSON answer keeps the
// whole set; text for a person or a model shows this).
func Short(set string) string { return ShortTo(set, MaxText) }

// ShortTo is Short within limit bytes (a set named again, after the line
// that gave it at MaxText, needs less).
func ShortTo(set string, limit int) string {
	if len(set) <= limit {
		return set
	}
	cut := strings.LastIndexByte(set[:limit], ',')
	if cut < 0 {
		return set
	}
	return fmt.Sprintf("%s,… (%d ranks in all)", set[:cut], max(Count(set), 0))
}

// Words is "rank 3" or "ranks 0-3,7", the set cut when long (Short).
func Words(set string) string {
	if strings.ContainsAny(set, ",-") {
		return "ranks " + Short(set)
	}
	return "rank " + set
}

// reSets finds the rank sets a text names ("ranks 0-4,6-71,…"), so that
// one computed whole for the JSON can be shown cut.
var reSets = regexp.MustCompile(`(ranks? )(\d+(?:[-,]\d+)+)`)

// ShortSets cuts every long rank set a text names (Short).
func ShortSets(s string) string { return ShortSetsTo(s, MaxText) }

// ShortSetsTo cuts every rank set a text names to limit bytes.
func ShortSetsTo(s string, limit int) string {
	return reSets.ReplaceAllStringFunc(s, func(m string) string {
		sub := reSets.FindStringSubmatch(m)
		return sub[1] + ShortTo(sub[2], limit)
	})
}
