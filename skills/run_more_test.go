package skills

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestRunDegradedStatus(t *testing.T) {
	s := parseSkill(t, "d", `apiVersion: probing.dev/v1
kind: Skill
metadata: {id: d, title: D}
spec:
  steps:
    - {id: a, title: A, sql: SELECT 1 AS x FROM global.python.comm_collective}
`)
	b := &fakeBackend{t: t, query: func(context.Context, string, int) (*Table, error) {
		return &Table{Columns: []string{"x"}, Rows: [][]any{{1}}}, &PartialError{NodesQueried: 2, NodesFailed: []string{"n1"}}
	}}
	res, _ := Run(context.Background(), s, nil, b, RunOptions{})
	if res.Status != StatusDegraded || res.Steps[0].Status != StatusDegraded || len(res.Findings) != 1 || res.Findings[0].RuleID != "a_partial_fanout" {
		t.Errorf("%+v", res)
	}
	// A PartialError without a table is a query error.
	b.query = func(context.Context, string, int) (*Table, error) {
		return nil, &PartialError{NodesQueried: 2, NodesFailed: []string{"n1", "n2"}}
	}
	res, _ = Run(context.Background(), s, nil, b, RunOptions{})
	if res.Steps[0].Status != StatusSkipped || !strings.Contains(res.Steps[0].Reason, "partial cluster fan-out") {
		t.Errorf("%+v", res.Steps[0])
	}
}

func TestRunBounds(t *testing.T) {
	s := parseSkill(t, "big", `apiVersion: probing.dev/v1
kind: Skill
metadata: {id: big, title: Big}
spec:
  steps:
    - {id: rows, title: Rows, sql: "SELECT i, s FROM t"}
    - {id: tool, title: Tool, type: tool, tool: dump}
    - {id: api, title: Api, type: api, path: /apis/dump}
  interpretation:
    rules:
      - {id: many, when: "step:rows | rows >= 200", message: "{rows.row_count} rows"}
`)
	wide := strings.Repeat("é", 6000) // 12000 bytes
	b := &fakeBackend{t: t,
		query: func(_ context.Context, _ string, limit int) (*Table, error) {
			tb := &Table{Columns: []string{"i", "s"}}
			for i := range 500 { // a backend that ignores the limit
				tb.Rows = append(tb.Rows, []any{i, wide[:100]})
			}
			tb.Rows[0][1] = wide
			return tb, nil
		},
		tool: func(string, map[string]string) (json.RawMessage, error) {
			return json.RawMessage(`{"blob":"` + strings.Repeat("x", 100<<10) + `"}`), nil
		},
		get: func(string) (string, error) { return strings.Repeat("y", 50<<10), nil },
	}
	res, err := Run(context.Background(), s, nil, b, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !b.called("query(fanout=false,limit=201)") {
		t.Errorf("calls %q", b.calls)
	}
	r := res.Steps[0]
	if *r.RowCount != 200 || len(r.Rows) != 200 || !r.Truncated || len(res.Evidence["rows"].Rows) != 200 {
		t.Errorf("rows: count %d kept %d truncated %v", *r.RowCount, len(r.Rows), r.Truncated)
	}
	cell, _ := r.Rows[0].Get("s")
	if cs := cell.(string); len(cs) > DefaultMaxCellBytes || !strings.Contains(cs, "[truncated: ") || !strings.HasPrefix(cs, "éé") {
		t.Errorf("cell %d bytes", len(cs))
	}
	for _, st := range res.Steps[1:] {
		if len(st.Text) > DefaultMaxTextBytes || !st.Truncated || !strings.Contains(st.Text, "bytes kept]") {
			t.Errorf("%s: %d bytes, truncated %v", st.StepID, len(st.Text), st.Truncated)
		}
	}
	if res.Findings[0].Message != "200 rows" || res.Truncated {
		t.Errorf("findings %v truncated %v", res.Findings, res.Truncated)
	}
	// The whole result fits MaxResultBytes; the rules still saw every row.
	res, err = Run(context.Background(), s, nil, b, RunOptions{MaxResultBytes: 20000, MaxTextBytes: 8000})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(res)
	if len(data) > 20000 || !res.Truncated || !strings.Contains(string(data), `"truncated":true`) {
		t.Errorf("result %d bytes, truncated %v", len(data), res.Truncated)
	}
	if len(res.Steps[0].Rows) >= 200 || *res.Steps[0].RowCount != 200 || res.Findings[0].Message != "200 rows" {
		t.Errorf("shrunk rows %d", len(res.Steps[0].Rows))
	}
	// A small MaxRows.
	res, _ = Run(context.Background(), s, nil, b, RunOptions{MaxRows: 5})
	if *res.Steps[0].RowCount != 5 || len(res.Findings) != 0 || !b.called("query(fanout=false,limit=6)") {
		t.Errorf("MaxRows 5: %d rows, findings %v", *res.Steps[0].RowCount, res.Findings)
	}
}

func TestRunCancel(t *testing.T) {
	s := parseSkill(t, "ab", abortSteps)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &fakeBackend{t: t, query: func(context.Context, string, int) (*Table, error) {
		cancel()
		return &Table{Columns: []string{"x"}, Rows: [][]any{{1}}}, nil
	}}
	res, err := Run(ctx, s, nil, b, RunOptions{})
	if res != nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped before step `b`") {
		t.Errorf("res %v err %v", res, err)
	}
	if len(b.calls) != 1 {
		t.Errorf("calls %q", b.calls)
	}
	if _, err := Run(ctx, s, nil, b, RunOptions{}); !errors.Is(err, context.Canceled) || len(b.calls) != 1 {
		t.Errorf("cancelled before start: %v", err)
	}
}

