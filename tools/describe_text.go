package tools

import (
	"fmt"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// ModelText is, without a table named, one line a readable table (its
// rows, what a row is) and the names of the rest; with one, the table's
// documentation and its columns with type and unit.
func (d describeAnswer) ModelText() string {
	if d.Tables == nil {
		return "no tables\n"
	}
	if d.named {
		return d.tableText()
	}
	var b strings.Builder
	t := d.Tables
	fmt.Fprintf(&b, "%d table(s) a query can read on this node", t.TotalRows)
	if d.NextOffset != nil {
		first := *d.NextOffset - t.RowCount
		fmt.Fprintf(&b, ", listed %d-%d (more: call again with offset=%d)", first+1, *d.NextOffset, *d.NextOffset)
	}
	b.WriteString(" — schema.table: rows; what a row is.\n")
	start := b.Len()
	for i, row := range t.Rows {
		get := func(c string) any { v, _ := row.Get(c); return v }
		line := jobtext.Token(fmt.Sprint(get("table")), 2*jobtext.Name) + ": " // a ring's file names it
		switch n := get("rows"); n {
		case nil:
			line += "rows not counted"
		default:
			line += fmt.Sprint(n) + " rows"
		}
		if p := get("processes"); p != nil {
			line += fmt.Sprintf(" from %v process(es)", p)
		}
		line += "; " + fmt.Sprint(get("about"))
		if b.Len()-start+len(line) > maxTextTable {
			fmt.Fprintf(&b, "… text cut after %d of %d tables; pass schema or offset.\n", i, len(t.Rows))
			break
		}
		b.WriteString(line + "\n")
	}
	if len(d.NoRows) > 0 {
		b.WriteString("No rows on this node (documented; no process here recorded them, so a query says no such table): " + names(d.NoRows) + ".\n")
	}
	if len(d.LiveOnly) > 0 {
		b.WriteString("Only a live agent computes (no query here reads them): " + names(d.LiveOnly) + ".\n")
	}
	if d.Hint != "" {
		b.WriteString(strings.ToUpper(d.Hint[:1]) + d.Hint[1:] + ".\n")
	}
	return b.String()
}

// names lists table names, bounded: a data dir can hold many rings.
func names(n []string) string {
	const show = 40
	var q []string
	for i, s := range n {
		if i == show {
			q = append(q, fmt.Sprintf("… %d more", len(n)-show))
			break
		}
		q = append(q, jobtext.Token(s, 2*jobtext.Name))
	}
	return strings.Join(q, ", ")
}

// tableText is a named table: what a row is, its status here, keys and
// caveats, then its columns.
func (d describeAnswer) tableText() string {
	var b strings.Builder
	for _, row := range d.Tables.Rows {
		get := func(c string) string {
			v, _ := row.Get(c)
			if v == nil {
				return ""
			}
			return fmt.Sprint(v)
		}
		b.WriteString(jobtext.Token(get("table_schema")+"."+get("table_name"), 2*jobtext.Name) + ": ")
		switch st := get("status"); {
		case get("rows") != "":
			b.WriteString(get("rows") + " rows on this node")
			if p := get("processes"); p != "" && p != "0" {
				b.WriteString(" from " + p + " process(es)")
			}
		case st != "":
			b.WriteString(st)
		}
		b.WriteString(".\n  " + clip(get("description"), 400) + "\n")
		if k := get("key_columns"); k != "" {
			b.WriteString("  keys: " + clip(k, 120) + "\n")
		}
		if n := get("notes"); n != "" {
			b.WriteString("  notes: " + clip(n, 600) + "\n")
		}
	}
	c := d.Columns
	if c == nil || len(c.Rows) == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "Columns (%d", c.RowCount)
	if c.Truncated {
		fmt.Fprintf(&b, " of %d, truncated: pass a larger limit", c.TotalRows)
	}
	b.WriteString("):\n")
	start := b.Len()
	last := ""
	for i, row := range c.Rows {
		get := func(k string) string {
			v, _ := row.Get(k)
			if v == nil {
				return ""
			}
			return fmt.Sprint(v)
		}
		line := ""
		if tbl := get("table_schema") + "." + get("table_name"); tbl != last && len(d.Tables.Rows) > 1 {
			line, last = tbl+":\n", tbl
		}
		line += "  " + jobtext.Token(get("column_name"), jobtext.Name) + " " + get("data_type") // a ring's header names its columns
		if u := get("unit"); u != "" {
			line += " [" + u + "]"
		}
		if ds := get("description"); ds != "" {
			line += " — " + clip(ds, 160)
		}
		if b.Len()-start+len(line) > maxTextTable {
			fmt.Fprintf(&b, "… text cut after %d of %d columns (structured content: columns).\n", i, len(c.Rows))
			break
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
