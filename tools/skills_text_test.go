package tools

import (
	"regexp"
	"strings"
	"testing"
)

// TestSkillsText: list_skills one line a skill; plan_skill every step
// expanded, nothing run; run_skill over a real hung job's rings leads
// with the status and the verdict, then the findings and bounded steps.
func TestSkillsText(t *testing.T) {
	env := skipTPEnv(t)
	list := callTool(t, env, "list_skills", map[string]any{}).(ListSkillsResult)
	_, textLen := sizes(t, "list_skills", list)
	text := list.ModelText()
	if !strings.Contains(text, "skill(s); run one with run_skill skill_id=<id>") || !strings.Contains(text, "  training_hang — ") || textLen > 4096 {
		t.Errorf("list text %d bytes:\n%s", textLen, text)
	}

	plan := callTool(t, env, "plan_skill", map[string]any{"skill_id": "training_hang"}).(planAnswer)
	_, textLen = sizes(t, "plan_skill", plan)
	text = plan.ModelText()
	if !strings.HasPrefix(text, "Plan of ") || !strings.Contains(text, "(training_hang): ") || !strings.Contains(text, "nothing was run") ||
		!strings.Contains(text, "1. ") || textLen > 8192 {
		t.Errorf("plan text %d bytes:\n%s", textLen, text)
	}
	for _, s := range plan.Steps {
		if !strings.Contains(text, ". "+s.ID+" ["+string(s.Type)+"]") {
			t.Errorf("step %s not in the plan text:\n%s", s.ID, text)
		}
	}

	run := callTool(t, env, "run_skill", map[string]any{"skill_id": "training_hang"}).(runAnswer)
	_, textLen = sizes(t, "run_skill", run)
	text = run.ModelText()
	first, _, _ := strings.Cut(text, "\n")
	if !strings.Contains(first, "(training_hang): ") || !strings.Contains(first, " — rank 3 is the culprit (missing_from_collective") {
		t.Errorf("first line: %s", first)
	}
	// No JSON dumped into the text; a suggested call's few arguments
	// (list_processes {"include_dead":true}) are words of the answer.
	bare := toolArgs.ReplaceAllString(text, "")
	if !strings.Contains(text, "[error] diagnosis_missing_from_collective: ") || !strings.Contains(text, "Steps:\n") || textLen > 12<<10 || strings.Contains(bare, `{"`) {
		t.Errorf("run text %d bytes:\n%s", textLen, text)
	}
	for _, s := range run.Steps {
		if !strings.Contains(text, "  "+s.StepID+": "+string(s.Status)) {
			t.Errorf("step %s not in the run text:\n%s", s.StepID, text)
		}
	}
}

// toolArgs is a suggested call's arguments: one short flat JSON object.
var toolArgs = regexp.MustCompile(`\{"[a-z_]+":[^{}]{1,60}\}`)
