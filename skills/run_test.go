package skills

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// fakeBackend answers from functions; nil ones fail the test if called.
type fakeBackend struct {
	t       *testing.T
	query   func(ctx context.Context, sql string, limit int) (*Table, error)
	tool    func(name string, args map[string]string) (json.RawMessage, error)
	get     func(path string) (string, error)
	peers   int
	peerErr error

	mu        sync.Mutex
	calls     []string
	peerCalls int
}

func (f *fakeBackend) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fakeBackend) Query(ctx context.Context, sql string, limit int) (*Table, error) {
	f.record(fmt.Sprintf("query(fanout=%v,limit=%d): %s", Fanout(ctx), limit, sql))
	if f.query == nil {
		f.t.Errorf("unexpected query %q", sql)
		return nil, errors.New("no query")
	}
	return f.query(ctx, sql, limit)
}

func (f *fakeBackend) CallTool(_ context.Context, name string, args map[string]string) (json.RawMessage, error) {
	f.record("tool: " + name)
	if f.tool == nil {
		f.t.Errorf("unexpected tool %q", name)
		return nil, errors.New("no tool")
	}
	return f.tool(name, args)
}

func (f *fakeBackend) Get(_ context.Context, path string) (string, error) {
	f.record("get: " + path)
	if f.get == nil {
		f.t.Errorf("unexpected get %q", path)
		return "", errors.New("no get")
	}
	return f.get(path)
}

func (f *fakeBackend) PeerCount(context.Context) (int, error) {
	f.mu.Lock()
	f.peerCalls++
	f.mu.Unlock()
	return f.peers, f.peerErr
}

func (f *fakeBackend) called(prefix string) bool {
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			return true
		}
	}
	return false
}

func parseSkill(t *testing.T, id, yamlText string) *Skill {
	t.Helper()
	sf, err := ParseSteps(id+"/steps.yaml", []byte(yamlText))
	if err != nil {
		t.Fatal(err)
	}
	return &Skill{ID: id, Steps: sf}
}

const runSteps = `apiVersion: probing.dev/v1
kind: Skill
metadata: {id: t, title: Test skill}
spec:
  parameters:
    - {name: limit, type: integer, default: 10}
    - {name: threshold, type: number, default: 1.5}
    - {name: stage, type: string, default: fwd}
    - {name: use_global, type: boolean, default: true}
  steps:
    - id: rank_latency
      title: Rank latency
      sql: "SELECT rank, avg_ms FROM python.comm_collective WHERE stage = '{stage}' LIMIT {limit}"
    - id: global_ranks
      title: Global ranks
      sql: "SELECT rank FROM {comm_table}"
      when: "{use_global}"
    - id: empty_warn
      title: Empty warn
      sql: "SELECT 1 AS n WHERE 0"
      on_empty: warn
    - id: empty_skip
      title: Empty skip
      sql: "SELECT 2 AS n WHERE 0"
      empty_message: nothing here
    - id: failing
      title: Failing, skip
      sql: SELECT broken
    - id: failing_warn
      title: Failing, warn
      sql: SELECT broken_too
      on_empty: warn
    - id: stacks
      title: Stacks
      type: tool
      tool: get_stacks
      args: {stage: "{stage}", limit: "{limit}"}
    - id: snapshot
      title: Snapshot
      type: api
      path: "/apis/pythonext/fr?stage={stage}"
    - id: empty_api
      title: Empty api
      type: api
      path: /apis/empty
      on_empty: warn
    - id: view
      title: View
      type: ui
      view: timeline
    - id: cfg
      title: Config
      type: config
      action: enable sampling
    - id: rdma
      title: RDMA
      sql: SELECT 3
      platform: windows
  interpretation:
    rules:
      - id: straggler
        when: "step:rank_latency | column:avg_ms | max/min(ratio) > {threshold}"
        severity: warning
        message: "rank {worst_rank} is slowest; first row {rank_latency.avg_ms} ms"
      - id: no_rows
        when: "step:empty_warn | rows == 0"
        severity: error
        message: no rows
      - id: blocked
        when: "step:stacks | column:state | any_contains('D')"
        severity: warning
        message: "rank {stacks.rank} blocked in {stacks.func}"
      - id: skipped_step
        when: "step:empty_skip | rows >= 0"
        message: never
      - id: api_is_not_evidence
        when: "step:snapshot | rows >= 0"
        message: never
      - id: always
        when: always
        message: "stage {stage}"
  summary_template: "{rank_latency.row_count} ranks, {empty_skip.row_count} empty, stage {stage}, first rank {rank_latency.rank}"
  next_steps: [slow_rank, comm_bottleneck]
`

