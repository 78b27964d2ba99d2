package skills

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// The interpretation-rule grammar (§6.6), parsed at load time so that a bad
// rule is a load error with a line, not a silently false rule at run time.
//
//	when     := [ "step:" id "|" ] clause { "|" clause }   all must hold
//	clause   := "always"
//	          | "rows" op num                              needs step:
//	          | "column:" name "|" pred
//	          | "top(row)." col op num "*" "median(" col ")"   needs step:
//	pred     := "max/min(ratio)" op num | ("max"|"top"|"avg") op num
//	          | "value" op num | "value" "=" text
//	          | "ratio(" num "/" den ")" op num
//	          | "last" op [num "*"] "avg(" col ")"
//	          | "any_contains(" str { "," str } ")"
//	op       := "==" | ">=" | ">" | "<=" | "<"
//	num      := term { "*" term }     term := number | "{" param "}"
//
// Where the contract is loose this dialect decides:
//   - every predicate takes any op and a num (the contract shows ">" for
//     most, and numbers for thresholds): a superset, so Probing's rules load;
//   - a column: clause without step: reads the first step, in run order,
//     whose evidence has that column;
//   - "|" always separates clauses, even inside any_contains quotes, as in
//     Probing's splitter.

// Cond is a parsed `when`.
type Cond struct {
	Step    string // bound step, or ""
	Clauses []Clause
}

// ClauseKind distinguishes the clause forms.
type ClauseKind int

const (
	ClauseAlways ClauseKind = iota
	ClauseRows
	ClauseColumn
	ClauseTopRow
)

// Clause is one `|`-separated condition.
type Clause struct {
	Kind   ClauseKind
	Op     string
	N      NumExpr // rows threshold; top(row) factor
	Column string  // column: and top(row) column
	Pred   *Pred   // for ClauseColumn
}

// PredKind distinguishes the predicates that follow column:.
type PredKind int

const (
	PredMaxMinRatio PredKind = iota
	PredMax
	PredTop
	PredAvg
	PredValue
	PredValueText
	PredRatio
	PredLastAvg
	PredAnyContains
)

// Pred is the predicate of a column: clause.
type Pred struct {
	Kind     PredKind
	Op       string
	N        NumExpr // threshold, or the factor of last > F * avg(col)
	Text     string
	Num, Den string   // ratio(num/den)
	AvgCol   string   // last > F * avg(col)
	Needles  []string // any_contains
}

// NumExpr is a product of numbers and {param}s.
type NumExpr []Term

// Term is a number or a parameter reference.
type Term struct {
	Num   float64
	Param string
}

const opRE = `(==|>=|<=|>|<)`

var (
	reRows    = regexp.MustCompile(`^rows\s*` + opRE + `\s*(.+)$`)
	reColumn  = regexp.MustCompile(`^column:\s*([A-Za-z0-9_.]+)$`)
	reMaxMin  = regexp.MustCompile(`^max/min\(\s*ratio\s*\)\s*` + opRE + `\s*(.+)$`)
	reAgg     = regexp.MustCompile(`^(max|top|avg)\s*` + opRE + `\s*(.+)$`)
	reValue   = regexp.MustCompile(`^value\s*` + opRE + `\s*(.+)$`)
	reValText = regexp.MustCompile(`^value\s*=\s*(.*)$`)
	reRatio   = regexp.MustCompile(`^ratio\(\s*([A-Za-z0-9_]+)\s*/\s*([A-Za-z0-9_]+)\s*\)\s*` + opRE + `\s*(.+)$`)
	reLast    = regexp.MustCompile(`^last\s*` + opRE + `\s*(?:(.+?)\s*\*\s*)?avg\(\s*([A-Za-z0-9_]+)\s*\)$`)
	reAny     = regexp.MustCompile(`^any_contains\((.*)\)$`)
	reTopRow  = regexp.MustCompile(`^top\(row\)\.([A-Za-z0-9_]+)\s*` + opRE + `\s*(.+?)\s*\*\s*median\(\s*([A-Za-z0-9_]+)\s*\)$`)
	reStep    = regexp.MustCompile(`^step:\s*([A-Za-z0-9_]+)$`)
)

// maxRuleLen bounds a `when`; real ones are under 100 bytes.
const maxRuleLen = 4096

