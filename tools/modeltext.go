package tools

import (
	"fmt"
	"sort"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Shared pieces of the ModelText renderings (the text content most
// clients show the model): long rank sets cut, lines and cells capped,
// every cut said with how to get the rest.

// shortSets cuts every long rank set in s (rankset.ShortSets).
func shortSets(s string) string { return rankset.ShortSets(s) }

// shortSetsTo cuts every rank set in s to max bytes.
func shortSetsTo(s string, max int) string { return rankset.ShortSetsTo(s, max) }

// clip cuts one of our lines to n bytes (jobtext.CutLine). Job text in it
// must be quoted already.
func clip(s string, n int) string { return jobtext.CutLine(s, n) }

// rankText is a rank set membership was told (a node's claim): cut when
// long, quoted when it is not one.
func rankText(set string) string { return rankTextTo(set, rankset.MaxText) }

// rankTextTo is rankText cut to max bytes.
func rankTextTo(set string, max int) string {
	if set == "" {
		return "-"
	}
	if _, err := rankset.Parse(set); err != nil {
		return jobtext.Quote(set, jobtext.Name)
	}
	return rankset.ShortTo(set, max)
}

// ints64Set is a set of ids as ranges (history ids are consecutive).
func ints64Set(ids []int64) string {
	rs := make([]int, 0, len(ids))
	for _, id := range ids {
		rs = append(rs, int(id))
	}
	return rankset.Short(rankset.Format(rs))
}

// maxCoverageText is how many missing nodes the text names by address.
const maxCoverageText = 3

// coverageText is the whole-job scope in a few lines: how many nodes
// answered, the missing ones' ranks as a cut set, their failure kinds
// counted, the first few by name, and the membership problems.
func coverageText(c *CoverageView) string {
	if c == nil {
		return ""
	}
	var b strings.Builder
	raw := c.raw
	missing := len(raw.Missing)
	if missing == 0 {
		missing = len(c.Missing)
	}
	fmt.Fprintf(&b, "Scope: the whole job, %d/%d node(s) answered", c.Answered, c.Asked)
	if missing == 0 {
		b.WriteString(".\n")
	} else if len(raw.Missing) == 0 {
		// A view without its coverage (decoded from JSON): its lines.
		fmt.Fprintf(&b, "; %d did not: %s\n", missing, clip(strings.Join(c.Missing, "; "), jobtext.Line))
	} else {
		var ranks []int
		kinds := map[string]int{}
		for _, o := range raw.Missing {
			if rs, err := rankset.Parse(o.Node.Ranks); err == nil {
				ranks = append(ranks, rs...)
			}
			kind := "failed"
			if o.Err != nil {
				kind = jobtext.Word(o.Err.Kind)
			}
			kinds[kind]++
		}
		var ks []string
		for k, n := range kinds {
			ks = append(ks, fmt.Sprintf("%d %s", n, k))
		}
		sort.Strings(ks)
		fmt.Fprintf(&b, "; %d did not (%s)", missing, strings.Join(ks, ", "))
		if set := rankset.Format(ranks); set != "" {
			fmt.Fprintf(&b, ", their ranks %s not seen", rankset.ShortTo(set, 60))
		}
		b.WriteString(":\n")
		for i, o := range raw.Missing {
			if i == maxCoverageText {
				fmt.Fprintf(&b, "  … %d more node(s): list_cluster_nodes lists each with why (status=timeout, unreachable, …)\n", missing-i)
				break
			}
			kind, msg := "failed", ""
			if o.Err != nil {
				kind, msg = jobtext.Word(o.Err.Kind), o.Err.Msg
			}
			fmt.Fprintf(&b, "  %s (%s) %s", jobtext.Quote(o.Node.Host, jobtext.Name), jobtext.Word(o.Node.Addr), kind)
			if o.Node.Ranks != "" {
				b.WriteString(", ranks " + rankTextTo(o.Node.Ranks, 40))
			}
			b.WriteString(": " + clip(msg, 160) + "\n")
		}
	}
	for i, p := range c.Problems {
		if i == maxCoverageText {
			fmt.Fprintf(&b, "  … %d more membership problem(s) (structured content, list_cluster_nodes)\n", len(c.Problems)-i)
			break
		}
		b.WriteString("  membership: " + clip(p, 160) + "\n")
	}
	return b.String()
}

// maxTextCell caps one cell of a text table.
const maxTextCell = 60

// cell renders one value for a text table: NULL for nil, a number as is,
// text (the rings' cells are the job's) quoted and capped.
func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		return jobtext.Quote(x, maxTextCell)
	case []byte:
		return jobtext.Quote(string(x), maxTextCell)
	case float64:
		return fmt.Sprintf("%.6g", x)
	case int64, int, int32, bool:
		return fmt.Sprint(x)
	}
	return jobtext.Quote(fmt.Sprint(v), maxTextCell)
}

// writeTable writes a pipe-separated table, the column names once, then
// rows until maxBytes of text; it returns how many rows it wrote.
func writeTable(b *strings.Builder, cols []string, rows [][]any, maxBytes int) int {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = jobtext.Token(c, jobtext.Name) // a node's table may name them
	}
	b.WriteString(strings.Join(names, " | ") + "\n")
	start := b.Len()
	for i, r := range rows {
		cs := make([]string, len(r))
		for j, v := range r {
			cs[j] = cell(v)
		}
		line := strings.Join(cs, " | ") + "\n"
		if b.Len()-start+len(line) > maxBytes {
			return i
		}
		b.WriteString(line)
	}
	return len(rows)
}