func TestRunEmptyAndSpecialPlaceholders(t *testing.T) {
	s := parseSkill(t, "sp", `apiVersion: probing.dev/v1
kind: Skill
metadata: {id: sp, title: SP}
spec:
  steps:
    - {id: module_totals, title: M, sql: SELECT 1}
    - {id: latest_torch_step, title: L, sql: SELECT 2}
    - {id: api_skip, title: A, type: api, path: /apis/x}
    - {id: api_abort, title: B, type: api, path: /apis/x, on_empty: abort}
  interpretation:
    rules:
      - {id: top, when: "step:module_totals | column:pct_time | top > 40", message: "{top_module} at step {latest_step}"}
`)
	b := &fakeBackend{t: t,
		query: func(_ context.Context, sql string, _ int) (*Table, error) {
			if sql == "SELECT 1" {
				return &Table{Columns: []string{"module", "pct_time"}, Rows: [][]any{{"embed", 5.0}, {"attn", "61.5"}, {"mlp", 30}}}, nil
			}
			return &Table{Columns: []string{"step"}, Rows: [][]any{{int64(1234)}}}, nil
		},
		get: func(string) (string, error) { return "", nil },
	}
	res, err := Run(context.Background(), s, nil, b, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) != 1 || res.Findings[0].Message != "attn at step 1234" {
		t.Errorf("findings %v", res.Findings)
	}
	if res.Steps[2].Status != StatusSkipped || res.Steps[2].Reason != "No data" || res.Steps[3].Status != StatusError || res.Steps[3].Message != "Empty response" {
		t.Errorf("empty api: %+v", res.Steps[2:])
	}
	// A transport failure is an error whatever on_empty says.
	b.get = func(string) (string, error) { return "", errors.New("dial: refused") }
	res, _ = Run(context.Background(), s, nil, b, RunOptions{})
	if res.Steps[2].Status != StatusError || res.Steps[2].Message != "dial: refused" {
		t.Errorf("transport: %+v", res.Steps[2])
	}
}