func mainBackend(t *testing.T) *fakeBackend {
	return &fakeBackend{
		t:     t,
		peers: 2,
		query: func(_ context.Context, sql string, _ int) (*Table, error) {
			switch {
			case strings.Contains(sql, "global.python.comm_collective"):
				return &Table{Columns: []string{"rank"}, Rows: [][]any{{int64(0)}, {int64(1)}}},
					&PartialError{NodesQueried: 3, NodesFailed: []string{"node2"}, PeerBatchesDropped: 1}
			case strings.Contains(sql, "python.comm_collective"):
				return &Table{Columns: []string{"rank", "avg_ms"}, Rows: [][]any{{int64(0), 10.0}, {int64(3), 40.0}, {int64(1), 12.5}}}, nil
			case strings.Contains(sql, "WHERE 0"):
				return &Table{Columns: []string{"n"}}, nil
			}
			return nil, fmt.Errorf("no such column: %s", strings.TrimPrefix(sql, "SELECT "))
		},
		tool: func(name string, args map[string]string) (json.RawMessage, error) {
			if args["stage"] != "fwd" || args["limit"] != "10" {
				return nil, fmt.Errorf("args %v", args)
			}
			return json.RawMessage(`{"count": 2, "stacks": [{"rank": 3, "state": "D", "func": "ncclWait"}, {"rank": 1, "state": "S", "func": "sleep"}]}`), nil
		},
		get: func(path string) (string, error) {
			if path == "/apis/empty" {
				return "  \n", nil
			}
			return `{"ok": false, "error": "no recorder"}`, nil
		},
	}
}