// ParseRule parses a `when` expression.
func ParseRule(when string) (*Cond, error) {
	if len(when) > maxRuleLen {
		return nil, fmt.Errorf("rule is %d bytes, more than %d", len(when), maxRuleLen)
	}
	parts := strings.Split(when, "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	c := &Cond{}
	if m := reStep.FindStringSubmatch(parts[0]); m != nil {
		c.Step = m[1]
		parts = parts[1:]
	}
	if len(parts) == 0 || len(parts) == 1 && parts[0] == "" {
		return nil, fmt.Errorf("%q has no clause", when)
	}
	for i := 0; i < len(parts); i++ {
		p := parts[i]
		if strings.HasPrefix(p, "step:") {
			return nil, fmt.Errorf("%q: step: may only come first", p)
		}
		switch {
		case p == "always":
			c.Clauses = append(c.Clauses, Clause{Kind: ClauseAlways})
		case strings.HasPrefix(p, "rows"):
			m := reRows.FindStringSubmatch(p)
			if m == nil {
				return nil, fmt.Errorf("%q: want rows <op> <number>, op one of == >= > <= <", p)
			}
			if c.Step == "" {
				return nil, fmt.Errorf("%q needs a step:<id> first", p)
			}
			n, err := parseNum(m[2])
			if err != nil {
				return nil, fmt.Errorf("%q: %v", p, err)
			}
			c.Clauses = append(c.Clauses, Clause{Kind: ClauseRows, Op: m[1], N: n})
		case strings.HasPrefix(p, "column:"):
			m := reColumn.FindStringSubmatch(p)
			if m == nil {
				return nil, fmt.Errorf("%q: want column:<name>", p)
			}
			if i+1 >= len(parts) {
				return nil, fmt.Errorf("%q must be followed by a predicate clause", p)
			}
			i++
			pred, err := parsePred(parts[i])
			if err != nil {
				return nil, err
			}
			c.Clauses = append(c.Clauses, Clause{Kind: ClauseColumn, Column: m[1], Pred: pred})
		case strings.HasPrefix(p, "top(row)"):
			m := reTopRow.FindStringSubmatch(p)
			if m == nil {
				return nil, fmt.Errorf("%q: want top(row).<col> > F * median(<col>)", p)
			}
			if m[1] != m[4] {
				return nil, fmt.Errorf("%q: top(row).%s and median(%s) must name the same column", p, m[1], m[4])
			}
			if c.Step == "" {
				return nil, fmt.Errorf("%q needs a step:<id> first", p)
			}
			n, err := parseNum(m[3])
			if err != nil {
				return nil, fmt.Errorf("%q: %v", p, err)
			}
			c.Clauses = append(c.Clauses, Clause{Kind: ClauseTopRow, Op: m[2], N: n, Column: m[1]})
		default:
			if _, err := parsePred(p); err == nil {
				return nil, fmt.Errorf("%q must follow a column:<name> clause", p)
			}
			return nil, fmt.Errorf("%q is not a clause (always, rows, column:, top(row))", p)
		}
	}
	return c, nil
}

func parsePred(p string) (*Pred, error) {
	num := func(s string) (NumExpr, error) {
		n, err := parseNum(s)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", p, err)
		}
		return n, nil
	}
	var err error
	pr := &Pred{}
	if m := reMaxMin.FindStringSubmatch(p); m != nil {
		pr.Kind, pr.Op = PredMaxMinRatio, m[1]
		pr.N, err = num(m[2])
	} else if m := reAgg.FindStringSubmatch(p); m != nil {
		pr.Kind = map[string]PredKind{"max": PredMax, "top": PredTop, "avg": PredAvg}[m[1]]
		pr.Op = m[2]
		pr.N, err = num(m[3])
	} else if m := reValue.FindStringSubmatch(p); m != nil {
		pr.Kind, pr.Op = PredValue, m[1]
		pr.N, err = num(m[2])
	} else if m := reValText.FindStringSubmatch(p); m != nil {
		pr.Kind, pr.Text = PredValueText, unquote(strings.TrimSpace(m[1]))
	} else if m := reRatio.FindStringSubmatch(p); m != nil {
		pr.Kind, pr.Num, pr.Den, pr.Op = PredRatio, m[1], m[2], m[3]
		pr.N, err = num(m[4])
	} else if m := reLast.FindStringSubmatch(p); m != nil {
		pr.Kind, pr.Op, pr.AvgCol = PredLastAvg, m[1], m[3]
		pr.N = NumExpr{{Num: 1}}
		if m[2] != "" {
			pr.N, err = num(m[2])
		}
	} else if m := reAny.FindStringSubmatch(p); m != nil {
		pr.Kind = PredAnyContains
		for _, a := range strings.Split(m[1], ",") {
			a = unquote(strings.TrimSpace(a))
			if a == "" {
				return nil, fmt.Errorf("%q: empty any_contains argument", p)
			}
			pr.Needles = append(pr.Needles, strings.ToLower(a))
		}
	} else {
		return nil, fmt.Errorf("%q is not a column predicate (max/min(ratio), max, top, avg, value, ratio(a/b), last, any_contains)", p)
	}
	if err != nil {
		return nil, err
	}
	return pr, nil
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

func parseNum(s string) (NumExpr, error) {
	var out NumExpr
	for _, t := range strings.Split(s, "*") {
		t = strings.TrimSpace(t)
		if name, end := placeholderAt(t, 0); end > 0 && end == len(t) {
			out = append(out, Term{Param: name})
			continue
		}
		f, err := strconv.ParseFloat(t, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%q is not a number or {parameter}", t)
		}
		out = append(out, Term{Num: f})
	}
	return out, nil
}

func (c *Cond) params() []string {
	var out []string
	add := func(n NumExpr) {
		for _, t := range n {
			if t.Param != "" && !slices.Contains(out, t.Param) {
				out = append(out, t.Param)
			}
		}
	}
	for _, cl := range c.Clauses {
		add(cl.N)
		if cl.Pred != nil {
			add(cl.Pred.N)
		}
	}
	return out
}

// Table is one step's SQL evidence.
type Table struct {
	Columns []string
	Rows    [][]any
}

func (t *Table) col(name string) int { return slices.Index(t.Columns, name) }

// Env is what rules are evaluated against.
type Env struct {
	Params   map[string]string // the bound context (Binding.Values)
	Evidence map[string]*Table // step id → SQL result; absent: no SQL evidence
	Order    []string          // step ids in run order
}

func (e *Env) num(n NumExpr) (float64, bool) {
	v := 1.0
	for _, t := range n {
		if t.Param == "" {
			v *= t.Num
			continue
		}
		f, err := strconv.ParseFloat(e.Params[t.Param], 64)
		if err != nil {
			return 0, false
		}
		v *= f
	}
	return v, true
}

func compare(a float64, op string, b float64) bool {
	switch op {
	case "==":
		return a == b
	case ">=":
		return a >= b
	case ">":
		return a > b
	case "<=":
		return a <= b
	case "<":
		return a < b
	}
	return false
}

// number reads a cell as a number: Go numeric kinds or parseable text.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	case float32:
		return float64(x), true
	case float64:
		return x, true
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		return f, err == nil
	case []byte:
		f, err := strconv.ParseFloat(strings.TrimSpace(string(x)), 64)
		return f, err == nil
	}
	return 0, false
}

