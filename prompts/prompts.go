// Package prompts holds the MCP prompts: guided investigations that tell an
// LLM which tools to call, in which order, and how to read their answers.
// A prompt is built from the tools actually registered, so it never names a
// tool the server does not offer.
package prompts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// All returns the prompts for a server that registered the named tools.
// Each refuses arguments it does not declare, naming the ones it does.
func All(tools map[string]bool) []server.ServerPrompt {
	out := []server.ServerPrompt{diagnoseHang(tools), investigateWatchdogTimeout(tools), postMortem(tools)}
	// The performance prompts are about recorded tables: without query they
	// would have nothing to say.
	if tools["query"] {
		out = append(out, findStraggler(tools), explainSlowStep(tools))
	}
	for i := range out {
		out[i].Handler = checkNames(out[i].Prompt, out[i].Handler)
	}
	return out
}

// ArgError is a prompt argument the client got wrong. The server answers
// it as JSON-RPC -32602 Invalid params (mcp-go would say -32603, an
// internal error, for any handler error).
type ArgError struct{ Msg string }

func (e *ArgError) Error() string { return e.Msg }

func argErrorf(format string, args ...any) error { return &ArgError{Msg: fmt.Sprintf(format, args...)} }

func checkNames(p mcplib.Prompt, h server.PromptHandlerFunc) server.PromptHandlerFunc {
	names := make([]string, len(p.Arguments))
	for i, a := range p.Arguments {
		names[i] = a.Name
	}
	return func(ctx context.Context, req mcplib.GetPromptRequest) (*mcplib.GetPromptResult, error) {
		for k := range req.Params.Arguments {
			if !slices.Contains(names, k) {
				return nil, argErrorf("prompt %s has no argument %q; its arguments: %s", p.Name, k, strings.Join(names, ", "))
			}
		}
		return h(ctx, req)
	}
}

// Check runs prompt name's argument checks on args. It returns an
// *ArgError for arguments the client must fix, and nil otherwise, also for
// a prompt that does not exist (the server says that itself).
func Check(name string, args map[string]string) error {
	all := map[string]bool{"query": true}
	for _, p := range All(all) {
		if p.Prompt.Name != name {
			continue
		}
		_, err := p.Handler(context.Background(), mcplib.GetPromptRequest{Params: mcplib.GetPromptParams{Name: name, Arguments: args}})
		if ae, ok := errors.AsType[*ArgError](err); ok {
			return ae
		}
	}
	return nil
}
