package sqlengine

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"strings"

	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
)

// Description is describe_tables' answer, Probing's shape: the matching
// rows of probing.table_docs and of probing.column_docs. Each table row
// also says whether a query can read it here (status) and how many rows
// it holds now (rows, null when not counted).
type Description struct {
	Tables  *Result `json:"tables"`
	Columns *Result `json:"columns"`
}

// A table's status, in Description.Tables' status column: the listing and
// the engine agree on it (a query reads exactly the "queryable" ones).
const (
	StatusQueryable = "queryable"
	// StatusNoRows: documented, but no process on this node wrote the
	// ring (or the history lacks the table), so a query says no such table.
	StatusNoRows = "no rows on this node"
	// StatusLiveOnly: a virtual table only a live agent computes.
	StatusLiveOnly = "live agent only"
)

// countBudget is the share of the engine's time limit the row counts may
// take: a count that does not finish leaves rows null, never the answer.
const countBudget = 4

// Describe documents the tables matching schema and table (case-
// insensitive; empty matches all), limit tables and 4×limit columns. With
// neither given, columns are counted but not listed: the full column list
// of every table is too long to be useful at once.
func (e *Engine) Describe(ctx context.Context, schema, table string, limit int) (*Description, error) {
	limit = ClampLimit(limit)
	ctx, cancel := context.WithTimeout(ctx, e.opt.Timeout)
	defer cancel()
	return withSession(ctx, e, true, false, func(s *session) (*Description, error) {
		return s.describe(ctx, e, schema, table, limit)
	})
}

func (s *session) describe(ctx context.Context, e *Engine, schema, table string, limit int) (*Description, error) {
	schema, table = strings.TrimSpace(schema), strings.TrimSpace(table)
	where := " WHERE (?1 = '' OR lower(table_schema) = lower(?1)) AND (?2 = '' OR lower(table_name) = lower(?2))"
	tables, err := s.runArgs(ctx, e, "SELECT table_schema, table_name, description, synonyms, key_columns, notes, storage, processes FROM probing.table_docs"+
		where+" ORDER BY table_schema, table_name", limit, schema, table)
	if err != nil {
		return nil, err
	}
	colLimit := 4 * limit
	if schema == "" && table == "" {
		colLimit = 0
	}
	cols, err := s.runArgs(ctx, e, "SELECT table_schema, table_name, column_name, data_type, unit, description FROM probing.column_docs"+
		where+" ORDER BY table_schema, table_name, ordinal", colLimit, schema, table)
	if err != nil {
		return nil, err
	}
	s.addStatus(ctx, e, tables)
	return &Description{Tables: tables, Columns: cols}, nil
}

// addStatus appends the status and rows columns to the table rows: what a
// query on this node can read, and how many rows it would see now.
func (s *session) addStatus(ctx context.Context, e *Engine, t *Result) {
	queryable := s.queryableTables(ctx)
	cctx, cancel := context.WithTimeout(ctx, e.opt.Timeout/countBudget)
	defer cancel()
	t.Columns = append(t.Columns, "status", "rows")
	for i, row := range t.Rows {
		sch, _ := row.Get("table_schema")
		name, _ := row.Get("table_name")
		storage, _ := row.Get("storage")
		key := strings.ToLower(fmt.Sprint(sch) + "." + fmt.Sprint(name))
		status, rows := StatusNoRows, any(nil)
		switch {
		case queryable[key]:
			status = StatusQueryable
			if n, ok := s.count(cctx, fmt.Sprint(sch), fmt.Sprint(name)); ok {
				rows = n
			}
		case storage == "virtual":
			status = StatusLiveOnly
		}
		t.Rows[i] = jsonrow.New(t.Columns, append(row.Values(), status, rows))
	}
}

// queryableTables is every schema.table (lower case) a query in this
// session can name: the rings read, the documentation tables and what the
// attached history holds.
func (s *session) queryableTables(ctx context.Context) map[string]bool {
	out := map[string]bool{}
	for _, src := range s.sources {
		out[strings.ToLower(src.schema+"."+src.table)] = true
	}
	for _, t := range []string{"table_docs", "column_docs", "rings"} {
		out["probing."+t] = true
	}
	// No history attached: the query fails, and no history table is named.
	if r, err := s.runArgs(ctx, nil, "SELECT name FROM history.sqlite_master WHERE type IN ('table', 'view')", MaxLimit); err == nil {
		for _, row := range r.Rows {
			n, _ := row.Get("name")
			out["history."+strings.ToLower(fmt.Sprint(n))] = true
		}
	}
	return out
}

// count is a table's row count, if it finishes within ctx.
func (s *session) count(ctx context.Context, schema, table string) (int64, bool) {
	r, err := s.runArgs(ctx, nil, "SELECT count(*) AS n FROM "+quoteIdent(schema)+"."+quoteIdent(table), 1)
	if err != nil || len(r.Rows) != 1 {
		return 0, false
	}
	n, _ := r.Rows[0].Get("n")
	v, ok := n.(int64)
	return v, ok
}

// runArgs runs an engine-written query with bound arguments; limit 0
// counts rows without returning any. A nil e returns SQLite's error as is
// (a probe whose failure is an answer).
func (s *session) runArgs(ctx context.Context, e *Engine, q string, limit int, args ...string) (*Result, error) {
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	rows, err := s.conn.QueryContext(ctx, q, named)
	if err != nil {
		if e == nil { // the engine's own probe: the caller takes the failure as an answer
			return nil, err
		}
		return nil, s.queryError(ctx, e, err)
	}
	defer rows.Close()
	res := &Result{Columns: rows.Columns(), Rows: []Row{}}
	dest := make([]driver.Value, len(res.Columns))
	for {
		err := rows.Next(dest)
		if err == io.EOF {
			break
		}
		if err != nil {
			if e == nil {
				return nil, err
			}
			return nil, s.queryError(ctx, e, err)
		}
		res.TotalRows++
		if res.TotalRows <= limit {
			vals := make([]any, len(dest))
			for i, v := range dest {
				vals[i], _ = cell(v, 1<<20)
			}
			res.Rows = append(res.Rows, jsonrow.New(res.Columns, vals))
		}
	}
	res.RowCount = len(res.Rows)
	res.Truncated = res.TotalRows > res.RowCount
	return res, nil
}