// valueWords is a step's value in a message: a number or a plain word
// (ok, ncclWait) as is, any other text (the job's, from its rings or a
// tool) quoted (jobtext).
func valueWords(v any) string {
	switch v.(type) {
	case string, []byte:
		return jobtext.Token(text(v), jobtext.Name)
	}
	return text(v)
}

func text(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32)
	}
	return fmt.Sprint(v)
}

func values(t *Table, col int) []float64 {
	var out []float64
	for _, r := range t.Rows {
		if col < len(r) {
			if f, ok := number(r[col]); ok {
				out = append(out, f)
			}
		}
	}
	return out
}

func firstNum(t *Table, col int) float64 {
	if col < 0 || len(t.Rows) == 0 || col >= len(t.Rows[0]) {
		return 0
	}
	f, _ := number(t.Rows[0][col])
	return f
}

// Eval reports whether the condition holds in env.
func (c *Cond) Eval(env *Env) bool {
	var bound *Table
	if c.Step != "" {
		if bound = env.Evidence[c.Step]; bound == nil {
			return false
		}
	}
	for _, cl := range c.Clauses {
		if !cl.eval(bound, env) {
			return false
		}
	}
	return true
}

func (cl *Clause) eval(bound *Table, env *Env) bool {
	switch cl.Kind {
	case ClauseAlways:
		return true
	case ClauseRows:
		n, ok := env.num(cl.N)
		return ok && compare(float64(len(bound.Rows)), cl.Op, n)
	case ClauseTopRow:
		col := bound.col(cl.Column)
		vs := values(bound, col)
		if col < 0 || len(bound.Rows) < 2 || len(vs) == 0 {
			return false
		}
		f, ok := env.num(cl.N)
		return ok && compare(slices.Max(vs), cl.Op, f*median(vs))
	}
	t := bound
	if t == nil {
		for _, id := range env.Order {
			if e := env.Evidence[id]; e != nil && e.col(cl.Column) >= 0 {
				t = e
				break
			}
		}
	}
	if t == nil {
		return false
	}
	return cl.Pred.eval(t, t.col(cl.Column), env)
}

