// Package tools defines the MCP tools: one file per tool family, each tool a
// Params/Result struct pair and a thin handler over a domain package. The
// server (package mcp) decides which of them to register.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// Env is what the tools need from the server that hosts them.
type Env struct {
	// Files is the policy for paths a tool may read.
	Files FilePolicy
	// MaxFileBytes caps one input file (PROBING_MAX_FILE_SIZE).
	MaxFileBytes int64
	// LogLevel is the server's live log level (set_config changes it).
	LogLevel *slog.LevelVar
	Logger   *slog.Logger
	// SQL answers query and describe_tables; nil leaves them out.
	SQL *sqlengine.Engine
	// Skills loads the skill catalog (nil: no skill tools).
	Skills LoadSkills
	// AllowWrite is the server's write switch (skills may call write
	// tools only when it is on).
	AllowWrite bool
	// Agents locates the in-process agents of this node.
	Agents agent.Options
	// History persists verdicts and captures; nil when it cannot be
	// opened (the tools still answer, they just do not record).
	History *history.Store
	// OutputSchemas lists each tool's output schema in tools/list
	// (PROBING_MCP_OUTPUT_SCHEMAS); off by default, for the token budget.
	OutputSchemas bool
	// Cluster, when set, makes the whole job the scope of every tool
	// (serve --job/--peers: the node daemons are asked, not this node)
	// and adds the tools only the whole job has (list_cluster_nodes,
	// cluster_query).
	Cluster *fanout.Job
	// GPU is this process's GPU sampler (serve in the node scope); nil
	// reads the newest round a sampler left in the rings through SQL.
	GPU evidence.GPUSource
}

// scope is where every tool reads the job's evidence: the whole job
// when the server has one, else this node. No tool branches on which.
func (e *Env) scope() evidence.Scope {
	if e.Cluster != nil {
		// Pids name this node's processes (list_processes lists them).
		return evidence.Traced(e.Cluster.Scope(e.node()))
	}
	return evidence.Traced(e.node())
}

// Scope is the Env's scope for the doors that are not tools (the
// watcher), so that they see what the tools see.
func (e *Env) Scope() evidence.Scope { return e.scope() }

// node is this node's scope, from the Env's sources.
func (e *Env) node() *evidence.Node {
	return &evidence.Node{Agents: e.Agents, SQL: e.SQL, Sampler: e.GPU, Host: nodeHost(), History: e.History}
}

// scopeError is a scope's failure as the tool says it: a selection or a
// whole-job answer the caller can act on is the caller's to fix.
func scopeError(err error) error {
	var ce *evidence.CallError
	if errors.As(err, &ce) {
		return &UserError{msg: ce.Msg}
	}
	return err
}

// Def is one tool and how the server must treat it.
type Def struct {
	server.ServerTool
	// Write marks a tool that changes something outside its own answer.
	// Write tools are registered only when writes are allowed, and every
	// call is audited. The tool's readOnlyHint must say the same.
	Write bool
	// Summary is the one line the server instructions give the tool.
	Summary string
	// Doc is the tool's row in the README's tool table, for a person
	// choosing tools (the README is generated from it: see
	// TestREADMEToolTable).
	Doc string
	// Call is the tool without MCP around it (skills use it).
	Call Call
}

// All returns every tool, in the order they are listed and documented.
func All(env *Env) []Def {
	defs := []Def{diagnoseHang(env), analyzeFlightRecorder(env), listProcesses(env), getStacks(env), gpuStatus(env), snapshotFlightRecorder(env), getConfig(env), listAlerts(env)}
	if env.SQL != nil {
		defs = append(defs, queryTool(env), describeTables(env))
	}
	if env.Skills != nil {
		defs = append(defs, listSkills(env), planSkill(env), runSkill(env))
	}
	if env.Cluster != nil {
		defs = append(defs, listClusterNodes(env), clusterQuery(env))
	}
	return append(defs, setConfig(env), evalPython(env))
}

// hints sets all four annotation hints: mcp-go's defaults claim every tool
// is destructive and open-world, so a client would warn about a read.
func hints(readOnly, destructive, idempotent, openWorld bool) mcplib.ToolOption {
	return func(t *mcplib.Tool) {
		a := &t.Annotations
		a.ReadOnlyHint, a.DestructiveHint = mcplib.ToBoolPtr(readOnly), mcplib.ToBoolPtr(destructive)
		a.IdempotentHint, a.OpenWorldHint = mcplib.ToBoolPtr(idempotent), mcplib.ToBoolPtr(openWorld)
	}
}

