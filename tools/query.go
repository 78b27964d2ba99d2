package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// QueryParams are the arguments of query (Probing's names).
type QueryParams struct {
	SQL   string `json:"sql" jsonschema:"minLength=1" jsonschema_description:"One SELECT over schema.table names, e.g. SELECT _rank, count(*) FROM python.comm_collective GROUP BY 1"`
	Limit int    `json:"limit,omitempty" jsonschema:"minimum=0,maximum=1000" jsonschema_description:"Rows to return (default 200); total_rows counts them all"`
}

// QueryResult documents the shape of sqlengine.Result for the output
// schema: rows are objects keyed by column (in column order), which the
// schema reflector cannot see through Row's custom encoding.
type QueryResult struct {
	Columns             []string           `json:"columns"`
	Rows                []map[string]any   `json:"rows"`
	RowCount            int                `json:"row_count"`
	TotalRows           int                `json:"total_rows"`
	TotalRowsLowerBound bool               `json:"total_rows_lower_bound,omitempty"`
	Truncated           bool               `json:"truncated"`
	DataQuality         *sqlengine.Quality `json:"data_quality,omitempty"`
}

func queryTool(env *Env) Def {
	tool := mcplib.NewTool("query",
		mcplib.WithToolTitle("SQL over ring tables"),
		mcplib.WithDescription("Use for what the other tools do not answer: one read-only SQLite SELECT over the ring tables every local process records (tag columns _rank, _pid, _host, …) and history.*. Call describe_tables first."),
		schemas[QueryParams, QueryResult](env),
		hints(true, false, true, false),
	)
	h, call := typed(func(ctx context.Context, p QueryParams) (queryAnswer, error) {
		res, err := env.scope().Query(ctx, p.SQL, p.Limit)
		return queryAnswer{res}, sqlUserError(err)
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "read-only SQL over the ring tables every local rank records (collectives, step timings, Flight Recorder rows, …) and the history",
		Doc:     "One read-only SQL statement over the ring tables (see above). Probing's result shape: `{columns, rows (objects), row_count, total_rows, truncated}`, plus `data_quality`."}
}

// sqlUserError turns the engine's refusals into errors the model fixes.
func sqlUserError(err error) error {
	var qe *sqlengine.Error
	if errors.As(err, &qe) {
		msg := qe.Msg
		if qe.Kind == "sql" && strings.Contains(msg, "no such") {
			msg += "; call describe_tables to see the tables and columns that exist"
		}
		return &UserError{msg: msg}
	}
	return scopeError(err)
}

// SchemaResources are probing://schema/catalog and one
// probing://schema/{schema}/{table} per table, as Probing serves them, plus
// a template for tables that appear later (new processes).
func SchemaResources(env *Env) ([]server.ServerResource, []server.ServerResourceTemplate) {
	if env.SQL == nil {
		return nil, nil
	}
	catalog := mcplib.NewResource("probing://schema/catalog", "schema-catalog",
		mcplib.WithResourceDescription("Summary of all documented tables"), mcplib.WithMIMEType("application/json"))
	res := []server.ServerResource{{Resource: catalog, Handler: func(ctx context.Context, req mcplib.ReadResourceRequest) ([]mcplib.ResourceContents, error) {
		d, err := env.SQL.Describe(ctx, "", "", sqlengine.MaxLimit)
		if err != nil {
			return nil, err
		}
		return jsonContents(req.Params.URI, d.Tables)
	}}}
	read := func(ctx context.Context, req mcplib.ReadResourceRequest) ([]mcplib.ResourceContents, error) {
		uri := req.Params.URI
		rest, ok := strings.CutPrefix(uri, "probing://schema/")
		schema, table, ok2 := strings.Cut(rest, "/")
		if !ok || !ok2 || schema == "" || table == "" {
			return nil, fmt.Errorf("invalid schema resource URI: %s", uri)
		}
		d, err := env.SQL.Describe(ctx, schema, table, 1)
		if err != nil {
			return nil, err
		}
		if d.Tables.TotalRows == 0 {
			return nil, fmt.Errorf("unknown resource URI: %s", uri)
		}
		return jsonContents(uri, map[string]any{"table": d.Tables, "columns": d.Columns})
	}
	if d, err := env.SQL.Describe(context.Background(), "", "", sqlengine.MaxLimit); err == nil {
		for _, row := range d.Tables.Rows {
			s, _ := row.Get("table_schema")
			t, _ := row.Get("table_name")
			desc, _ := row.Get("description")
			name := fmt.Sprintf("%v.%v", s, t)
			r := mcplib.NewResource(fmt.Sprintf("probing://schema/%v/%v", s, t), name,
				mcplib.WithResourceDescription(fmt.Sprint(desc)), mcplib.WithMIMEType("application/json"))
			r.Title = name
			res = append(res, server.ServerResource{Resource: r, Handler: read})
		}
	}
	tmpl := mcplib.NewResourceTemplate("probing://schema/{schema}/{table}", "schema-table",
		mcplib.WithTemplateDescription("Columns of one table (any table recorded in the data dir, documented or not)"),
		mcplib.WithTemplateMIMEType("application/json"))
	return res, []server.ServerResourceTemplate{{Template: tmpl, Handler: read}}
}

func jsonContents(uri string, v any) ([]mcplib.ResourceContents, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return []mcplib.ResourceContents{mcplib.TextResourceContents{URI: uri, MIMEType: "application/json", Text: string(b)}}, nil
}

func clusterQuery(env *Env) Def {
	tool := mcplib.NewTool("cluster_query",
		mcplib.WithToolTitle("SQL over every node's tables"),
		mcplib.WithDescription("Use for SQL over the whole job: query's SELECT over every node's ring tables, tagged with the node (_host, _node_rank) and the process (_rank, _pid); plain WHERE filters run on the nodes. data_quality names the nodes that did not answer."),
		schemas[QueryParams, QueryResult](env),
		hints(true, false, true, false),
	)
	h, call := typed(func(ctx context.Context, p QueryParams) (queryAnswer, error) {
		res, err := env.scope().Query(ctx, p.SQL, p.Limit)
		return queryAnswer{res}, sqlUserError(err)
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "read-only SQL over every node's ring tables, with node and rank tag columns; filters applied on the nodes",
		Doc:     "Whole-job scope only: one read-only SQL statement over every node's ring tables, node and rank tag columns, filters applied on the nodes, `data_quality` naming the nodes that did not answer."}
}
