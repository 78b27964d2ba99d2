package tools

import (
	"fmt"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// maxTextTable bounds a table's rows in the text: a page of the default
// 200 rows of a few columns fits; wider answers are cut, and say so.
const maxTextTable = 8 << 10

// queryAnswer is query's and cluster_query's result: the engine's, with
// its text rendering (its JSON is the engine's Result, unchanged).
type queryAnswer struct {
	*sqlengine.Result
}

// ModelText is the row count and any cut first, then the rows as a
// pipe-separated table with the column names once, then data quality.
func (r queryAnswer) ModelText() string {
	if r.Result == nil {
		return "no result\n"
	}
	return resultText(r.Result, "rows")
}

// resultText renders one engine result; what names the rows ("rows",
// "tables", "columns").
func resultText(r *sqlengine.Result, what string) string {
	var b strings.Builder
	switch {
	case r.Truncated && r.TotalRowsLowerBound:
		fmt.Fprintf(&b, "%d %s of at least %d (truncated at limit: pass limit up to %d, narrow with WHERE/GROUP BY, or page with LIMIT/OFFSET in the SQL).\n",
			r.RowCount, what, r.TotalRows, sqlengine.MaxLimit)
	case r.Truncated:
		fmt.Fprintf(&b, "%d %s of %d (truncated at limit: pass limit up to %d, narrow with WHERE/GROUP BY, or page with LIMIT/OFFSET in the SQL).\n",
			r.RowCount, what, r.TotalRows, sqlengine.MaxLimit)
	default:
		fmt.Fprintf(&b, "%d %s.\n", r.RowCount, what)
	}
	if len(r.Columns) > 0 {
		rows := make([][]any, len(r.Rows))
		for i, row := range r.Rows {
			rows[i] = row.Values()
		}
		if n := writeTable(&b, r.Columns, rows, maxTextTable); n < len(rows) {
			fmt.Fprintf(&b, "… text cut after %d of the %d %s returned (%d KiB of text): for the rest add LIMIT %d OFFSET %d to the SQL, or select fewer columns (structured content: rows has them all).\n",
				n, len(rows), what, maxTextTable>>10, len(rows)-n, n)
		}
	}
	writeQuality(&b, r.DataQuality)
	return b.String()
}

func writeQuality(b *strings.Builder, q *sqlengine.Quality) {
	if q == nil {
		return
	}
	if q.Partial {
		b.WriteString("problem: partial: part of the data could not be read (the lines below say which)\n")
	}
	for _, p := range q.Problems {
		fmt.Fprintf(b, "problem: %s: %s\n", jobtext.QuoteTail(p.Path, jobtext.Path), clip(p.Problem, 200))
	}
	if q.ProblemsOmitted > 0 {
		fmt.Fprintf(b, "problem: … %d more (structured content: data_quality)\n", q.ProblemsOmitted)
	}
	if q.ChunksInvalid > 0 {
		fmt.Fprintf(b, "problem: %d chunk(s) did not decode; their remaining rows were skipped\n", q.ChunksInvalid)
	}
	if q.ChunksTorn > 0 {
		fmt.Fprintf(b, "note: %d chunk(s) were being rewritten while read and were skipped\n", q.ChunksTorn)
	}
	if q.DeadWriterPIDs != "" {
		fmt.Fprintf(b, "note: read rings of exited processes (pids %s): a dead job's data\n", q.DeadWriterPIDs)
	}
	if q.RowsOverwritten > 0 {
		fmt.Fprintf(b, "note: the rings had recycled %d older rows; earlier history is gone (counts are lower bounds)\n", q.RowsOverwritten)
	}
	if q.CellsCut > 0 {
		fmt.Fprintf(b, "note: %d cell(s) were cut to the engine's cell cap\n", q.CellsCut)
	}
	if q.InvalidUTF8 > 0 {
		fmt.Fprintf(b, "note: %d text value(s) were not valid UTF-8\n", q.InvalidUTF8)
	}
	for _, n := range q.Notes {
		b.WriteString("note: " + clip(n, jobtext.Line) + "\n")
	}
}