func TestRunStatuses(t *testing.T) {
	s := parseSkill(t, "t", runSteps)
	b := mainBackend(t)
	res, err := Run(context.Background(), s, nil, b, RunOptions{GOOS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id     string
		status StepStatus
		detail string
	}{
		{"rank_latency", StatusOK, ""},
		{"global_ranks", StatusDegraded, ""},
		{"empty_warn", StatusOK, ""},
		{"empty_skip", StatusSkipped, "nothing here"},
		{"failing", StatusSkipped, "no such column: broken"},
		{"failing_warn", StatusError, "no such column: broken_too"},
		{"stacks", StatusOK, ""},
		{"snapshot", StatusOK, ""},
		{"empty_api", StatusOK, ""},
		{"view", StatusSkipped, "ui step (view=timeline) — run probing Web UI for navigation"},
		{"cfg", StatusSkipped, "config steps are not applied automatically in CLI skill"},
		{"rdma", StatusSkipped, "step requires platform windows, current platform is linux"},
	}
	if len(res.Steps) != len(want) {
		t.Fatalf("%d steps, want %d: %+v", len(res.Steps), len(want), res.Steps)
	}
	for i, w := range want {
		sr := res.Steps[i]
		if sr.StepID != w.id || sr.Status != w.status || sr.Reason+sr.Message != w.detail {
			t.Errorf("step %d: got %s %s reason=%q message=%q, want %s %s %q", i, sr.StepID, sr.Status, sr.Reason, sr.Message, w.id, w.status, w.detail)
		}
	}
	st := res.Steps
	if *st[0].RowCount != 3 || len(st[0].Rows) != 3 || st[0].Note != "" || st[0].ClusterMeta != nil {
		t.Errorf("local sql step: %+v", st[0])
	}
	if v, _ := st[0].Rows[1].Get("avg_ms"); v != 40.0 {
		t.Errorf("row cell: %v", v)
	}
	if st[1].Note != "cluster fan-out · 3 nodes queried · 1 failed · 1 peer batches dropped" || !st[1].ClusterMeta.Partial || st[1].ClusterMeta.NodesFailed[0] != "node2" {
		t.Errorf("degraded step: %+v", st[1])
	}
	if *st[2].RowCount != 0 || len(st[2].Columns) != 1 {
		t.Errorf("warn step: %+v", st[2])
	}
	if st[6].Text != `{"count":2,"stacks":[{"rank":3,"state":"D","func":"ncclWait"},{"rank":1,"state":"S","func":"sleep"}]}` || *st[6].RowCount != 2 {
		t.Errorf("tool step: %+v", st[6])
	}
	if st[7].Text != `{"ok": false, "error": "no recorder"}` || st[8].Text != "(empty response — step may be unavailable)" {
		t.Errorf("api steps: %q %q", st[7].Text, st[8].Text)
	}
	if !b.called("get: /apis/pythonext/fr?stage=fwd") || !b.called("query(fanout=true,limit=201): SELECT rank FROM global.python.comm_collective") ||
		!b.called("query(fanout=false,limit=201): SELECT rank, avg_ms FROM python.comm_collective WHERE stage = 'fwd' LIMIT 10") {
		t.Errorf("calls: %q", b.calls)
	}
	if b.called("query(fanout=false,limit=201): SELECT 3") {
		t.Error("the windows-only step ran")
	}

	wantFindings := []Finding{
		{"straggler", SeverityWarning, "rank 3 is slowest; first row 10 ms"},
		{"no_rows", SeverityError, "no rows"},
		{"blocked", SeverityWarning, "rank 3 blocked in ncclWait"},
		{"always", SeverityInfo, "stage fwd"},
		{"global_ranks_partial_fanout", SeverityError, "Cluster fan-out incomplete for step 'global_ranks': 3 nodes queried, 1 failed, 1 peer batches dropped — do not treat results as complete"},
	}
	if fmt.Sprint(res.Findings) != fmt.Sprint(wantFindings) {
		t.Errorf("findings:\n got %v\nwant %v", res.Findings, wantFindings)
	}
	if res.Summary != "3 ranks, 0 empty, stage fwd, first rank 0" {
		t.Errorf("summary %q", res.Summary)
	}
	if res.Status != StatusError || !res.DataQuality.PartialClusterFanout || res.Truncated {
		t.Errorf("status %s dq %+v", res.Status, res.DataQuality)
	}
	if fmt.Sprint(res.NextSteps) != "[slow_rank comm_bottleneck]" || len(res.Parameters) != 0 || res.Title != "Test skill" {
		t.Errorf("next %v params %v title %q", res.NextSteps, res.Parameters, res.Title)
	}
	if res.Evidence["snapshot"] != nil || res.Evidence["empty_skip"] != nil || res.Evidence["stacks"] == nil {
		t.Errorf("evidence: %v", res.Evidence)
	}

	// The JSON uses the contract's names.
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"skill_id", "title", "parameters", "steps", "findings", "summary", "next_steps", "status", "data_quality"} {
		if _, ok := m[k]; !ok {
			t.Errorf("run JSON lacks %q", k)
		}
	}
	if !strings.Contains(string(data), `"rows":[{"rank":0,"avg_ms":10},{"rank":3,"avg_ms":40}`) ||
		!strings.Contains(string(data), `"cluster_meta":{"partial":true,"nodes_queried":3,"nodes_failed":["node2"],"peer_batches_dropped":1}`) ||
		!strings.Contains(string(data), `"data_quality":{"partial_cluster_fanout":true}`) ||
		!strings.Contains(string(data), `"rule_id":"no_rows","severity":"error"`) {
		t.Errorf("JSON: %s", data)
	}
	step0 := m["steps"].([]any)[0].(map[string]any)
	if _, ok := step0["duration_ms"]; !ok {
		t.Errorf("step JSON lacks duration_ms: %v", step0)
	}
	step9 := m["steps"].([]any)[9].(map[string]any)
	if _, ok := step9["duration_ms"]; !ok || step9["reason"] == nil || step9["row_count"] != nil {
		t.Errorf("skipped step JSON: %v", step9)
	}
}

func TestRunUIOption(t *testing.T) {
	s := parseSkill(t, "t", runSteps)
	res, err := Run(context.Background(), s, map[string]string{"use_global": "false"}, mainBackend(t), RunOptions{GOOS: "linux", UI: true})
	if err != nil {
		t.Fatal(err)
	}
	if v := res.Steps[9]; v.Status != StatusUI || v.View != "timeline" || v.Reason != "" {
		t.Errorf("ui step: %+v", v)
	}
	// use_global=false: no fan-out step, so no degraded status and no partial finding.
	if g := res.Steps[1]; g.Status != StatusSkipped || g.Reason != "skipped (standalone / use_global=false)" {
		t.Errorf("global step: %+v", g)
	}
	if res.DataQuality.PartialClusterFanout || res.Parameters["use_global"] != "false" {
		t.Errorf("dq %+v params %v", res.DataQuality, res.Parameters)
	}
}

