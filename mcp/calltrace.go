package mcp

// Call records (internal/calltrace): one request_end record per MCP
// request, from mcp-go's hooks, and one tool record per tool call, from a
// tool middleware. Requests mcp-go answers before dispatching them (an
// unparsable message, an unknown method) reach no hook and leave none.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/internal/calltrace"
	"github.com/probing-mcp/probing-mcp/tools"
)

// callRecordsFromEnv reads the PROBING_MCP_TRACE variables; set ones that
// do nothing (the switch is off) are said.
func callRecordsFromEnv(getenv func(string) string, dataDir string, logger *slog.Logger) (calltrace.Config, error) {
	c, err := calltrace.FromEnv(getenv, dataDir)
	if err == nil && len(c.Unused) > 0 && logger != nil {
		logger.Warn("call record variables are set but "+calltrace.EnvOn+" is off: no records are written", "set", strings.Join(c.Unused, ","))
	}
	return c, err
}

// callRecorders maps a server to its Recorder, for CloseCallRecords.
var callRecorders sync.Map // *server.MCPServer → *calltrace.Recorder

// openCallRecords opens the sinks cfg asks for; nil when records are off.
func openCallRecords(cfg calltrace.Config, logger *slog.Logger) (*calltrace.Recorder, error) {
	rec, err := calltrace.Open(cfg, logger, calltrace.Options{})
	if err != nil || rec == nil {
		return nil, err
	}
	logger.Info("call records", "sinks", sinkList(cfg), "path", cfg.Path, "format", cfg.Format)
	return rec, nil
}

func sinkList(c calltrace.Config) string {
	var s []string
	for _, k := range []struct {
		on   bool
		name string
	}{{c.File, calltrace.SinkFile}, {c.Stderr, calltrace.SinkStderr}, {c.OTel, calltrace.SinkOTel}} {
		if k.on {
			s = append(s, k.name)
		}
	}
	return strings.Join(s, ",")
}

// CloseCallRecords writes the records still queued for s and closes its
// sinks (bounded: a hung disk does not hold up exit). The serve functions
// call it when they return.
func CloseCallRecords(s *server.MCPServer) {
	if v, ok := callRecorders.LoadAndDelete(s); ok {
		v.(*calltrace.Recorder).Close()
	}
}

// withCallRecords installs rec on the server: the request hooks (added to
// any the server has, never replacing them) and the tool middleware. A nil
// rec installs nothing.
func withCallRecords(rec *calltrace.Recorder) server.ServerOption {
	return func(s *server.MCPServer) {
		if rec == nil {
			return
		}
		callRecorders.Store(s, rec)
		hooks := s.GetHooks()
		if hooks == nil {
			hooks = &server.Hooks{}
			server.WithHooks(hooks)(s)
		}
		starts := &requestStarts{m: map[string]time.Time{}}
		hooks.AddBeforeAny(func(ctx context.Context, id any, _ mcplib.MCPMethod, _ any) {
			starts.begin(ctx, id)
		})
		hooks.AddOnSuccess(func(ctx context.Context, id any, method mcplib.MCPMethod, _ any, result any) {
			r := requestEnd(ctx, id, method, starts.end(ctx, id))
			if res, ok := result.(*mcplib.CallToolResult); ok && res != nil && res.IsError {
				r.Outcome = calltrace.OutcomeToolError
			}
			rec.Emit(ctx, r)
		})
		hooks.AddOnError(func(ctx context.Context, id any, method mcplib.MCPMethod, _ any, err error) {
			r := requestEnd(ctx, id, method, starts.end(ctx, id))
			r.Outcome, r.ErrorType = errorOutcome(err)
			var rpc interface{ ToJSONRPCError() mcplib.JSONRPCError }
			if errors.As(err, &rpc) {
				r.ErrorCode = rpc.ToJSONRPCError().Error.Code
			}
			rec.Emit(ctx, r)
		})
		server.WithToolHandlerMiddleware(toolRecords(rec))(s)
	}
}

// maxRequestIDBytes bounds a client-chosen request id in a record.
const maxRequestIDBytes = 128

func requestEnd(ctx context.Context, id any, method mcplib.MCPMethod, took time.Duration) calltrace.Record {
	rid := fmt.Sprint(id)
	if len(rid) > maxRequestIDBytes {
		rid = rid[:maxRequestIDBytes] + "…"
	}
	r := calltrace.Record{Type: calltrace.TypeRequestEnd, Method: string(method), RequestID: rid, Outcome: calltrace.OutcomeOK,
		DurationMS: ms(took)}
	r.Session, r.Transport = sessionOf(ctx)
	return r
}

// sessionOf is the MCP session's id and the transport it came over.
func sessionOf(ctx context.Context) (session, transport string) {
	if cs := server.ClientSessionFromContext(ctx); cs != nil {
		session = cs.SessionID()
	}
	if t, _, ok := strings.Cut(CallerFrom(ctx), ":"); ok {
		transport = t
	}
	return session, transport
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// errorOutcome names how an error ended a call: canceled, past its
// deadline, or another error, with its Go type.
func errorOutcome(err error) (outcome, errType string) {
	switch {
	case errors.Is(err, context.Canceled):
		return calltrace.OutcomeCanceled, ""
	case errors.Is(err, context.DeadlineExceeded):
		return calltrace.OutcomeDeadline, ""
	case errors.Is(err, server.ErrToolNotFound):
		return calltrace.OutcomeError, "tool_not_found"
	case errors.Is(err, server.ErrPromptNotFound):
		return calltrace.OutcomeError, "prompt_not_found"
	case errors.Is(err, server.ErrResourceNotFound):
		return calltrace.OutcomeError, "resource_not_found"
	case errors.Is(err, server.ErrUnsupported):
		return calltrace.OutcomeError, "unsupported"
	}
	// mcp-go wraps the cause; its type says more than the wrapper's.
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			break
		}
		err = inner
	}
	return calltrace.OutcomeError, fmt.Sprintf("%T", err)
}

