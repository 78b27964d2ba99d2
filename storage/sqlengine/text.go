package sqlengine

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
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
			fmt.Fprintf(&b, "problem: %s: %s\n", jobtext.QuoteTail(p.Path, jobtext.Path), jobtext.Clean(p.Problem))
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
			fmt.Fprintf(&b, "note: %s\n", jobtext.Clean(n))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// textCell is a value as the table shows it: NULL, a number as is, text
// (the rings' cells are the job's) quoted, escaped and clipped (jobtext):
// a cell must not move a terminal's cursor or pass for the table's words.
func textCell(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case string:
		return jobtext.Quote(x, maxTextCell)
	case []byte:
		return jobtext.Quote(string(x), maxTextCell)
	case int64, float64, bool:
		return fmt.Sprint(x)
	}
	return jobtext.Quote(fmt.Sprint(v), maxTextCell)
}
