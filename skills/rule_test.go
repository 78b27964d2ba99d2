package skills

import (
	"math"
	"strings"
	"testing"
)

func TestParseRuleForms(t *testing.T) {
	good := []string{
		"always",
		"step:a | rows == 0",
		"step:a | rows > {min_steps}*0.7",
		"step:a | column:avg_ms | max/min(ratio) > 1.5",
		"column:mem | max > 90",
		"column:mem | top > 90",
		"column:comm_ms | avg > 100",
		"column:x | value < 5",
		"column:x | value == 5",
		"column:status | value = 'dead'",
		"column:status | value = dead",
		"column:a | ratio(slow/total) > 0.3",
		"column:ms | last > 2 * avg(ms)",
		"column:wchan | any_contains('nccl','cuda', \"poll\")",
		"step:a | top(row).avg_ms > 2 * median(avg_ms)",
		"step:a | rows >= 1 | column:x | value > 0",
	}
	for _, w := range good {
		if _, err := ParseRule(w); err != nil {
			t.Errorf("%q: %v", w, err)
		}
	}
	bad := map[string]string{
		"":                                    "has no clause",
		"rows > 1":                            "needs a step:<id> first",
		"step:a | rows >> 1":                  "is not a number",
		"step:a | rows ~ 1":                   "want rows <op> <number>",
		"column:x":                            "must be followed by a predicate",
		"max > 3":                             "must follow a column:<name> clause",
		"column:x | median > 3":               "is not a column predicate",
		"step:a | top(row).a > 2 * median(b)": "must name the same column",
		"top(row).a > 2 * median(a)":          "needs a step:<id> first",
		"always | step:a":                     "step: may only come first",
		"column:x | any_contains('a',,'b')":   "empty any_contains argument",
		"nonsense":                            "is not a clause",
		"step:a | rows > inf":                 "is not a number",
	}
	for w, want := range bad {
		_, err := ParseRule(w)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %s", w, err, want)
		}
	}
}

func TestEval(t *testing.T) {
	lat := &Table{Columns: []string{"rank", "avg_ms", "status", "wchan"}, Rows: [][]any{
		{int64(0), 10.0, "ok", "futex"}, {int64(1), 12.0, "ok", nil}, {int64(2), "40", "dead", "NCCL_poll"},
	}}
	zero := &Table{Columns: []string{"v", "num", "den"}, Rows: [][]any{{0, int32(3), float32(0)}, {5, 1, 1}}}
	env := &Env{Params: map[string]string{"min_steps": "4", "thr": "x"}, Evidence: map[string]*Table{"lat": lat, "z": zero}, Order: []string{"api", "lat", "z"}}
	cases := map[string]bool{
		"always":                                              true,
		"step:api | always":                                   false, // no SQL evidence
		"step:lat | rows == 3":                                true,
		"step:lat | rows > {min_steps}*0.7":                   true, // 3 > 2.8
		"step:lat | rows > {min_steps}":                       false,
		"step:lat | rows > {thr}":                             false, // unparseable param
		"step:lat | column:avg_ms | max/min(ratio) > 3.9":     true,
		"step:z | column:v | max/min(ratio) > 1e300":          true, // min <= 0 → ∞
		"step:lat | column:avg_ms | max > 39":                 true,
		"step:lat | column:avg_ms | avg > 20":                 true,
		"step:lat | column:avg_ms | avg > 21":                 false,
		"column:avg_ms | value == 10":                         true, // first step with the column
		"column:missing | value == 0":                         false,
		"step:lat | column:missing | value == 0":              true, // 0 if missing
		"step:lat | column:status | value = ok":               true,
		"step:lat | column:status | value = 'dead'":           false,
		"step:z | column:v | ratio(num/den) == 0":             true, // den <= 0
		"step:lat | column:avg_ms | last > 1.9 * avg(avg_ms)": true,
		"step:lat | column:avg_ms | last > 2 * avg(avg_ms)":   false,
		"step:lat | column:wchan | any_contains('nccl')":      true,
		"step:lat | column:wchan | any_contains('cuda')":      false,
		"step:lat | top(row).avg_ms > 3 * median(avg_ms)":     true, // 40 > 36
		"step:lat | top(row).avg_ms > 4 * median(avg_ms)":     false,
		"step:lat | rows >= 1 | column:status | value = dead": false,
	}
	for w, want := range cases {
		c, err := ParseRule(w)
		if err != nil {
			t.Fatalf("%q: %v", w, err)
		}
		if got := c.Eval(env); got != want {
			t.Errorf("%q: %v, want %v", w, got, want)
		}
	}
	rules := []Rule{
		{ID: "slow", Severity: SeverityWarning, Message: "rank {lat.rank} of {lat.row_count}, first status {status}, min {min_steps}, {nope}", Cond: mustRule(t, "step:lat | rows > 1")},
		{ID: "never", Severity: SeverityError, Message: "x", Cond: mustRule(t, "step:api | always")},
	}
	f := Evaluate(rules, env)
	if len(f) != 1 || f[0].Message != "rank 0 of 3, first status ok, min 4, {nope}" || f[0].Severity != SeverityWarning {
		t.Errorf("findings %+v", f)
	}
	if math.IsNaN(median([]float64{1, 3})) || median([]float64{1, 3}) != 2 {
		t.Error("median")
	}
}

func mustRule(t *testing.T, w string) *Cond {
	c, err := ParseRule(w)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
