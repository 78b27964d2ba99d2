package skills

// The bundled skills run end to end through the real runner: tool steps
// on a recording backend, SQL on the real engine over the fixture job.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// bfBackend runs SQL on the real engine and answers tool steps with canned
// JSON, recording the arguments as the MCP backend would type them (text
// that parses as JSON becomes that value).
type bfBackend struct {
	e     *sqlengine.Engine
	calls map[string]map[string]any
}

func (b *bfBackend) Query(ctx context.Context, sql string, limit int) (*Table, error) {
	res, err := b.e.Query(ctx, sql, limit)
	if err != nil {
		return nil, err
	}
	t := &Table{Columns: res.Columns}
	for _, r := range res.Rows {
		t.Rows = append(t.Rows, r.Values())
	}
	return t, nil
}

func (b *bfBackend) CallTool(ctx context.Context, name string, args map[string]string) (json.RawMessage, error) {
	typed := map[string]any{}
	for k, v := range args {
		var j any
		if json.Unmarshal([]byte(v), &j) == nil {
			typed[k] = j
		} else {
			typed[k] = v
		}
	}
	b.calls[name] = typed
	switch name {
	case "get_stacks":
		return json.RawMessage(`{"groups":[{"ranks":"0-1,3","frames":["all_reduce (torch/distributed/distributed_c10d.py:2050)"]},{"ranks":"2","frames":["_next_data (torch/utils/data/dataloader.py:1300)"]}]}`), nil
	case "diagnose_hang":
		// The shape of the real tool's answer (tools tests run the real one).
		return json.RawMessage(`{"state":"stalled","state_why":"no rank made progress for 5m0s","summary":"rank 2 is the culprit (cpu_stall, high confidence) at train.py:41 (next_batch); ranks 0-1,3 wait for it.",` +
			`"hypotheses":[{"category":"cpu_stall","culprit_ranks":"2","collateral_ranks":"0-1,3","confidence":"high","evidence":[{"source":"comm_rings","text":"rank 2 is not in any collective"}],` +
			`"where":{"file":"/job/train.py","line":41,"function":"next_batch"},"confirm":"get_stacks","refute":"it moves"}],"ranks":[]}`), nil
	case "list_processes":
		return json.RawMessage(`{"processes":[{"pid":3999101,"rank":0,"alive":true},{"pid":3999102,"rank":1,"alive":true},{"pid":3999103,"rank":2,"alive":true},{"pid":3999104,"rank":3,"alive":true}]}`), nil
	case "analyze_flight_recorder":
		paths, _ := typed["paths"].([]any)
		if len(paths) == 0 || paths[0] == "" {
			return nil, fmt.Errorf("analyze_flight_recorder: path is empty")
		}
		return json.RawMessage(`{"verdict":"MISSING_RANKS","process_groups":[{"pg_name":"0","missing_ranks":"2","collective_seq_id":101}]}`), nil
	}
	return nil, Refuse(fmt.Errorf("tool %s not available", name))
}

func (b *bfBackend) Get(ctx context.Context, path string) (string, error) {
	return "", fmt.Errorf("no api steps expected")
}

func (b *bfBackend) PeerCount(ctx context.Context) (int, error) { return 0, nil }

func bfStatuses(res *RunResult) map[string]StepStatus {
	out := map[string]StepStatus{}
	for _, s := range res.Steps {
		out[s.StepID] = s.Status
	}
	return out
}

func bfFindingIDs(res *RunResult) map[string]Severity {
	out := map[string]Severity{}
	for _, f := range res.Findings {
		out[f.RuleID] = f.Severity
	}
	return out
}