const abortSteps = `apiVersion: probing.dev/v1
kind: Skill
metadata: {id: ab, title: Abort}
spec:
  steps:
    - {id: a, title: A, sql: SELECT 1 AS x}
    - {id: b, title: B, sql: SELECT 2 AS x WHERE 0, on_empty: abort, empty_message: "no collectives recorded"}
    - {id: c, title: C, sql: SELECT 3 AS x}
    - {id: d, title: D, sql: SELECT 4 AS x WHERE 0, on_empty: abort}
  interpretation:
    rules:
      - {id: saw_a, when: "step:a | rows >= 1", message: "a has {a.x}"}
  summary_template: "a={a.x} c={c.row_count}"
`

func TestRunAbortStops(t *testing.T) {
	s := parseSkill(t, "ab", abortSteps)
	b := &fakeBackend{t: t, query: func(_ context.Context, sql string, _ int) (*Table, error) {
		if strings.Contains(sql, "WHERE 0") {
			return &Table{Columns: []string{"x"}}, nil
		}
		return &Table{Columns: []string{"x"}, Rows: [][]any{{int64(1)}}}, nil
	}}
	res, err := Run(context.Background(), s, nil, b, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.called("query(fanout=false,limit=201): SELECT 3") || len(b.calls) != 2 {
		t.Errorf("ran past the abort: %q", b.calls)
	}
	if res.Steps[1].Status != StatusError || res.Steps[1].Message != "no collectives recorded" {
		t.Errorf("abort step: %+v", res.Steps[1])
	}
	for _, sr := range res.Steps[2:] {
		if sr.Status != StatusSkipped || sr.Reason != "not run: step `b` (on_empty: abort) failed" {
			t.Errorf("after abort: %+v", sr)
		}
	}
	if res.Status != StatusError || len(res.Findings) != 1 || res.Findings[0].Message != "a has 1" || res.Summary != "a=1 c=0" {
		t.Errorf("status %s findings %v summary %q", res.Status, res.Findings, res.Summary)
	}
	// The default abort message.
	b.query = func(_ context.Context, sql string, _ int) (*Table, error) { return &Table{Columns: []string{"x"}}, nil }
	s.Steps.Spec.Steps[1].EmptyMessage = ""
	res, _ = Run(context.Background(), s, nil, b, RunOptions{})
	if res.Steps[0].Status != StatusSkipped || res.Steps[1].Message != "Query returned no rows" {
		t.Errorf("default: %+v", res.Steps[:2])
	}
	// A query error on an abort step is an error too, and stops the run.
	b.query = func(_ context.Context, sql string, _ int) (*Table, error) {
		if strings.Contains(sql, "SELECT 2") {
			return nil, errors.New("engine down")
		}
		return &Table{Columns: []string{"x"}, Rows: [][]any{{1}}}, nil
	}
	res, _ = Run(context.Background(), s, nil, b, RunOptions{})
	if res.Steps[1].Status != StatusError || res.Steps[1].Message != "engine down" || res.Steps[2].Status != StatusSkipped {
		t.Errorf("query error on abort: %+v", res.Steps[1:3])
	}
}

const toolSteps = `apiVersion: probing.dev/v1
kind: Skill
metadata: {id: tl, title: Tools}
spec:
  steps:
    - {id: cfg, title: Set config, type: tool, tool: set_config, args: {key: x, value: "1"}}
    - {id: nodes, title: Nodes, type: tool, tool: list_cluster_nodes}
    - {id: missing, title: Missing, type: tool, tool: no_such_tool}
    - {id: recurse, title: Recurse, type: tool, tool: run_skill, args: {skill_id: tl}}
    - {id: q, title: Q, type: tool, tool: query, args: {sql: "SELECT 1"}, on_empty: warn}
  interpretation:
    rules:
      - id: dead
        when: "step:nodes | column:status | any_contains('dead')"
        severity: error
        message: "node {nodes.host} is {nodes.status}"
      - id: lag
        when: "step:q | column:lag | max > 5"
        severity: warning
        message: "lag {q.lag}"
      - id: few_nodes
        when: "step:nodes | rows < 3"
        message: "{nodes.row_count} nodes"
`

func toolBackend(t *testing.T) *fakeBackend {
	return &fakeBackend{t: t, tool: func(name string, args map[string]string) (json.RawMessage, error) {
		switch name {
		case "set_config":
			return json.RawMessage(`{"status":"ok"}`), nil
		case "list_cluster_nodes":
			return json.RawMessage(`{"version":1,"total":2,"nodes":[{"host":"a","status":"alive"},{"host":"b","status":"DEAD","rank":7}]}`), nil
		case "query":
			return json.RawMessage(`{"columns":["rank","lag"],"rows":[{"rank":0,"lag":1},{"rank":5,"lag":9.5}],"row_count":2,"truncated":false}`), nil
		}
		return nil, Refuse(fmt.Errorf("unknown tool `%s`", name))
	}}
}

func TestRunToolSteps(t *testing.T) {
	s := parseSkill(t, "tl", toolSteps)
	b := toolBackend(t)
	res, err := Run(context.Background(), s, nil, b, RunOptions{WriteTools: map[string]bool{"set_config": true, "eval_python": true}})
	if err != nil {
		t.Fatal(err)
	}
	st := res.Steps
	if st[0].Status != StatusError || !strings.Contains(st[0].Message, "tool `set_config` is a write tool") || b.called("tool: set_config") {
		t.Errorf("write tool: %+v calls %q", st[0], b.calls)
	}
	// Refusals are errors even under on_empty: skip.
	if st[2].Status != StatusError || st[2].Message != "unknown tool `no_such_tool`" {
		t.Errorf("missing tool: %+v", st[2])
	}
	if st[3].Status != StatusError || !strings.Contains(st[3].Message, "run_skill") || b.called("tool: run_skill") {
		t.Errorf("recursion: %+v", st[3])
	}
	if st[1].Status != StatusOK || *st[1].RowCount != 2 || st[4].Status != StatusOK || *st[4].RowCount != 2 {
		t.Errorf("tool tables: %+v %+v", st[1], st[4])
	}
	want := []Finding{
		{"dead", SeverityError, "node a is alive"}, // first row, as Probing's {step.col}
		{"lag", SeverityWarning, "lag 1"},
		{"few_nodes", SeverityInfo, "2 nodes"},
	}
	if fmt.Sprint(res.Findings) != fmt.Sprint(want) {
		t.Errorf("findings %v", res.Findings)
	}
	if cols := res.Evidence["nodes"].Columns; fmt.Sprint(cols) != "[host status rank]" {
		t.Errorf("columns %v", cols)
	}

	res, err = Run(context.Background(), s, nil, b, RunOptions{WriteTools: map[string]bool{"set_config": true}, AllowWrite: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps[0].Status != StatusOK || !b.called("tool: set_config") {
		t.Errorf("allowed write: %+v", res.Steps[0])
	}
}

func TestRunToolEmpty(t *testing.T) {
	s := parseSkill(t, "te", `apiVersion: probing.dev/v1
kind: Skill
metadata: {id: te, title: T}
spec:
  steps:
    - {id: a, title: A, type: tool, tool: query}
    - {id: b, title: B, type: tool, tool: query, on_empty: warn}
    - {id: c, title: C, type: tool, tool: query, on_empty: abort}
  interpretation:
    rules:
      - {id: none, when: "step:b | rows == 0", message: "b is empty"}
`)
	b := &fakeBackend{t: t, tool: func(string, map[string]string) (json.RawMessage, error) {
		return json.RawMessage(`{"columns":["x"],"rows":[],"row_count":0}`), nil
	}}
	res, err := Run(context.Background(), s, nil, b, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps[0].Status != StatusSkipped || res.Steps[0].Reason != "No data" || res.Steps[1].Status != StatusOK ||
		res.Steps[2].Status != StatusError || res.Steps[2].Message != "Tool returned no data" {
		t.Errorf("steps %+v", res.Steps)
	}
	if len(res.Findings) != 1 || res.Findings[0].RuleID != "none" {
		t.Errorf("findings %v", res.Findings)
	}
	// A failing tool under skip is skipped, under warn an error.
	b.tool = func(string, map[string]string) (json.RawMessage, error) { return nil, errors.New("timeout") }
	res, _ = Run(context.Background(), s, nil, b, RunOptions{})
	if res.Steps[0].Status != StatusSkipped || res.Steps[0].Reason != "timeout" || res.Steps[1].Status != StatusError {
		t.Errorf("failing tool %+v", res.Steps)
	}
}

func TestRunRefusedSQLIsError(t *testing.T) {
	s := parseSkill(t, "r", `apiVersion: probing.dev/v1
kind: Skill
metadata: {id: r, title: R}
spec:
  steps:
    - {id: a, title: A, sql: SELECT 1}
`)
	b := &fakeBackend{t: t, query: func(context.Context, string, int) (*Table, error) {
		return nil, Refuse(errors.New("Only read-only SQL is allowed (SELECT/WITH/SHOW/DESCRIBE/EXPLAIN)"))
	}}
	res, err := Run(context.Background(), s, nil, b, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps[0].Status != StatusError || !strings.HasPrefix(res.Steps[0].Message, "Only read-only SQL") {
		t.Errorf("%+v", res.Steps[0])
	}
}

func TestRunOverrides(t *testing.T) {
	s := parseSkill(t, "t", runSteps)
	b := mainBackend(t)
	res, err := Run(context.Background(), s, map[string]string{"limit": "0042", "stage": "x'; DROP TABLE t; --", "use_global": "FALSE", "threshold": "2"}, b, RunOptions{GOOS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"limit": "42", "stage": "x'; DROP TABLE t; --", "use_global": "false", "threshold": "2"}
	if fmt.Sprint(res.Parameters) != fmt.Sprint(want) {
		t.Errorf("parameters %v", res.Parameters)
	}
	if !b.called("query(fanout=false,limit=201): SELECT rank, avg_ms FROM python.comm_collective WHERE stage = 'x''; DROP TABLE t; --' LIMIT 42") {
		t.Errorf("calls %q", b.calls)
	}
	if b.peerCalls != 0 {
		t.Error("use_global given, yet peers were discovered")
	}
	for _, c := range []struct {
		over map[string]string
		want string
	}{
		{map[string]string{"limit": "1; SELECT 1"}, "parameter `limit` of skill `t`: must be an integer"},
		{map[string]string{"threshold": "Inf"}, "must be a finite number"},
		{map[string]string{"nope": "1"}, "unknown parameter `nope` for skill `t`"},
	} {
		b := mainBackend(t)
		if _, err := Run(context.Background(), s, c.over, b, RunOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v", c.over, err)
		}
		if len(b.calls) != 0 {
			t.Errorf("%v: backend called: %q", c.over, b.calls)
		}
	}
}

func TestRunUseGlobal(t *testing.T) {
	s := parseSkill(t, "t", runSteps)
	b := mainBackend(t)
	b.peers = 0
	res, err := Run(context.Background(), s, nil, b, RunOptions{GOOS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Steps[1].Status != StatusSkipped || res.Steps[1].Reason != "skipped (standalone / use_global=false)" || b.peerCalls != 1 {
		t.Errorf("no peers: %+v", res.Steps[1])
	}
	if len(res.Parameters) != 0 {
		t.Errorf("resolved use_global leaked into parameters: %v", res.Parameters)
	}
	b = mainBackend(t)
	b.peerErr = errors.New("connection refused")
	_, err = Run(context.Background(), s, nil, b, RunOptions{GOOS: "linux"})
	if err == nil || err.Error() != "failed to discover cluster peers before running `t`: connection refused" || len(b.calls) != 0 {
		t.Errorf("discovery error: %v, calls %q", err, b.calls)
	}
	// An explicit override needs no discovery.
	if _, err := Run(context.Background(), s, map[string]string{"use_global": "true"}, b, RunOptions{GOOS: "linux"}); err != nil {
		t.Errorf("override: %v", err)
	}
	// cluster: true fans out without a global. table.
	c := parseSkill(t, "c", `apiVersion: probing.dev/v1
kind: Skill
metadata: {id: c, title: C}
spec:
  steps:
    - {id: a, title: A, sql: SELECT 1 AS x, cluster: true}
`)
	b = &fakeBackend{t: t, query: func(context.Context, string, int) (*Table, error) {
		return &Table{Columns: []string{"x"}, Rows: [][]any{{1}}}, &PartialError{NodesQueried: 4}
	}}
	res, _ = Run(context.Background(), c, nil, b, RunOptions{})
	if !b.called("query(fanout=true,") || res.Steps[0].Status != StatusOK || res.Steps[0].ClusterMeta.Partial ||
		res.Steps[0].Note != "cluster fan-out · 4 nodes queried · 0 failed · 0 peer batches dropped" || len(res.Findings) != 0 || res.Status != StatusOK {
		t.Errorf("complete fan-out: %+v %v", res.Steps[0], res.Findings)
	}
	if data, _ := json.Marshal(res.Steps[0].ClusterMeta); string(data) != `{"partial":false,"nodes_queried":4,"nodes_failed":[],"peer_batches_dropped":0}` {
		t.Errorf("meta JSON %s", data)
	}
}
