package sqlengine

import (
	"context"
	"database/sql/driver"
	"io"
	"strings"

	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
)

// Description is describe_tables' answer, Probing's shape: the matching
// rows of probing.table_docs and of probing.column_docs.
type Description struct {
	Tables  *Result `json:"tables"`
	Columns *Result `json:"columns"`
}

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
	return &Description{Tables: tables, Columns: cols}, nil
}

// runArgs runs an engine-written query with bound arguments; limit 0
// counts rows without returning any.
func (s *session) runArgs(ctx context.Context, e *Engine, q string, limit int, args ...string) (*Result, error) {
	named := make([]driver.NamedValue, len(args))
	for i, a := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	rows, err := s.conn.QueryContext(ctx, q, named)
	if err != nil {
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
