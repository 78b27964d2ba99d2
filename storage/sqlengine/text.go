package sqlengine

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// maxTextCell is the widest a cell is printed in the text table.
const maxTextCell = 60

// WriteText prints the result as an aligned table for a terminal, then
// the row count and any data-quality notes.
func (r *Result) WriteText(w io.Writer) error {
	cells := make([][]string, 0, len(r.Rows)+1)
	cells = append(cells, r.Columns)
	for _, row := range r.Rows {
		line := make([]string, len(row.Values()))
		for i, v := range row.Values() {
			line[i] = textCell(v)
		}
		cells = append(cells, line)
	}
	width := make([]int, len(r.Columns))
	for _, line := range cells {
		for i, c := range line {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for n, line := range cells {
		for i, c := range line {
			if i > 0 {
				b.WriteString("  ")
			}
			b.WriteString(c)
			if i < len(line)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)))
			}
		}
		b.WriteByte('\n')
		if n == 0 {
			for i := range line {
				if i > 0 {
					b.WriteString("  ")
				}
				b.WriteString(strings.Repeat("-", width[i]))
			}
			b.WriteByte('\n')
		}
	}
	switch {
	case r.Truncated && r.TotalRowsLowerBound:
		fmt.Fprintf(&b, "(%d rows shown of at least %d; raise --limit or narrow the query)\n", r.RowCount, r.TotalRows)
	case r.Truncated:
		fmt.Fprintf(&b, "(%d rows shown of %d; raise --limit or narrow the query)\n", r.RowCount, r.TotalRows)
	default:
		fmt.Fprintf(&b, "(%d rows)\n", r.RowCount)
	}
	if q := r.DataQuality; q != nil {
		if q.DeadWriterPIDs != "" {
			fmt.Fprintf(&b, "note: read rings of exited processes (pids %s): a dead job's data\n", q.DeadWriterPIDs)
		}
		if q.RowsOverwritten > 0 {
			fmt.Fprintf(&b, "note: the rings read had recycled %d older rows; earlier history is gone\n", q.RowsOverwritten)
		}
		for _, p := range q.Problems {
			fmt.Fprintf(&b, "problem: %s: %s\n", p.Path, p.Problem)
		}
		if q.ProblemsOmitted > 0 {
			fmt.Fprintf(&b, "problem: … %d more\n", q.ProblemsOmitted)
		}
		if q.ChunksInvalid > 0 {
			fmt.Fprintf(&b, "problem: %d chunk(s) did not decode; their remaining rows were skipped\n", q.ChunksInvalid)
		}
		if q.InvalidUTF8 > 0 {
			fmt.Fprintf(&b, "note: %d text value(s) were not valid UTF-8\n", q.InvalidUTF8)
		}
		for _, n := range q.Notes {
			fmt.Fprintf(&b, "note: %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func textCell(v any) string {
	var s string
	switch x := v.(type) {
	case nil:
		s = "NULL"
	case string:
		s = x
	default:
		s = fmt.Sprint(x)
	}
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || r == '\r' {
			return ' '
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) > maxTextCell {
		rs := []rune(s)
		s = string(rs[:maxTextCell-1]) + "…"
	}
	return s
}
