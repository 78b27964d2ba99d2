package evidence

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
)

// TestElasticErrorStandsInForTheRecord: a dead rank whose agent recorded
// no exception gets the one torchelastic's @record wrote (its time, type
// and line); a rank whose agent recorded one keeps its own; a file
// another user could have written is a problem and unused.
func TestElasticErrorStandsInForTheRecord(t *testing.T) {
	p := filepath.Join(t.TempDir(), "error.json")
	os.WriteFile(p, []byte(`{"message": {"message": "RuntimeError: corrupt batch at step 3", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"/job/train.py\", line 88, in main\n    check_batch(x)\n  File \"/job/train.py\", line 52, in check_batch\n    raise RuntimeError(m)\nRuntimeError: corrupt batch at step 3\n", "timestamp": "1796558514"}}}`), 0o644)
	a := &agent.Agent{PID: 4242, UID: os.Geteuid(), Identity: &procfacts.Identity{Rank: 2, TorchelasticErrorFile: p}}
	var problems []string
	problem := func(f string, args ...any) { problems = append(problems, f) }

	e := &RankEvidence{Rank: 2, Record: &procfacts.Ending{Signals: []string{"SIGTERM"}}}
	withElasticError(e, a, problem)
	x := e.Record.Exception
	if !e.Raised || x == nil || x.Type != "RuntimeError" || x.Frames[0].Line != 52 || e.EndedNS != 1796558514e9 || len(problems) > 0 {
		t.Fatalf("%+v %+v %v", e, x, problems)
	}
	if !strings.Contains(e.Ending, "⟦RuntimeError: corrupt batch at step 3⟧ at ⟦train.py⟧:52 (⟦check_batch⟧)") || !strings.Contains(e.Ending, "torchelastic") {
		t.Errorf("ending %q", e.Ending)
	}

	e = &RankEvidence{Rank: 2}
	withElasticError(e, a, problem)
	if !strings.HasPrefix(e.Ending, "raised ⟦RuntimeError: corrupt batch at step 3⟧ at ⟦train.py⟧:52") {
		t.Errorf("no other record: %q", e.Ending)
	}

	own := &procfacts.ExitRecord{Type: "ValueError", TimeNS: 5}
	e = &RankEvidence{Rank: 2, Record: &procfacts.Ending{Exception: own}, Raised: true}
	withElasticError(e, a, problem)
	if e.Record.Exception != own {
		t.Error("the agent's own record was replaced")
	}

	os.Chmod(p, 0o666)
	e = &RankEvidence{Rank: 2}
	withElasticError(e, a, problem)
	if e.Raised || e.Record != nil || len(problems) != 1 {
		t.Errorf("a world-writable error file was used: %+v %v", e, problems)
	}
	a.Identity.TorchelasticErrorFile = "error.json"
	withElasticError(&RankEvidence{Rank: 2}, a, problem)
	if len(problems) != 2 {
		t.Errorf("a relative path: %v", problems)
	}
}
