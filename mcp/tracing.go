package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/probing-mcp/probing-mcp/internal/tracing"
)

// One SERVER span per MCP request, named and attributed by OpenTelemetry's
// semantic conventions for MCP: "{mcp.method.name} {target}" (target the
// tool's or prompt's name), mcp.method.name, jsonrpc.request.id,
// gen_ai.tool.name and gen_ai.operation.name for tools/call, mcp.session.id,
// mcp.protocol.version, network.transport; an isError result is
// error.type tool_error, a JSON-RPC error its code. Its parent is the
// client's params._meta.traceparent when it sends one.
//
// mcp-go's hooks see every request but cannot change the context its
// handler runs in; its tool middleware can, but does not see the JSON-RPC
// id. Both get the very context the request is handled in, so the span is
// started in the hook, kept under that context, and put into the tool
// handler's context by the middleware: the evidence sources', node
// daemons', agents' and SQL spans are its children. mcp-go's own OTel
// adapter names spans and attributes its own way; it is not used.

// maxInflightSpans bounds the requests traced at once (the HTTP server
// admits 128; stdio a few): past it requests are served untraced.
const maxInflightSpans = 4096

// maxArgsAttr bounds the recorded arguments (PROBING_MCP_TRACE_ARGS).
const maxArgsAttr = 4096

type requestTracer struct {
	spans sync.Map // the request's context → its trace.Span
	n     atomic.Int64
}

// traceRequests installs the request spans: a _meta propagator, the
// hooks, and the tool middleware that hands the span to the handler.
// Among the options it comes before the other tool middlewares, so their
// context (a log line's trace id) holds the span. It adds to the hooks
// already set; a later server.WithHooks would replace them.
func traceRequests() server.ServerOption {
	t := &requestTracer{}
	return func(s *server.MCPServer) {
		server.WithMetaPropagator(metaPropagator{})(s)
		h := s.GetHooks()
		if h == nil {
			h = &server.Hooks{}
			server.WithHooks(h)(s)
		}
		h.AddBeforeAny(t.before)
		h.AddOnSuccess(t.success)
		h.AddOnError(t.failure)
		server.WithToolHandlerMiddleware(t.middleware)(s)
	}
}

// metaPropagator reads the trace context of a request's _meta (for every
// transport; mcp-go calls it before the hooks, on the same context).
type metaPropagator struct{}

func (metaPropagator) ExtractMeta(ctx context.Context, meta *mcplib.Meta) context.Context {
	if meta == nil {
		return ctx
	}
	return tracing.ExtractMeta(ctx, meta.AdditionalFields)
}

// InjectMeta leaves the server's own requests to the client (sampling,
// elicitation: none are sent) untouched.
func (metaPropagator) InjectMeta(_ context.Context, meta *mcplib.Meta) *mcplib.Meta { return meta }

func (t *requestTracer) before(ctx context.Context, id any, method mcplib.MCPMethod, message any) {
	if !tracing.Enabled() || t.n.Load() >= maxInflightSpans {
		return
	}
	name, attrs := requestAttrs(ctx, id, method, message)
	_, span := tracing.StartKind(ctx, name, trace.SpanKindServer, attrs...)
	if _, dup := t.spans.LoadOrStore(ctx, span); dup {
		span.End() // not expected: one context per request
		return
	}
	t.n.Add(1)
}

// take is the span kept for ctx, forgotten.
func (t *requestTracer) take(ctx context.Context) (trace.Span, bool) {
	if t.n.Load() == 0 {
		return nil, false
	}
	v, ok := t.spans.LoadAndDelete(ctx)
	if !ok {
		return nil, false
	}
	t.n.Add(-1)
	return v.(trace.Span), true
}

func (t *requestTracer) middleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcplib.CallToolRequest) (*mcplib.CallToolResult, error) {
		if t.n.Load() == 0 {
			return next(ctx, req)
		}
		if v, ok := t.spans.Load(ctx); ok {
			ctx = trace.ContextWithSpan(ctx, v.(trace.Span))
		}
		return next(ctx, req)
	}
}

func (t *requestTracer) success(ctx context.Context, _ any, _ mcplib.MCPMethod, _ any, result any) {
	span, ok := t.take(ctx)
	if !ok {
		return
	}
	if r, ok := result.(*mcplib.CallToolResult); ok && r != nil && r.IsError {
		desc := "the tool answered with isError"
		if tracing.RecordArgs() {
			desc = resultText(r) // may echo the arguments
		}
		tracing.Fail(span, "tool_error", desc)
	}
	span.End()
}

// jsonrpcError is mcp-go's request error: it knows its JSON-RPC code.
type jsonrpcError interface {
	ToJSONRPCError() mcplib.JSONRPCError
}

