package rankset

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	cases := map[string][]int{
		"":               nil,
		"3":              {3},
		"0-3":            {3, 1, 2, 0, 2},
		"0-511,513-1023": append(seq(0, 511), seq(513, 1023)...),
		"0,2,4":          {4, 2, 0},
		"1-2,7,9-11":     {1, 2, 7, 9, 10, 11},
	}
	for want, in := range cases {
		if got := Format(in); got != want {
			t.Errorf("Format(%v) = %q, want %q", in, got, want)
		}
		if want == "" {
			continue
		}
		back, err := Parse(want)
		if err != nil || Format(back) != want {
			t.Errorf("Parse(%q) = %v, %v", want, back, err)
		}
	}
}

func seq(lo, hi int) []int {
	var out []int
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

func TestParse(t *testing.T) {
	got, err := Parse(" 7, 0-2 ,2")
	if err != nil || !slices.Equal(got, []int{0, 1, 2, 7}) {
		t.Errorf("%v %v", got, err)
	}
	for _, bad := range []string{"a", "3-1", "-1", "1-", "0-99999999"} {
		if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), "rank set") {
			t.Errorf("Parse(%q): %v", bad, err)
		}
	}
}

func TestShort(t *testing.T) {
	if got := Short("0-3,7"); got != "0-3,7" {
		t.Errorf("a short set is kept: %q", got)
	}
	var rs []int
	for n := 0; n < 512; n++ {
		if n%10 != 9 {
			rs = append(rs, n*8, n*8+1, n*8+2, n*8+3, n*8+4, n*8+5, n*8+6, n*8+7)
		}
	}
	got := Short(Format(rs))
	if len(got) > MaxText+30 || !strings.HasSuffix(got, fmt.Sprintf(",… (%d ranks in all)", len(rs))) || !strings.HasPrefix(got, "0-71,80-151,") {
		t.Errorf("a long set: %q", got)
	}
}

func TestShortTo(t *testing.T) {
	if got := ShortTo("0-71,80-151,160-231,240-311", 16); got != "0-71,80-151,… (288 ranks in all)" {
		t.Errorf("%q", got)
	}
	if got := ShortTo("0-4095", 3); got != "0-4095" {
		t.Errorf("one range is never cut: %q", got)
	}
}

func TestFormatMax(t *testing.T) {
	var odd []int
	for r := 1; r < 1<<20; r += 2 {
		odd = append(odd, r)
	}
	got := FormatMax(odd, 64)
	if len(got) > 64+40 || !strings.HasPrefix(got, "1,3,5,") || !strings.HasSuffix(got, fmt.Sprintf(",… (%d ranks in all)", len(odd))) {
		t.Errorf("a holey set is cut: %q", got)
	}
	if Count(got) != len(odd) {
		t.Errorf("Count of a cut set = %d, want %d", Count(got), len(odd))
	}
	if got := FormatMax([]int{7, 3, 4, 3}, 64); got != "3-4,7" {
		t.Errorf("unsorted input: %q", got)
	}
	if got := FormatMax(seq(0, 999999), 8); got != "0-999999" {
		t.Errorf("one range is never cut: %q", got)
	}
	if Count("0-999999,2000000") != 1000001 || Count("x") != -1 || Count("") != 0 {
		t.Error("Count")
	}
	if got := ShortTo(got, 20); !strings.HasSuffix(got, fmt.Sprintf(",… (%d ranks in all)", len(odd))) {
		t.Errorf("a cut set cut again keeps its count: %q", got)
	}
}

func TestWordsAndShortSets(t *testing.T) {
	if got := Words("3"); got != "rank 3" {
		t.Errorf("%q", got)
	}
	if got := Words("0-3,7"); got != "ranks 0-3,7" {
		t.Errorf("%q", got)
	}
	long := "ranks 0-71,80-151,160-231,240-311 wait; rank 5 is in ⟦x⟧"
	if got := ShortSetsTo(long, 16); got != "ranks 0-71,80-151,… (288 ranks in all) wait; rank 5 is in ⟦x⟧" {
		t.Errorf("%q", got)
	}
	if got := ShortSets(long); got != long {
		t.Errorf("a set within MaxText is kept: %q", got)
	}
}

func TestKnown(t *testing.T) {
	if got := Known("0-2,5"); len(got) != 4 || got[3] != 5 {
		t.Errorf("%v", got)
	}
	if Known("") != nil || Known("x-") != nil {
		t.Error("an empty or unreadable set is no ranks")
	}
}
