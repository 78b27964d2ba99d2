package fedsql

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// DefaultMaxRows is Local's row cap per scan when MaxRows is unset.
const DefaultMaxRows = 100_000

// Local serves a node's own engine as a Node.
type Local struct {
	Engine *sqlengine.Engine
	// MaxRows caps the rows of one scan (default DefaultMaxRows, at most
	// sqlengine.MaxScanRows); a cut is reported as Truncated.
	MaxRows int
	// NodeID and NodeTags are what ID and Tags answer.
	NodeID   string
	NodeTags NodeTags
}

// ID is the node's address.
func (l *Local) ID() string { return l.NodeID }

// Tags are the node's tags.
func (l *Local) Tags() NodeTags { return l.NodeTags }

// Tables lists the node's ring tables and probing.rings (the rings
// themselves, each node's), with their columns, tag columns included; not
// the documentation tables (every node's are the same) nor the history
// (the coordinator's own).
func (l *Local) Tables(ctx context.Context) ([]Table, error) {
	rows, err := l.Engine.QueryRows(ctx, `SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns
		WHERE lower(table_schema) <> 'history' AND (lower(table_schema) <> 'probing' OR lower(table_name) = 'rings')
		ORDER BY table_schema, table_name, ordinal_position`, sqlengine.MaxScanRows)
	if err != nil {
		return nil, err
	}
	var out []Table
	for _, r := range rows.Rows {
		s, _ := r[0].(string)
		t, _ := r[1].(string)
		c, _ := r[2].(string)
		ty, _ := r[3].(string)
		if n := len(out); n == 0 || out[n-1].Schema != s || out[n-1].Name != t {
			out = append(out, Table{Schema: s, Name: t})
		}
		out[len(out)-1].Columns = append(out[len(out)-1].Columns, Column{Name: c, Type: ty})
	}
	return out, nil
}

// Scan answers one ScanRequest through the engine, so its read-only
// guard, memory cap and timeout apply. Names are checked against the
// table's real columns and values become SQL literals; anything else is
// refused with an error naming it.
func (l *Local) Scan(ctx context.Context, req ScanRequest) (*ScanReply, error) {
	tables, err := l.Tables(ctx)
	if err != nil {
		return nil, err
	}
	var tab *Table
	for i := range tables {
		if strings.EqualFold(tables[i].Schema, req.Schema) && strings.EqualFold(tables[i].Name, req.Table) {
			tab = &tables[i]
		}
	}
	if tab == nil {
		return nil, fmt.Errorf("fedsql: no table %s.%s on this node", req.Schema, req.Table)
	}
	max := l.MaxRows
	if max <= 0 {
		max = DefaultMaxRows
	}
	if req.Limit > 0 && req.Limit < max {
		max = req.Limit
	}
	q, err := buildScan(tab, req)
	if err != nil {
		return nil, err
	}
	rows, err := l.Engine.QueryRows(ctx, q, max)
	if err != nil {
		return nil, err
	}
	rep := &ScanReply{Columns: rows.Columns, Rows: rows.Rows, Truncated: rows.Truncated}
	if rows.Truncated {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s.%s: rows cut at %d on this node", tab.Schema, tab.Name, max))
	}
	if dq := rows.DataQuality; dq != nil {
		for _, p := range dq.Problems {
			rep.Problems = append(rep.Problems, jobtext.QuoteTail(p.Path, jobtext.Path)+": "+p.Problem)
		}
	}
	return rep, nil
}

// buildScan writes the SELECT of one scan; every name must be one of the
// table's columns (matched case-insensitively, written as declared).
func buildScan(tab *Table, req ScanRequest) (string, error) {
	col := func(name string) (string, error) {
		for _, c := range tab.Columns {
			if strings.EqualFold(c.Name, name) {
				return sqlengine.QuoteIdent(c.Name), nil
			}
		}
		return "", fmt.Errorf("fedsql: table %s.%s has no column %q", tab.Schema, tab.Name, name)
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	if len(req.Columns) == 0 {
		return "", fmt.Errorf("fedsql: a scan of %s.%s names no columns", tab.Schema, tab.Name)
	}
	for i, c := range req.Columns {
		q, err := col(c)
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(q)
	}
	b.WriteString(" FROM " + sqlengine.QuoteIdent(tab.Schema) + "." + sqlengine.QuoteIdent(tab.Name))
	for i, w := range req.Where {
		q, err := col(w.Column)
		if err != nil {
			return "", err
		}
		switch w.Op {
		case "=", "!=", "<", "<=", ">", ">=":
		default:
			return "", fmt.Errorf("fedsql: operator %q is not one of = != < <= > >=", w.Op)
		}
		lit, err := Literal(w.Value)
		if err != nil {
			return "", fmt.Errorf("fedsql: constraint on %s: %w", w.Column, err)
		}
		if i == 0 {
			b.WriteString(" WHERE ")
		} else {
			b.WriteString(" AND ")
		}
		b.WriteString(q + " " + w.Op + " " + lit)
	}
	return b.String(), nil
}

// Literal writes v as a SQL literal: a finite number or a string (quotes
// doubled, NUL refused). Anything else is an error.
func Literal(v any) (string, error) {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10), nil
	case int:
		return strconv.Itoa(x), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "", fmt.Errorf("value %v is not a finite number", x)
		}
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return strconv.FormatInt(int64(x), 10), nil
		}
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return strconv.FormatInt(i, 10), nil
		}
		f, err := x.Float64()
		if err != nil {
			return "", fmt.Errorf("value %q is not a number", string(x))
		}
		return Literal(f)
	case string:
		if strings.IndexByte(x, 0) >= 0 {
			return "", fmt.Errorf("a string value may not contain NUL")
		}
		return "'" + strings.ReplaceAll(x, "'", "''") + "'", nil
	}
	return "", fmt.Errorf("value of type %T is not a number or a string", v)
}