func (t *requestTracer) failure(ctx context.Context, id any, method mcplib.MCPMethod, message any, err error) {
	span, ok := t.take(ctx)
	if !ok {
		// Refused before the handler (an unparsable request, a capability
		// this server lacks): a span of its own, so the failure is seen.
		if !tracing.Enabled() {
			return
		}
		name, attrs := requestAttrs(ctx, id, method, message)
		_, span = tracing.StartKind(ctx, name, trace.SpanKindServer, attrs...)
	}
	kind := "_OTHER"
	var je jsonrpcError
	if errors.As(err, &je) {
		kind = strconv.Itoa(je.ToJSONRPCError().Error.Code)
		span.SetAttributes(attribute.String("rpc.response.status_code", kind))
	}
	tracing.Fail(span, kind, err.Error())
	span.End()
}

// requestAttrs are the span's name and attributes by the conventions.
func requestAttrs(ctx context.Context, id any, method mcplib.MCPMethod, message any) (string, []attribute.KeyValue) {
	name := string(method)
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, attribute.String("mcp.method.name", string(method)))
	if rid := requestID(id); rid != "" {
		attrs = append(attrs, attribute.String("jsonrpc.request.id", rid))
	}
	switch m := message.(type) {
	case *mcplib.CallToolRequest:
		tool := clipName(m.Params.Name)
		name += " " + tool
		attrs = append(attrs, attribute.String("gen_ai.tool.name", tool), attribute.String("gen_ai.operation.name", "execute_tool"))
		if tracing.RecordArgs() {
			attrs = append(attrs, attribute.String("gen_ai.tool.call.arguments", toolArgs(m)))
		}
	case *mcplib.GetPromptRequest:
		prompt := clipName(m.Params.Name)
		name += " " + prompt
		attrs = append(attrs, attribute.String("gen_ai.prompt.name", prompt))
	case *mcplib.ReadResourceRequest:
		attrs = append(attrs, attribute.String("mcp.resource.uri", clipText(m.Params.URI, 256)))
	}
	if s := server.ClientSessionFromContext(ctx); s != nil {
		if sid := s.SessionID(); sid != "" {
			attrs = append(attrs, attribute.String("mcp.session.id", clipText(sid, 128)))
		}
	}
	if v := protocolVersion(ctx, message); v != "" {
		attrs = append(attrs, attribute.String("mcp.protocol.version", v))
	}
	switch caller := CallerFrom(ctx); {
	case strings.HasPrefix(caller, "stdio:"):
		attrs = append(attrs, attribute.String("network.transport", "pipe"))
	case strings.HasPrefix(caller, "http:"):
		attrs = append(attrs, attribute.String("network.transport", "tcp"), attribute.String("network.protocol.name", "http"))
	}
	return name, attrs
}

// requestID is a JSON-RPC id as text (a number or a string).
func requestID(id any) string {
	switch v := id.(type) {
	case nil:
		return ""
	case string:
		return clipText(v, 128)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case json.Number:
		return clipText(v.String(), 128)
	case mcplib.RequestId:
		return clipText(strings.Trim(mustJSON(v), `"`), 128)
	}
	return clipText(strings.Trim(mustJSON(id), `"`), 128)
}

// protocolVersion is the version in effect: the request's own (2026-07-28
// and later), the session's, the Mcp-Protocol-Version header, or the one
// initialize asks for.
func protocolVersion(ctx context.Context, message any) string {
	if v := server.RequestProtocolVersion(ctx); v != "" {
		return clipText(v, 32)
	}
	if ir, ok := message.(*mcplib.InitializeRequest); ok {
		return clipText(ir.Params.ProtocolVersion, 32)
	}
	if h := requestHeader(message); h != nil {
		return clipText(h.Get(server.HeaderKeyProtocolVersion), 32)
	}
	return ""
}

// requestHeader is the HTTP header mcp-go copies into a request's
// Header field (every request type has one; empty over stdio).
func requestHeader(message any) http.Header {
	v := reflect.ValueOf(message)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil
	}
	f := v.Elem().FieldByName("Header")
	if !f.IsValid() {
		return nil
	}
	h, _ := f.Interface().(http.Header)
	return h
}

// toolArgs are the call's arguments as sent, clipped.
func toolArgs(m *mcplib.CallToolRequest) string {
	if len(m.Params.RawArguments) > 0 {
		return clipText(string(m.Params.RawArguments), maxArgsAttr)
	}
	return clipText(mustJSON(m.Params.Arguments), maxArgsAttr)
}

func resultText(r *mcplib.CallToolResult) string {
	for _, c := range r.Content {
		if tc, ok := c.(mcplib.TextContent); ok {
			return tc.Text
		}
	}
	return "the tool answered with isError"
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// clipName bounds a client-chosen name in a span name (an unknown tool's
// name is the client's text).
func clipName(s string) string { return clipText(s, 128) }

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
