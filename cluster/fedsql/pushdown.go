package fedsql

import (
	"strconv"
	"strings"
)

// pushdown finds the filters a node can apply before sending its rows:
// only in the plainest shape, SELECT … FROM one schema.table WHERE
// col op literal [AND col op literal …] [GROUP|ORDER|LIMIT …]. Anything
// else (OR, NOT, parentheses after WHERE, joins, subqueries, WITH) pushes
// nothing down. Correctness never rests on it: the whole query still runs
// on the coordinator's copy, so a filter pushed down is one the query
// applies anyway, and a shape not understood only costs rows fetched.
func pushdown(sql string) []Constraint {
	toks, ok := tokenize(sql)
	if !ok || len(toks) == 0 || !kw(toks[0], "select") {
		return nil
	}
	from, where := -1, -1
	for i, t := range toks {
		switch {
		case kw(t, "from"):
			if from >= 0 {
				return nil // a second FROM: a subquery
			}
			from = i
		case kw(t, "where"):
			if where >= 0 {
				return nil
			}
			where = i
		case kw(t, "join"), kw(t, "union"), kw(t, "intersect"), kw(t, "except"), kw(t, "select") && i > 0:
			return nil
		}
	}
	if from < 0 || where < 0 || where < from {
		return nil
	}
	// FROM schema . table [alias] WHERE
	f := toks[from+1 : where]
	if len(f) < 3 || len(f) > 4 || f[1].s != "." || f[0].kind != tIdent || f[2].kind != tIdent {
		return nil
	}
	var out []Constraint
	i := where + 1
	for {
		if i+2 >= len(toks) {
			return nil
		}
		col, op, lit := toks[i], toks[i+1], toks[i+2]
		if col.kind != tIdent || op.kind != tOp || (lit.kind != tNum && lit.kind != tStr) {
			return nil
		}
		c := Constraint{Column: col.s, Op: op.s}
		if op.s == "<>" {
			c.Op = "!="
		}
		if op.s == "==" {
			c.Op = "="
		}
		if lit.kind == tNum {
			if n, err := strconv.ParseInt(lit.s, 10, 64); err == nil {
				c.Value = n
			} else if f, err := strconv.ParseFloat(lit.s, 64); err == nil {
				c.Value = f
			} else {
				return nil
			}
		} else {
			c.Value = lit.s
		}
		out = append(out, c)
		i += 3
		if i == len(toks) || kw(toks[i], "group") || kw(toks[i], "order") || kw(toks[i], "limit") || toks[i].s == ";" {
			return out
		}
		if !kw(toks[i], "and") {
			return nil
		}
		i++
	}
}

type tokKind int

const (
	tIdent tokKind = iota
	tNum
	tStr
	tOp
	tPunct
)

type token struct {
	kind tokKind
	s    string
}

func kw(t token, w string) bool { return t.kind == tIdent && strings.EqualFold(t.s, w) }

// tokenize splits SQL into tokens; false for what it does not read
// (comments, blobs, parameters), which then pushes nothing down.
func tokenize(s string) ([]token, bool) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '\'':
			var b strings.Builder
			j := i + 1
			for {
				if j >= len(s) {
					return nil, false
				}
				if s[j] == '\'' {
					if j+1 < len(s) && s[j+1] == '\'' {
						b.WriteByte('\'')
						j += 2
						continue
					}
					break
				}
				b.WriteByte(s[j])
				j++
			}
			out = append(out, token{tStr, b.String()})
			i = j + 1
		case c == '"':
			j := strings.IndexByte(s[i+1:], '"')
			if j < 0 {
				return nil, false
			}
			out = append(out, token{tIdent, s[i+1 : i+1+j]})
			i += j + 2
		case c >= '0' && c <= '9' || (c == '-' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' && (len(out) == 0 || out[len(out)-1].kind == tOp || kw(out[len(out)-1], "and"))):
			j := i + 1
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' || s[j] == 'e' || s[j] == 'E') {
				j++
			}
			out = append(out, token{tNum, s[i:j]})
			i = j
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			out = append(out, token{tIdent, s[i:j]})
			i = j
		case strings.HasPrefix(s[i:], "<=") || strings.HasPrefix(s[i:], ">=") || strings.HasPrefix(s[i:], "!=") || strings.HasPrefix(s[i:], "<>") || strings.HasPrefix(s[i:], "=="):
			out = append(out, token{tOp, s[i : i+2]})
			i += 2
		case c == '<' || c == '>' || c == '=':
			out = append(out, token{tOp, s[i : i+1]})
			i++
		case c == '-' && strings.HasPrefix(s[i:], "--"), c == '/' && strings.HasPrefix(s[i:], "/*"), c == '?', c == ':', c == '@', c == '$':
			return nil, false
		default:
			out = append(out, token{tPunct, s[i : i+1]})
			i++
		}
	}
	return out, true
}
