package tools

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// DescribeTablesParams are the arguments of describe_tables.
type DescribeTablesParams struct {
	Schema string `json:"schema,omitempty" jsonschema_description:"One schema, e.g. python, nccl, gpu, history"`
	Table  string `json:"table,omitempty" jsonschema_description:"One table (e.g. python.comm_collective): its columns"`
	Offset int    `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"Tables to skip in the list (next_offset)"`
	Limit  int    `json:"limit,omitempty" jsonschema:"minimum=0,maximum=1000" jsonschema_description:"Tables per page (default 50); columns up to 4x"`
}

// DescribeTablesResult is describe_tables' answer. Without a table named
// it is a compact listing of what a query can read here (Tables: table,
// rows, processes, about), and the names of the documented tables it
// cannot; with one, that table's documentation and its columns.
type DescribeTablesResult struct {
	Tables  QueryResult  `json:"tables"`
	Columns *QueryResult `json:"columns,omitempty"`
	// NoRows are documented tables no process on this node recorded:
	// a query names them in vain ("no such table").
	NoRows []string `json:"no_rows_on_this_node,omitempty"`
	// LiveOnly are virtual tables only a live agent computes.
	LiveOnly   []string `json:"live_agent_only,omitempty"`
	NextOffset *int     `json:"next_offset,omitempty"`
	Hint       string   `json:"hint,omitempty"`
}

// describeAnswer is DescribeTablesResult as it is built (the engine's
// results, whose rows encode as objects).
type describeAnswer struct {
	Tables     *sqlengine.Result `json:"tables"`
	Columns    *sqlengine.Result `json:"columns,omitempty"`
	NoRows     []string          `json:"no_rows_on_this_node,omitempty"`
	LiveOnly   []string          `json:"live_agent_only,omitempty"`
	NextOffset *int              `json:"next_offset,omitempty"`
	Hint       string            `json:"hint,omitempty"`
	// named: a table was asked for (the text lists its columns).
	named bool
}

const (
	// defaultDescribeLimit is a page of the listing: every table of a
	// node today, within a few thousand characters.
	defaultDescribeLimit = 50
	// maxAbout bounds a listed table's line on what a row is.
	maxAbout = 120
)

func describeTables(env *Env) Def {
	tool := mcplib.NewTool("describe_tables",
		mcplib.WithToolTitle("Describe queryable tables"),
		mcplib.WithDescription("Use before writing SQL: the tables query can read here (rows, what a row is), and documented ones with no rows; name a table for its columns."),
		schemas[DescribeTablesParams, DescribeTablesResult](env),
		hints(true, false, true, false),
	)
	h, call := typed(func(ctx context.Context, p DescribeTablesParams) (describeAnswer, error) {
		return describe(ctx, env, p)
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "which tables a query can read on this node (rows, what a row is); a named table's columns",
		Doc:     "The tables a query can read on this node, with their row counts and what a row is, and the documented tables with no rows here (a query would say no such table). `schema` filters, `offset`/`limit` page; a named `table` gets its columns (type, unit, meaning) and caveats."}
}

func describe(ctx context.Context, env *Env, p DescribeTablesParams) (describeAnswer, error) {
	if env.SQL == nil {
		return describeAnswer{}, userErrorf("the SQL engine is not available on this server")
	}
	schema, table := p.Schema, p.Table
	if table != "" && schema == "" {
		if s, t, ok := strings.Cut(table, "."); ok {
			schema, table = s, t
		}
	}
	limit := p.Limit
	if limit <= 0 {
		limit = defaultDescribeLimit
	}
	if table != "" {
		d, err := env.SQL.Describe(ctx, schema, table, limit)
		if err != nil {
			return describeAnswer{}, sqlUserError(err)
		}
		if d.Tables.TotalRows == 0 {
			return describeAnswer{}, userErrorf("no documented or recorded table matches schema %q table %q; call describe_tables without arguments for the list", schema, table)
		}
		return describeAnswer{Tables: d.Tables, Columns: d.Columns, named: true}, nil
	}
	d, err := env.SQL.Describe(ctx, schema, "", sqlengine.MaxLimit)
	if err != nil {
		return describeAnswer{}, sqlUserError(err)
	}
	if d.Tables.TotalRows == 0 {
		return describeAnswer{}, userErrorf("no documented or recorded table in schema %q; call describe_tables without arguments for the list", schema)
	}
	return listing(d.Tables, p.Offset, limit), nil
}

// listing is the compact page: the tables a query can read, one short
// row each, and the names of the others.
func listing(all *sqlengine.Result, offset, limit int) describeAnswer {
	cols := []string{"table", "rows", "processes", "about"}
	ans := describeAnswer{Tables: &sqlengine.Result{Columns: cols, Rows: []sqlengine.Row{}}}
	var readable []sqlengine.Row
	for _, row := range all.Rows {
		get := func(c string) any { v, _ := row.Get(c); return v }
		name := fmt.Sprint(get("table_schema")) + "." + fmt.Sprint(get("table_name"))
		switch get("status") {
		case sqlengine.StatusQueryable:
			var procs any
			if n, _ := get("processes").(int64); n > 0 {
				procs = n
			}
			readable = append(readable, jsonrow.New(cols, []any{name, get("rows"), procs, firstSentence(fmt.Sprint(get("description")), maxAbout)}))
		case sqlengine.StatusLiveOnly:
			ans.LiveOnly = append(ans.LiveOnly, name)
		default:
			ans.NoRows = append(ans.NoRows, name)
		}
	}
	// The job's own rings first: they are what a question is about.
	slices.SortStableFunc(readable, func(a, b sqlengine.Row) int {
		ring := func(r sqlengine.Row) int {
			if p, _ := r.Get("processes"); p != nil {
				return 0
			}
			return 1
		}
		return cmp.Compare(ring(a), ring(b))
	})
	t := ans.Tables
	t.TotalRows = len(readable)
	if offset < len(readable) {
		t.Rows = readable[offset:min(len(readable), offset+limit)]
	}
	t.RowCount = len(t.Rows)
	if next := offset + t.RowCount; next < len(readable) {
		t.Truncated, ans.NextOffset = true, &next
	}
	ans.Hint = "columns: call again with table (e.g. " + exampleTable(readable) + ")"
	return ans
}

func exampleTable(rows []sqlengine.Row) string {
	for _, r := range rows {
		if n, _ := r.Get("processes"); n != nil {
			v, _ := r.Get("table")
			return fmt.Sprint(v)
		}
	}
	return "python.comm_collective"
}

// firstSentence is what a row is, on one line: a table's description up
// to its first sentence's end, within n bytes.
func firstSentence(s string, n int) string {
	if i := strings.Index(s, ". "); i > 0 {
		s = s[:i+1]
	}
	return jobtext.CutLine(s, n)
}