// UserError is a failure the model can fix by changing the call; its text
// says how. Every other error is a server fault.
type UserError struct{ msg string }

func (e *UserError) Error() string { return e.msg }

// userErrorf builds a UserError.
func userErrorf(format string, args ...any) error {
	return &UserError{msg: fmt.Sprintf(format, args...)}
}

// typed adapts fn to an MCP handler: arguments are checked against the
// input schema reflected from P (argSpec: unknown names, types, enums,
// bounds) and bound into P; any error becomes an isError result the model
// reads and acts on (a UserError says how to fix the call; any other is
// said as the tool's failure, never a JSON-RPC error the model would not
// see); a result becomes structured content with its ModelText as the
// text, or its JSON when it has none.
//
// The second function is the same tool as a plain call, for the skills:
// they run tools in process, never through a made-up MCP request.
func typed[P, R any](fn func(ctx context.Context, p P) (R, error)) (server.ToolHandlerFunc, Call) {
	spec := specOf(schemaJSON(reflect.TypeFor[P](), true))
	call := func(ctx context.Context, args map[string]any) (any, error) {
		norm, err := jsonArgs(args, spec)
		if err != nil {
			return nil, err
		}
		var p P
		if err := spec.bind(norm, &p); err != nil {
			return nil, err
		}
		return fn(ctx, p)
	}
	return func(ctx context.Context, req mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
		name := req.Params.Name
		args, err := jsonArgs(req.Params.Arguments, spec)
		var p P
		if err == nil {
			err = spec.bind(args, &p)
		}
		if err != nil {
			return mcplib.NewToolResultError(fmt.Sprintf("invalid arguments for %s: %v", name, err)), nil
		}
		ctx = withProgress(ctx, req)
		r, err := fn(ctx, p)
		if err != nil {
			return toolError(name, err), nil
		}
		if t, ok := any(r).(modelTexter); ok {
			return mcplib.NewToolResultStructured(r, t.ModelText()), nil
		}
		return mcplib.NewToolResultStructuredOnly(r), nil
	}, call
}

// checkParams applies P's schema (bounds, enums) to p, for a door that
// hands a P over without the typed adapter (the CLI's diagnose): the
// bounds are written once, in the schema tags.
func checkParams[P any](p P) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	var q P
	return specOf(schemaJSON(reflect.TypeFor[P](), true)).bind(m, &q)
}

// jsonArgs is a call's arguments as JSON values (a skill's int, an
// in-process client's []string, as a client's JSON would carry them), so
// both doors are checked the same way. No arguments is an empty object.
func jsonArgs(args any, spec *argSpec) (map[string]any, error) {
	if args == nil {
		return map[string]any{}, nil
	}
	b, err := json.Marshal(args)
	if err == nil && string(b) == "null" { // a nil map
		return map[string]any{}, nil
	}
	var m map[string]any
	if err != nil || json.Unmarshal(b, &m) != nil || m == nil {
		return nil, userErrorf("arguments must be a JSON object of named values, got %s; this tool's arguments: %s", DescribeValue(args), spec.list())
	}
	return m, nil
}

// toolError is a failed call as the model sees it. A UserError is its
// own text; anything else (a file that cannot be read, an agent that
// broke its connection) is named as this tool's failure, with its cause.
func toolError(name string, err error) *mcplib.CallToolResult {
	var ue *UserError
	if errors.As(err, &ue) {
		return mcplib.NewToolResultError(ue.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return mcplib.NewToolResultError(fmt.Sprintf("%s did not finish: %v; the request's deadline ended first (retry, or narrow the call: fewer ranks or pids)", name, err))
	}
	return mcplib.NewToolResultError(fmt.Sprintf("%s failed: %v", name, err))
}

// Call runs a tool in process: its arguments as JSON values, its result
// (the structured content) or its error (a UserError when the call was
// wrong).
type Call func(ctx context.Context, args map[string]any) (any, error)

// modelTexter is a result whose text content is a rendering written for
// a model rather than its JSON.
type modelTexter interface{ ModelText() string }

// withProgress has the whole-job fan-outs under ctx send MCP progress
// notifications when the client asked for them (a progressToken in the
// request's _meta).
func withProgress(ctx context.Context, req mcplib.CallToolRequest) context.Context {
	if req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
		return ctx
	}
	srv := server.ServerFromContext(ctx)
	if srv == nil {
		return ctx
	}
	token := req.Params.Meta.ProgressToken
	return fanout.WithProgress(ctx, func(done, total int, msg string) {
		// Best effort: a client that went away is no reason to fail.
		_ = srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
			"progressToken": token, "progress": done, "total": total, "message": msg})
	})
}