// requestStarts holds when each request in flight began, keyed by session
// and request id (the hooks get no context of their own to carry it).
type requestStarts struct {
	mu sync.Mutex
	m  map[string]time.Time
}

// maxInFlight bounds the map: a request that never ends (a hook path that
// panicked) must not grow it for ever.
const maxInFlight = 1 << 16

func startKey(ctx context.Context, id any) string {
	s, _ := sessionOf(ctx)
	return fmt.Sprintf("%s\x00%T:%v", s, id, id)
}

func (r *requestStarts) begin(ctx context.Context, id any) {
	k, now := startKey(ctx, id), time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) >= maxInFlight {
		for key, t := range r.m {
			if now.Sub(t) > time.Hour {
				delete(r.m, key)
			}
		}
		if len(r.m) >= maxInFlight {
			return // its record says a duration of 0
		}
	}
	r.m[k] = now
}

func (r *requestStarts) end(ctx context.Context, id any) time.Duration {
	k := startKey(ctx, id)
	r.mu.Lock()
	t, ok := r.m[k]
	delete(r.m, k)
	r.mu.Unlock()
	if !ok {
		return 0
	}
	return time.Since(t)
}

// toolRecords records each tool call: its name, a hash of its arguments
// (never them), how long it took, how it ended, the size of its answer,
// and diagnose_hang's headline.
func toolRecords(rec *calltrace.Recorder) server.ToolHandlerMiddleware {
	return func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
			start := time.Now()
			res, err := next(ctx, req)
			r := calltrace.Record{Type: calltrace.TypeTool, Tool: req.Params.Name, DurationMS: ms(time.Since(start)), Outcome: calltrace.OutcomeOK}
			r.Session, r.Transport = sessionOf(ctx)
			r.ArgsSHA256, r.ArgsBytes = argsDigest(req.GetArguments())
			switch {
			case err != nil:
				r.Outcome, r.ErrorType = errorOutcome(err)
			case res == nil:
				r.Outcome, r.ErrorType = calltrace.OutcomeError, "no_result"
			case res.IsError:
				// A tool says its errors in the result; one cut short by
				// the client or a deadline says so there too.
				r.Outcome = calltrace.OutcomeToolError
				if cerr := ctx.Err(); cerr != nil {
					r.Outcome, _ = errorOutcome(cerr)
				}
			}
			if res != nil {
				r.TextBytes, r.StructuredBytes = resultBytes(res)
				if req.Params.Name == "diagnose_hang" && !res.IsError {
					r.Verdict = verdictOf(res.StructuredContent)
				}
			}
			rec.Emit(ctx, r)
			return res, err
		}
	}
}

// resultBytes is the size of the text content and of the structured
// content's JSON.
func resultBytes(res *mcplib.CallToolResult) (text, structured int) {
	for _, c := range res.Content {
		if tc, ok := mcplib.AsTextContent(c); ok {
			text += len(tc.Text)
		}
	}
	if res.StructuredContent != nil {
		var n byteCounter
		if json.NewEncoder(&n).Encode(res.StructuredContent) == nil {
			structured = int(n) - 1 // Encode's newline
		}
	}
	return text, structured
}

type byteCounter int

func (c *byteCounter) Write(p []byte) (int, error) {
	*c += byteCounter(len(p))
	return len(p), nil
}

// verdictOf reads diagnose_hang's headline from its structured content:
// the result itself in this process, or its JSON from elsewhere.
func verdictOf(sc any) *calltrace.Verdict {
	var head verdictHead
	switch v := sc.(type) {
	case tools.DiagnoseHangResult:
		head = headOf(&v)
	case *tools.DiagnoseHangResult:
		if v == nil {
			return nil
		}
		head = headOf(v)
	case nil:
		return nil
	default:
		b, err := json.Marshal(v)
		if err != nil || json.Unmarshal(b, &head) != nil {
			return nil
		}
	}
	if head.State == "" {
		return nil
	}
	out := &calltrace.Verdict{State: head.State}
	if len(head.Hypotheses) > 0 {
		h := head.Hypotheses[0]
		out.Category, out.CulpritRanks, out.Confidence = h.Category, h.Culprits, h.Confidence
	}
	return out
}

// verdictHead is the part of diagnosis.Report the record keeps, under
// the same JSON names.
type verdictHead struct {
	State      string       `json:"state"`
	Hypotheses []verdictTop `json:"hypotheses"`
}

type verdictTop struct {
	Category   string `json:"category"`
	Culprits   string `json:"culprit_ranks"`
	Confidence string `json:"confidence"`
}

func headOf(r *tools.DiagnoseHangResult) verdictHead {
	h := verdictHead{State: r.State}
	if len(r.Hypotheses) > 0 {
		top := r.Hypotheses[0]
		h.Hypotheses = []verdictTop{{top.Category, top.Culprits, top.Confidence}}
	}
	return h
}
