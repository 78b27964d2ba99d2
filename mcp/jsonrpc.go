package mcp

// JSON-RPC request ids, checked before mcp-go sees a message, on both
// transports. The MCP spec narrows JSON-RPC: a request id is a string or an
// integer, never null. mcp-go takes any JSON value (an object id is echoed
// back, a null id turns the request into a notification), so a request
// with any other id is answered -32600 Invalid Request here and never runs.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/probing-mcp/probing-mcp/prompts"
	"github.com/probing-mcp/probing-mcp/tools"
)

// maxExactID is the largest integer id mcp-go echoes exactly: it reads ids
// as float64, so 2^53+1 would come back as 2^53 and match no request.
const maxExactID = 1<<53 - 1

const (
	jsonrpcInvalidRequest = -32600
	jsonrpcInvalidParams  = -32602
)

// precheck answers, before mcp-go runs it, a message that must not run:
// a request with an id the spec forbids (badID: the answer has no id, and
// HTTP says 400), or a prompts/get whose arguments the prompt refuses
// (-32602 Invalid params with the request's id; mcp-go would answer any
// prompt handler's error as -32603, an internal error). nil: let it run.
func precheck(msg []byte) (answer []byte, badID bool) {
	if reason := invalidRequestID(msg); reason != "" {
		return invalidRequestResponse(reason), true
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name      string         `json:"name"`
			Arguments map[string]any `json:"arguments"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil || m.Method != "prompts/get" || m.ID == nil {
		return nil, false
	}
	args := make(map[string]string, len(m.Params.Arguments))
	for k, v := range m.Params.Arguments {
		s, ok := v.(string)
		if v == nil { // an absent value, but still a name to check
			s, ok = "", true
		}
		if !ok {
			return invalidParamsResponse(m.ID, fmt.Sprintf("prompt argument %q must be a string (MCP prompt arguments are strings), got %s", k, tools.DescribeValue(v))), false
		}
		args[k] = s
	}
	if err := prompts.Check(m.Params.Name, args); err != nil {
		return invalidParamsResponse(m.ID, err.Error()), false
	}
	return nil, false
}

// invalidParamsResponse is -32602 for the request id (already checked).
func invalidParamsResponse(id json.RawMessage, message string) []byte {
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{jsonrpcInvalidParams, message}})
	return b
}

// invalidRequestID returns why msg is a request with an id the spec
// forbids, or "" for anything else: requests with a good id, notifications
// (no id), responses (no method), and what is not a JSON object at all
// (mcp-go answers those with its parse error; a batch is one of them, as
// MCP has had no batches since 2025-06-18).
func invalidRequestID(msg []byte) string {
	// encoding/json, as mcp-go uses it: keys match case-insensitively and
	// the last of duplicates wins, so this sees the id mcp-go would.
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method json.RawMessage `json:"method"`
	}
	if json.Unmarshal(msg, &m) != nil || m.Method == nil || m.ID == nil {
		return ""
	}
	id := bytes.TrimSpace(m.ID)
	var what string
	switch id[0] {
	case '"':
		return ""
	case 'n':
		what = "null"
	case 't', 'f':
		what = "a boolean"
	case '{':
		what = "an object"
	case '[':
		what = "an array"
	default:
		f, err := strconv.ParseFloat(string(id), 64)
		switch {
		case err != nil || math.IsInf(f, 0):
			what = "a number too large for an integer id"
		case f != math.Trunc(f):
			what = "a fractional number"
		case math.Abs(f) > maxExactID:
			what = "an integer beyond ±(2^53-1), which cannot be echoed exactly"
		default:
			return ""
		}
	}
	return "a request id must be a string or an integer (MCP), and this one is " + what +
		"; send a string or an integer id, or no id for a notification"
}

// invalidRequestResponse is the answer to such a request. Its id is null:
// the request's own id is the thing that cannot be trusted to be echoed.
func invalidRequestResponse(reason string) []byte {
	type rpcError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    string `json:"data"`
	}
	b, _ := json.Marshal(struct {
		JSONRPC string    `json:"jsonrpc"`
		ID      *struct{} `json:"id"`
		Error   rpcError  `json:"error"`
	}{"2.0", nil, rpcError{jsonrpcInvalidRequest, "Invalid Request", reason}})
	return b
}