func TestToolTable(t *testing.T) {
	cases := []struct {
		raw, want string
		found     bool
	}{
		{`{"columns":["a","b"],"rows":[{"b":2,"a":"x"},{"a":null}]}`, "[a b] [[x 2] [<nil> <nil>]]", true},
		{`{"columns":["a","b"],"rows":[[1,2.5]]}`, "[a b] [[1 2.5]]", true},
		{`{"dataframe":{"columns":["n"],"rows":[{"n":true}]},"meta":{}}`, "[n] [[true]]", true},
		{`[{"x":1},{"y":{"z":[1]}}]`, `[x y] [[1 <nil>] [<nil> {"z":[1]}]]`, true},
		{`{"version":1,"empty":[],"scalars":[1,2],"nodes":[{"host":"a"}],"later":[{"q":1}]}`, "[host] [[a]]", true},
		{`{"ok":true}`, "", false},
		{`"text"`, "", false},
		{`[1,2]`, "", false},
	}
	for _, c := range cases {
		tb, _, found := ToolTable(json.RawMessage(c.raw), 10)
		if found != c.found {
			t.Errorf("%s: found %v", c.raw, found)
			continue
		}
		if found {
			if got := fmt.Sprint(tb.Columns, " ", tb.Rows); got != c.want {
				t.Errorf("%s: got %s want %s", c.raw, got, c.want)
			}
		}
	}
	tb, trunc, _ := ToolTable(json.RawMessage(`[{"a":1},{"a":2},{"a":3}]`), 2)
	if len(tb.Rows) != 2 || !trunc {
		t.Errorf("bound: %v %v", tb.Rows, trunc)
	}
}

func TestPlan(t *testing.T) {
	s := parseSkill(t, "t", runSteps)
	p, err := Plan(s, map[string]string{"limit": "007", "stage": "it's"}, PlanOptions{GOOS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"limit": "7", "threshold": "1.5", "stage": "it's", "use_global": "false"}
	if fmt.Sprint(p.Parameters) != fmt.Sprint(want) || p.SkillID != "t" || p.Title != "Test skill" || len(p.Steps) != 12 {
		t.Errorf("plan %+v", p)
	}
	st := p.Steps
	if st[0].SQL != "SELECT rank, avg_ms FROM python.comm_collective WHERE stage = 'it''s' LIMIT 7" || st[0].OnEmpty != "skip" || st[0].Type != StepSQL {
		t.Errorf("sql step %+v", st[0])
	}
	if st[1].SQL != "SELECT rank FROM python.comm_collective" || st[1].When != "{use_global}" || st[1].SkipReason != "skipped (standalone / use_global=false)" {
		t.Errorf("global step %+v", st[1])
	}
	if st[6].Tool != "get_stacks" || st[6].Args["stage"] != "it's" || st[7].Path != "/apis/pythonext/fr?stage=it%27s" {
		t.Errorf("tool/api %+v %+v", st[6], st[7])
	}
	if st[9].View != "timeline" || st[9].SkipReason == "" || st[11].Platform != "windows" || st[11].SkipReason == "" {
		t.Errorf("ui/platform %+v %+v", st[9], st[11])
	}
	if fmt.Sprint(p.NextSteps) != "[slow_rank comm_bottleneck]" {
		t.Errorf("next %v", p.NextSteps)
	}

	p, _ = Plan(s, nil, PlanOptions{GOOS: "linux", PeerCount: 3, UI: true})
	if p.Parameters["use_global"] != "true" || p.Steps[1].SQL != "SELECT rank FROM global.python.comm_collective" || !p.Steps[1].Cluster || p.Steps[1].SkipReason != "" || p.Steps[9].SkipReason != "" {
		t.Errorf("peers: %+v", p.Steps[1])
	}
	data, _ := json.Marshal(p)
	for _, k := range []string{`"skill_id":"t"`, `"parameters":{`, `"steps":[{"id":"rank_latency","title":"Rank latency","type":"sql","on_empty":"skip","sql":`, `"next_steps":["slow_rank"`} {
		if !strings.Contains(string(data), k) {
			t.Errorf("plan JSON lacks %s: %s", k, data)
		}
	}
	if _, err := Plan(s, map[string]string{"limit": "1 OR 1=1"}, PlanOptions{}); err == nil {
		t.Error("bad override planned")
	}
}
