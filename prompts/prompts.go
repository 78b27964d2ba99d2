// Package prompts holds the MCP prompts: guided investigations that tell an
// LLM which tools to call, in which order, and how to read their answers.
// A prompt is built from the tools actually registered, so it never names a
// tool the server does not offer.
package prompts

import (
	"github.com/mark3labs/mcp-go/server"
)

// All returns the prompts for a server that registered the named tools.
func All(tools map[string]bool) []server.ServerPrompt {
	out := []server.ServerPrompt{diagnoseHang(tools), investigateWatchdogTimeout(tools), postMortem(tools)}
	// The performance prompts are about recorded tables: without query they
	// would have nothing to say.
	if tools["query"] {
		out = append(out, findStraggler(tools), explainSlowStep(tools))
	}
	return out
}