// TestBundledTrainingHangEndToEnd runs training_hang through the real
// runner: tool steps on a fake backend, SQL on the real engine over the hung
// fixture job.
func TestBundledTrainingHangEndToEnd(t *testing.T) {
	cat := bfLoadBundled(t)
	f := bfWriteFixture(t)
	e, err := sqlengine.New(sqlengine.Options{DataDir: f.dir, Host: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	b := &bfBackend{e: e, calls: map[string]map[string]any{}}
	s, _ := cat.Get("training_hang")
	res, err := Run(context.Background(), s, nil, b, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusOK {
		t.Errorf("status %s: %+v", res.Status, res.Steps)
	}
	want := map[string]StepStatus{"diagnosis": StatusOK, "stacks": StatusOK, "processes": StatusOK, "last_collective_per_rank": StatusOK,
		"unfinished_collectives": StatusOK, "last_step_per_rank": StatusOK,
		"last_trace_activity": StatusSkipped, "blocked_threads": StatusSkipped} // no such tables in the fixture
	if got := bfStatuses(res); !maps.Equal(got, want) {
		t.Errorf("step statuses %v, want %v", got, want)
	}
	if b.calls["get_stacks"]["merge"] != true || b.calls["list_processes"]["include_dead"] != true {
		t.Errorf("tool arguments %v", b.calls)
	}
	got := bfFindingIDs(res)
	if wantF := map[string]Severity{"diagnosis_cpu_stall": SeverityError}; !maps.Equal(got, wantF) {
		t.Errorf("findings %v, want %v", res.Findings, wantF)
	}
	if m := res.Findings[0].Message; !strings.HasPrefix(m, "cpu_stall (high confidence): culprit 2 at ⟦train.py⟧:41 (⟦next_batch⟧); waiting for it: 0-1,3") {
		t.Errorf("finding: %s", m)
	}
	if !strings.HasPrefix(res.Summary, "rank 2 is the culprit (cpu_stall, high confidence)") {
		t.Errorf("summary %q", res.Summary)
	}
	if b.calls["diagnose_hang"]["stall_seconds"] != float64(30) {
		t.Errorf("diagnose_hang arguments %v", b.calls["diagnose_hang"])
	}
	if len(res.NextSteps) == 0 {
		t.Error("no next steps")
	}
}

// TestBundledPostMortemEndToEnd runs post_mortem through the real runner
// over the dead job: without dumps the analysis step is skipped (the run
// stays ok); with dumps the tool gets them as a list.
func TestBundledPostMortemEndToEnd(t *testing.T) {
	cat := bfLoadBundled(t)
	f := bfWriteFixture(t)
	f.kill(t)
	e, err := sqlengine.New(sqlengine.Options{DataDir: f.dir, Host: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	b := &bfBackend{e: e, calls: map[string]map[string]any{}}
	s, _ := cat.Get("post_mortem")
	res, err := Run(context.Background(), s, nil, b, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := bfStatuses(res)
	if res.Status != StatusOK || st["analyze_dumps"] != StatusSkipped || st["dead_writers"] != StatusOK || st["stored_diagnoses"] != StatusSkipped {
		t.Errorf("status %s, steps %v", res.Status, st)
	}
	// The culprit finding is the diagnosis's (the verdict step), first;
	// the SQL rules name none.
	if got := bfFindingIDs(res); got["job_dead"] != SeverityError || got["died_behind"] != "" || got["died_in_collective"] != SeverityWarning || res.Findings[0].RuleID != "diagnosis_cpu_stall" {
		t.Errorf("findings %v", res.Findings)
	}
	if st["diagnosis"] != StatusOK || !strings.HasPrefix(res.Summary, "rank 2 is the culprit") {
		t.Errorf("the verdict step: %v, summary %q", st, res.Summary)
	}
	res, err = Run(context.Background(), s, map[string]string{"dumps": "/var/dumps"}, b, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := bfStatuses(res); st["analyze_dumps"] != StatusOK || res.Parameters["dumps"] != "/var/dumps" {
		t.Errorf("with dumps: %v %v", st, res.Parameters)
	}
	if p, _ := b.calls["analyze_flight_recorder"]["paths"].([]any); len(p) != 1 || p[0] != "/var/dumps" {
		t.Errorf("paths %v", b.calls["analyze_flight_recorder"])
	}
}
