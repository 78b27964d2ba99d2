package tools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	mcplib "github.com/mark3labs/mcp-go/mcp"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

func callDiagnose(t *testing.T, env *Env, args map[string]any) *mcplib.CallToolResult {
	t.Helper()
	var req mcplib.CallToolRequest
	req.Params.Name, req.Params.Arguments = "diagnose_hang", args
	res, err := diagnoseHang(env).Handler(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestDiagnoseHangPostMortem runs the tool over what a real hung 8-rank
// gloo job left on disk (testdata/jobs/real/skip_tp: rank 3 skipped its
// pair's all_reduce): the verdict names rank 3, the text is a rendering
// (not the JSON), and detail "ranks" pages every rank.
func TestDiagnoseHangPostMortem(t *testing.T) {
	dir := "../testdata/jobs/real/skip_tp"
	e, err := sqlengine.New(sqlengine.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{SQL: e, Agents: agent.Options{DataDir: dir, CtrlRoot: t.TempDir()}}
	res := callDiagnose(t, env, nil)
	text := ResultText(res)
	if res.IsError || !strings.HasPrefix(text, "rank 3 is the culprit (missing_from_collective, high confidence)") ||
		strings.HasPrefix(text, "{") || !strings.Contains(text, "post-mortem") {
		t.Fatalf("%s", text)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var got DiagnoseHangResult
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.State != "dead" || got.Hypotheses[0].Culprits != "3" || got.Hypotheses[0].Collateral != "0-2,4-7" || got.RankRows != nil {
		t.Errorf("%s", b)
	}

	res = callDiagnose(t, env, map[string]any{"detail": "ranks", "offset": 2, "limit": 3})
	b, _ = json.Marshal(res.StructuredContent)
	got = DiagnoseHangResult{}
	_ = json.Unmarshal(b, &got)
	if len(got.RankRows) != 3 || got.RankRows[0].Rank != 2 || got.RankTotal != 8 || got.NextOffset == nil || *got.NextOffset != 5 ||
		!strings.Contains(got.RankRows[0].Doing, "group 2-3") {
		t.Errorf("page: %s", b)
	}
	if text := ResultText(res); !strings.Contains(text, "More ranks: call again with offset 5.") {
		t.Errorf("page text: %s", text)
	}
}

// TestDiagnoseHangBadInputAndNoJob: a bad argument is an error that says
// the fix; a node without any job is "unknown", never "healthy".
func TestDiagnoseHangBadInputAndNoJob(t *testing.T) {
	env := &Env{Agents: agent.Options{DataDir: t.TempDir(), CtrlRoot: t.TempDir()}}
	for args, want := range map[string]string{
		`{"detail":"all"}`:        `detail: "all" is not one of summary, ranks`,
		`{"stall_seconds":-1}`:    "stall_seconds: -1 is out of range: want 0..86400",
		`{"limit":5000}`:          "limit: 5000 is out of range: want 0..1000",
		`{"limt":5}`:              "unknown argument \"limt\"",
		`{"maxGroups":5}`:         "unknown argument \"maxGroups\"",
		`{"stall_seconds":"ten"}`: "invalid arguments",
	} {
		var m map[string]any
		_ = json.Unmarshal([]byte(args), &m)
		res := callDiagnose(t, env, m)
		if !res.IsError || !strings.Contains(ResultText(res), want) {
			t.Errorf("%s: %s", args, ResultText(res))
		}
	}
	res := callDiagnose(t, env, nil)
	text := ResultText(res)
	if res.IsError || !strings.HasPrefix(text, "No training job found on this node") || !strings.Contains(text, env.Agents.DataDir) {
		t.Errorf("%s", text)
	}
}

// TestTrainingHangSkillGivesTheDiagnosis runs the bundled training_hang
// skill for real (this server's tools, called in process) over the real
// skip_tp job: its findings and summary are the diagnosis's, naming rank
// 3, not the rank that is "most behind" (rank 2, the victim waiting in
// its pair's collective).
func TestTrainingHangSkillGivesTheDiagnosis(t *testing.T) {
	dir := "../testdata/jobs/real/skip_tp"
	e, err := sqlengine.New(sqlengine.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{SQL: e, Agents: agent.Options{DataDir: dir, CtrlRoot: t.TempDir()}, Skills: DefaultSkills}
	res, err := RunSkill(context.Background(), env, "training_hang", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) == 0 || res.Findings[0].RuleID != "diagnosis_missing_from_collective" ||
		!strings.Contains(res.Findings[0].Message, "culprit 3;") || res.Findings[0].Severity != "error" {
		t.Fatalf("findings %+v", res.Findings)
	}
	if !strings.HasPrefix(res.Summary, "rank 3 is the culprit (missing_from_collective") {
		t.Errorf("summary %q", res.Summary)
	}
	for _, f := range res.Findings {
		if strings.Contains(f.Message, "culprit 2") {
			t.Errorf("a finding blames the victim: %s", f.Message)
		}
	}
}

// TestDiagnoseHangDeadWhileMoving: a job killed while it was stepping
// (the straggler fixture, frozen mid-run) has no culprit, and says so
// rather than naming an empty rank set.
func TestDiagnoseHangDeadWhileMoving(t *testing.T) {
	dir := "../testdata/jobs/real/straggler"
	e, err := sqlengine.New(sqlengine.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	text := ResultText(callDiagnose(t, &Env{SQL: e, Agents: agent.Options{DataDir: dir, CtrlRoot: t.TempDir()}}, nil))
	if !strings.HasPrefix(text, "No culprit found (unreachable_rank, low confidence): when the processes ended, no rank was recorded waiting") ||
		strings.Contains(text, "rank  is") {
		t.Errorf("%s", text)
	}
}

// TestDiagnoseBoundsFromTheSchema: the CLI's door (tools.Diagnose without
// the typed adapter) refuses what the schema refuses, in its words.
func TestDiagnoseBoundsFromTheSchema(t *testing.T) {
	env := &Env{}
	for p, want := range map[DiagnoseHangParams]string{
		{StallSeconds: -5}:    "stall_seconds: -5 is out of range: want 0..86400",
		{StallSeconds: 90000}: "stall_seconds: 90000 is out of range: want 0..86400",
		{Detail: "all"}:       `detail: "all" is not one of summary, ranks`,
		{Limit: 1001}:         "limit: 1001 is out of range: want 0..1000",
	} {
		if _, err := Diagnose(context.Background(), env, p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v", p, err)
		}
	}
}
