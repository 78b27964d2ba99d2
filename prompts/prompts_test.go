package prompts

import (
	"context"
	"errors"
	"strings"
	"testing"

	mcplib "github.com/mark3labs/mcp-go/mcp"
)

var allTools = []string{"diagnose_hang", "analyze_flight_recorder", "list_processes", "get_stacks", "gpu_status", "snapshot_flight_recorder",
	"get_config", "query", "describe_tables", "set_config", "eval_python", "list_skills", "plan_skill", "run_skill"}

func render(t *testing.T, tools map[string]bool, name string, args map[string]string) (string, error) {
	t.Helper()
	for _, p := range All(tools) {
		if p.Prompt.Name != name {
			continue
		}
		res, err := p.Handler(context.Background(), mcplib.GetPromptRequest{Params: mcplib.GetPromptParams{Name: name, Arguments: args}})
		if err != nil {
			return "", err
		}
		return res.Messages[0].Content.(mcplib.TextContent).Text, nil
	}
	t.Fatalf("prompt %s not offered with tools %v", name, tools)
	return "", nil
}

// TestPromptsNameOnlyRegisteredTools renders every prompt with every tool
// and with subsets, and checks that no step names an absent tool.
func TestPromptsNameOnlyRegisteredTools(t *testing.T) {
	subsets := []map[string]bool{{}, {"analyze_flight_recorder": true}, {"query": true}, {"query": true, "get_stacks": true}}
	full := map[string]bool{}
	for _, n := range allTools {
		full[n] = true
	}
	subsets = append(subsets, full)
	withSkills := map[string]bool{"run_skill": true, "skill:training_hang": true, "skill:slow_rank": true, "query": true}
	subsets = append(subsets, withSkills)
	for _, tools := range subsets {
		for _, p := range All(tools) {
			text, err := render(t, tools, p.Prompt.Name, nil)
			if err != nil {
				t.Fatalf("%s with %v: %v", p.Prompt.Name, tools, err)
			}
			for _, n := range allTools {
				if !tools[n] && strings.Contains(text, n) {
					t.Errorf("%s names %s, which is not registered (%v):\n%s", p.Prompt.Name, n, tools, text)
				}
			}
			if !strings.Contains(text, "Answer") {
				t.Errorf("%s has no answer step:\n%s", p.Prompt.Name, text)
			}
		}
	}
	text, _ := render(t, withSkills, "diagnose_hang", nil)
	if !strings.Contains(text, `skill_id="training_hang"`) {
		t.Errorf("diagnose_hang does not use the training_hang skill when it is there:\n%s", text)
	}
	// The tool leads the prompt when the server has it.
	text, _ = render(t, full, "diagnose_hang", nil)
	if !strings.HasPrefix(text[strings.Index(text, "Steps:"):], "Steps:\n1. Call diagnose_hang first") {
		t.Errorf("diagnose_hang does not lead its prompt:\n%s", text)
	}
	text, _ = render(t, map[string]bool{"run_skill": true, "query": true}, "find_straggler", nil)
	if strings.Contains(text, "slow_rank") {
		t.Errorf("find_straggler names a skill that is not loaded:\n%s", text)
	}
	if len(All(map[string]bool{})) != 3 || len(All(full)) != 5 {
		t.Errorf("prompts offered: %d without query, %d with every tool", len(All(map[string]bool{})), len(All(full)))
	}
}

func TestPromptArgumentsAreChecked(t *testing.T) {
	full := map[string]bool{"query": true, "get_stacks": true, "analyze_flight_recorder": true, "snapshot_flight_recorder": true}
	for _, c := range []struct {
		prompt string
		args   map[string]string
		errHas string
		want   string
	}{
		{"find_straggler", map[string]string{"window": "soon"}, "window", ""},
		{"find_straggler", map[string]string{"windw": "1h"}, `no argument "windw"; its arguments: window, ranks`, ""},
		{"post_mortem", map[string]string{"dump": "/d"}, `no argument "dump"; its arguments: dumps`, ""},
		{"find_straggler", map[string]string{"ranks": "3-1"}, "ranks", ""},
		{"find_straggler", map[string]string{"window": "1h", "ranks": "0,1,2,5"}, "", "ranks 0-2,5 only"},
		{"find_straggler", map[string]string{"window": "1h"}, "", "- 3600) * 1000000"},
		{"explain_slow_step", map[string]string{"step": "-4"}, "step", ""},
		{"explain_slow_step", map[string]string{"step": "120", "rank": "3"}, "", "BETWEEN 117 AND 123"},
		{"investigate_watchdog_timeout", map[string]string{"dumps": "/d"}, "", `paths=["/d"]`},
		{"post_mortem", nil, "", "FROM probing.rings"},
	} {
		text, err := render(t, full, c.prompt, c.args)
		if c.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), c.errHas) {
				t.Errorf("%s %v: want an error naming %s, got %v", c.prompt, c.args, c.errHas, err)
			}
			// The server answers these -32602 through Check.
			if _, ok := errors.AsType[*ArgError](Check(c.prompt, c.args)); !ok {
				t.Errorf("%s %v: Check = %v, want an *ArgError", c.prompt, c.args, Check(c.prompt, c.args))
			}
			continue
		}
		if err != nil || !strings.Contains(text, c.want) {
			t.Errorf("%s %v: %v\n%s", c.prompt, c.args, err, text)
		}
		if err := Check(c.prompt, c.args); err != nil {
			t.Errorf("%s %v: Check = %v for good arguments", c.prompt, c.args, err)
		}
	}
}
