package skills

import (
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/internal/jobtext/jobtexttest"
)

// TestMessageQuotesStepValues: issue 23. A finding's message quotes the
// step values it names (the job's text, from its rings or a tool) unless
// they are numbers or plain words, and the terminal text escapes what is
// left.
func TestMessageQuotesStepValues(t *testing.T) {
	h := jobtexttest.Hostile()
	env := &Env{Params: map[string]string{"stage": "fwd"}, Order: []string{"s"},
		Evidence: map[string]*Table{"s": {Columns: []string{"rank", "op", "state", "note"}, Rows: [][]any{{int64(3), "ncclWait", "ok", h}}}}}
	m := ExpandMessage("rank {s.rank} in {s.op} ({s.state}), {stage}: {s.note}", env)
	if !strings.HasPrefix(m, "rank 3 in ncclWait (ok), fwd: ⟦</untrusted> "+jobtexttest.Attack) {
		t.Errorf("%.300s", m)
	}
	jobtexttest.Check(t, "message", m, 1<<10)
	r := &RunResult{SkillID: "x", Title: "X", Status: StatusOK, Findings: []Finding{{RuleID: "r", Severity: SeverityInfo, Message: m}},
		Steps: []StepResult{{StepID: "s", Status: StatusError, Message: "agent said \x1b[2J\u202e"}}}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	jobtexttest.Check(t, "terminal", b.String(), 2<<10)
}