func (p *Pred) eval(t *Table, col int, env *Env) bool {
	if p.Kind == PredValueText {
		if col < 0 || len(t.Rows) == 0 || col >= len(t.Rows[0]) {
			return false
		}
		return text(t.Rows[0][col]) == p.Text
	}
	if p.Kind == PredAnyContains {
		if col < 0 {
			return false
		}
		for _, r := range t.Rows {
			if col < len(r) && r[col] != nil {
				s := strings.ToLower(text(r[col]))
				for _, n := range p.Needles {
					if strings.Contains(s, n) {
						return true
					}
				}
			}
		}
		return false
	}
	n, ok := env.num(p.N)
	if !ok {
		return false
	}
	var vs []float64
	if col >= 0 {
		vs = values(t, col)
	}
	var x float64
	switch p.Kind {
	case PredMaxMinRatio:
		if len(vs) >= 2 {
			if mn := slices.Min(vs); mn <= 0 {
				x = math.Inf(1)
			} else {
				x = slices.Max(vs) / mn
			}
		}
	case PredMax, PredTop:
		if len(vs) > 0 {
			x = max(slices.Max(vs), 0)
		}
	case PredAvg:
		x = mean(vs)
	case PredValue:
		x = firstNum(t, col)
	case PredRatio:
		if den := firstNum(t, t.col(p.Den)); den > 0 {
			x = firstNum(t, t.col(p.Num)) / den
		}
	case PredLastAvg:
		if len(vs) == 0 {
			return false
		}
		avgCol := t.col(p.AvgCol)
		if avgCol < 0 {
			return false
		}
		return compare(vs[len(vs)-1], p.Op, n*mean(values(t, avgCol)))
	}
	return compare(x, p.Op, n)
}

func mean(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := 0.0
	for _, v := range vs {
		s += v
	}
	return s / float64(len(vs))
}

func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Finding is a matched rule (§6.7).
type Finding struct {
	RuleID   string   `json:"rule_id"`
	Severity Severity `json:"severity"`
	Message  string   `json:"message"`
}

// Evaluate returns the findings of the rules that hold, in rule order.
// Messages expand {param}, {step_id.column} and a bare {column} (first row of
// the first step, in run order, with that column); anything else is left as
// written. ({worst_rank}, {top_module} and {latest_step} are the runner's.)
func Evaluate(rules []Rule, env *Env) []Finding {
	var out []Finding
	for _, r := range rules {
		if r.Cond == nil || !r.Cond.Eval(env) {
			continue
		}
		out = append(out, Finding{RuleID: r.ID, Severity: r.Severity, Message: ExpandMessage(r.Message, env)})
	}
	return out
}

var reMsgPlaceholder = regexp.MustCompile(`\{([A-Za-z0-9_]+)(?:\.([A-Za-z0-9_]+))?\}`)

// ExpandMessage expands a rule message or summary template against env.
func ExpandMessage(msg string, env *Env) string {
	return reMsgPlaceholder.ReplaceAllStringFunc(msg, func(m string) string {
		g := reMsgPlaceholder.FindStringSubmatch(m)
		first := func(t *Table, col string) (string, bool) {
			c := t.col(col)
			if c < 0 || len(t.Rows) == 0 || c >= len(t.Rows[0]) {
				return "", false
			}
			return valueWords(t.Rows[0][c]), true
		}
		if g[2] != "" {
			if t := env.Evidence[g[1]]; t != nil {
				if g[2] == "row_count" {
					return strconv.Itoa(len(t.Rows))
				}
				if v, ok := first(t, g[2]); ok {
					return v
				}
			}
			// A step of this skill that produced no such value (skipped,
			// empty, failed): say so rather than print the raw template.
			if slices.Contains(env.Order, g[1]) {
				return "n/a"
			}
			return m
		}
		if v, ok := env.Params[g[1]]; ok {
			return v
		}
		for _, id := range env.Order {
			if t := env.Evidence[id]; t != nil {
				if v, ok := first(t, g[1]); ok {
					return v
				}
			}
		}
		return m
	})
}
