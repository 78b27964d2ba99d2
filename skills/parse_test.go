package skills

import (
	"strings"
	"testing"
	"time"
)

const goodSteps = `apiVersion: probing.dev/v1
kind: Skill
metadata:
  id: demo
  title: Demo skill
  category: distributed
  docs: |
    First line is the description.
    More.
  tags: [NCCL, Hang]
  triggers:
    keywords:
      en: [stuck]
      zh: [卡住]
spec:
  parameters:
    - name: seq_window
      type: integer
      default: 200
    - name: ratio
      type: number
      default: 1.5
    - name: use_global
      type: boolean
      default: True
    - name: stage
      type: string
      default: "post forward"
    - name: order
      type: enum
      choices: [asc, desc]
      default: desc
    - name: ranks
      type: ranks
      default: "3,0-2"
  requires:
    any_tables: [python.comm_collective]
  variables:
    fr: "{global_prefix}python.torch_nccl_flight_record"
  steps:
    - id: pg_status
      title: PG status
      sql: |
        SELECT rank, seq FROM {fr}
        WHERE stage = '{stage}' AND rank IN ({ranks})
        ORDER BY seq {order} LIMIT {seq_window}
      on_empty: abort
      when: "{use_global}"
    - id: snapshot
      title: Snapshot
      type: api
      path: /apis/pythonext/fr?stage={stage}
      on_empty: warn
    - id: stacks
      title: Stacks
      type: tool
      tool: get_stacks
      args: {ranks: "{ranks}"}
    - id: view
      title: View
      type: ui
      view: analytics
    - id: cfg
      title: Config
      type: config
      action: enable sampling
    - id: rdma
      title: RDMA
      sql: SELECT 1
      platform: windows
  interpretation:
    rules:
      - id: missing_rank
        when: "step:pg_status | rows >= 1"
        severity: warning
        message: "rank {pg_status.rank} missing (window {seq_window})"
      - id: skewed
        when: "step:pg_status | column:seq | max/min(ratio) > {ratio}"
        message: skewed
  summary_template: "  {pg_status.row_count} rows  "
  next_steps: [slow_rank]
`

func TestParseStepsGood(t *testing.T) {
	sf, err := ParseSteps("demo/steps.yaml", []byte(goodSteps))
	if err != nil {
		t.Fatal(err)
	}
	p := sf.Spec.Parameters
	if p[0].Default != "200" || p[1].Default != "1.5" || p[2].Default != "true" || p[4].Default != "desc" || p[5].Default != "0,1,2,3" {
		t.Errorf("canonical defaults: %+v", p)
	}
	if sf.Metadata.Docs != "First line is the description.\nMore." || sf.Spec.SummaryTemplate != "{pg_status.row_count} rows" {
		t.Errorf("trimming: %q %q", sf.Metadata.Docs, sf.Spec.SummaryTemplate)
	}
	st := sf.Spec.Steps
	if st[0].Type != StepSQL || st[0].OnEmpty != "abort" || st[0].SQLLine != 44 || st[1].OnEmpty != "warn" || st[2].Args["ranks"] != "{ranks}" {
		t.Errorf("steps: %+v", st[:3])
	}
	r := sf.Spec.Rules
	if r[0].Severity != SeverityWarning || r[1].Severity != SeverityInfo || r[0].Cond.Step != "pg_status" {
		t.Errorf("rules: %+v", r)
	}
}

func TestParseStepsErrors(t *testing.T) {
	head := "apiVersion: probing.dev/v1\nkind: Skill\nmetadata: {id: x, title: X}\n"
	cases := []struct{ name, yaml, want string }{
		{"top-level field", head + "spec: {}\nextra: 1\n", `f.yaml:5: unknown field "extra" in the document (known: apiVersion, kind, metadata, spec)`},
		{"metadata field", "apiVersion: probing.dev/v1\nkind: Skill\nmetadata:\n  id: x\n  title: X\n  owner: me\nspec: {}\n", `f.yaml:6: unknown field "owner" in metadata (known: id, title, title_en, category, docs, tags, triggers)`},
		{"keywords field", head[:len(head)-len("metadata: {id: x, title: X}\n")] + "metadata:\n  id: x\n  title: X\n  triggers:\n    keywords:\n      fr: [a]\nspec: {}\n", `f.yaml:8: unknown field "fr" in metadata.triggers.keywords (known: zh, en)`},
		{"step field", head + "spec:\n  steps:\n    - id: a\n      title: A\n      type: config\n      config_key: probing.x\n", `f.yaml:9: unknown field "config_key" in spec.steps[0]`},
		{"parameter field", head + "spec:\n  parameters:\n    - name: n\n      type: integer\n      default: 1\n      typo: x\n", `f.yaml:9: unknown field "typo" in spec.parameters[0]`},
		{"rule field", head + "spec:\n  interpretation:\n    rules:\n      - id: r\n        when: always\n        message: m\n        level: error\n", `f.yaml:10: unknown field "level" in spec.interpretation.rules[0]`},
		{"bad yaml", head + "spec:\n  steps: [\n", `f.yaml:5: invalid YAML`},
		{"bad rule", head + "spec:\n  interpretation:\n    rules:\n      - id: r\n        message: m\n        when: \"rows >> 1\"\n", `f.yaml:9: rule "r": when: "rows >> 1"`},
		{"rule needs step", head + "spec:\n  interpretation:\n    rules:\n      - {id: r, message: m, when: \"rows > 1\"}\n", `needs a step:<id> first`},
		{"unknown step type", head + "spec:\n  steps:\n    - {id: a, title: A, type: shell}\n", `f.yaml:6: step "a": type "shell" is not one of sql, tool, api, ui, config`},
		{"integer default", head + "spec:\n  parameters:\n    - {name: n, type: integer, default: \"5\"}\n", `f.yaml:6: parameter "n": default "5": does not match type integer`},
		{"bad param type", head + "spec:\n  parameters:\n    - {name: n, type: float}\n", `f.yaml:6: parameter "n": type "float" is not one of`},
		{"unknown placeholder", head + "spec:\n  parameters:\n    - {name: n, type: integer, default: 1}\n  steps:\n    - id: a\n      title: A\n      sql: |\n        SELECT 1\n        LIMIT {nope}\n", `f.yaml:12: step "a": unknown placeholder {nope} in sql (parameters: n)`},
		{"string outside quotes", head + "spec:\n  parameters:\n    - {name: s, type: string, default: x}\n  steps:\n    - {id: a, title: A, sql: \"SELECT * FROM t WHERE x = {s}\"}\n", `f.yaml:8: step "a": string parameter {s} is in bare SQL`},
		{"string in comment", head + "spec:\n  parameters:\n    - {name: s, type: string, default: x}\n  steps:\n    - {id: a, title: A, sql: \"SELECT 1 -- '{s}'\"}\n", `string parameter {s} is in a comment`},
		{"apiVersion", "apiVersion: v2\nkind: Skill\nmetadata: {id: x, title: X}\nspec: {}\n", `f.yaml:1: apiVersion must be "probing.dev/v1", not "v2"`},
		{"duplicate step", head + "spec:\n  steps:\n    - {id: a, title: A, sql: SELECT 1}\n    - {id: a, title: B, sql: SELECT 2}\n", `f.yaml:7: duplicate step id "a"`},
		{"missing title", "apiVersion: probing.dev/v1\nkind: Skill\nmetadata: {id: x}\nspec: {}\n", `metadata.title is required`},
		{"type error", head + "spec:\n  steps:\n    - {id: a, title: A, sql: SELECT 1, cluster: maybe}\n", `f.yaml:6: spec.steps[0].cluster must be true or false, not "maybe"`},
		{"variable injection", head + "spec:\n  parameters:\n    - {name: s, type: string, default: x}\n  variables:\n    v: \"{s}\"\n", `f.yaml:8: variable "v" uses string parameter {s}`},
		{"variable quote", head + "spec:\n  variables:\n    v: \"x'\"\n", `variable "v" holds "'"`},
		{"reserved name", head + "spec:\n  parameters:\n    - {name: comm_table, type: string, default: x}\n", `parameter "comm_table" would be overwritten`},
		{"duplicate key", head + "spec: {}\nkind: Skill\n", `f.yaml:5: duplicate field "kind"`},
		{"verdict step missing", head + "spec:\n  steps:\n    - {id: a, title: A, sql: SELECT 1}\n  interpretation:\n    verdict_step: v\n", `f.yaml:6: spec.interpretation.verdict_step "v" names no step`},
		{"verdict step not diagnose_hang", head + "spec:\n  steps:\n    - {id: v, title: V, type: tool, tool: get_stacks}\n  interpretation:\n    verdict_step: v\n", `f.yaml:6: verdict_step "v" must be a tool step calling diagnose_hang`},
		{"verdict step and template", head + "spec:\n  steps:\n    - {id: v, title: V, type: tool, tool: diagnose_hang}\n  interpretation:\n    verdict_step: v\n  summary_template: x\n", `drop summary_template`},
		{"two documents", head + "spec: {}\n---\nx: 1\n", `more than one YAML document`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSteps("f.yaml", []byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v\nwant %s", err, c.want)
			}
		})
	}
}

func billionLaughs() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i < 10; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	return b.String()
}

func TestLimits(t *testing.T) {
	start := time.Now()
	_, err := ParseSteps("bomb.yaml", []byte(billionLaughs()))
	if err == nil || !strings.Contains(err.Error(), "bomb.yaml:") || !strings.Contains(err.Error(), "more than 1000 alias expansions") {
		t.Errorf("billion laughs: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("billion laughs took %v", d)
	}
	deep := strings.Repeat("[", 40) + strings.Repeat("]", 40)
	if _, err := ParseSteps("deep.yaml", []byte("x: "+deep)); err == nil || !strings.Contains(err.Error(), "nesting deeper than 32") {
		t.Errorf("deep: %v", err)
	}
	big := make([]byte, MaxFileSize+1)
	if _, err := ParseSteps("big.yaml", big); err == nil || !strings.Contains(err.Error(), "big.yaml: file is 1048577 bytes") {
		t.Errorf("big: %v", err)
	}
	if _, _, err := ParseFrontMatter("SKILL.md", big); err == nil || !strings.Contains(err.Error(), "more than the 1048576-byte limit") {
		t.Errorf("big SKILL.md: %v", err)
	}
	var many strings.Builder
	many.WriteString("a: &a x\nb: [")
	for i := 0; i < 1001; i++ {
		many.WriteString("*a, ")
	}
	many.WriteString("]\n")
	if _, err := ParseSteps("many.yaml", []byte(many.String())); err == nil || !strings.Contains(err.Error(), "more than 1000 alias expansions") {
		t.Errorf("aliases: %v", err)
	}
}

func TestFrontMatter(t *testing.T) {
	md := "---\nname: demo\ndescription: >\n  Folded\n  text\ntags: [a]\nkeywords: {en: [x], zh: [y]}\nparameters:\n  n: { type: integer, default: 5 }\n  g: { type: boolean, default: True }\n---\n\n# Demo\n"
	fm, body, err := ParseFrontMatter("SKILL.md", []byte(md))
	if err != nil {
		t.Fatal(err)
	}
	if fm.Name != "demo" || fm.Description != "Folded text" || fm.Parameters[0].Default != "5" || fm.Parameters[1].Default != "true" || body != "\n# Demo\n" {
		t.Errorf("%+v %q", fm, body)
	}
	_, _, err = ParseFrontMatter("SKILL.md", []byte("---\nname: demo\nlicense: MIT\n---\nbody"))
	if err == nil || !strings.Contains(err.Error(), `SKILL.md:3: unknown field "license" in the front matter (known: name, description, category, tables, tags, keywords, parameters)`) {
		t.Errorf("unknown field: %v", err)
	}
	_, _, err = ParseFrontMatter("SKILL.md", []byte("---\nname: demo\nparameters:\n  n: {type: integer, default: x}\n---\n"))
	if err == nil || !strings.Contains(err.Error(), `SKILL.md:4: parameter "n": default "x": does not match type integer`) {
		t.Errorf("param: %v", err)
	}
	if _, _, err := ParseFrontMatter("SKILL.md", []byte("---\nname: demo\n")); err == nil || !strings.Contains(err.Error(), "never closed") {
		t.Errorf("unclosed: %v", err)
	}
	if fm, body, err := ParseFrontMatter("SKILL.md", []byte("# just text\n")); err != nil || fm != nil || body != "# just text\n" {
		t.Errorf("no front matter: %v %v %q", fm, err, body)
	}
}

func TestParseCatalog(t *testing.T) {
	c, err := ParseCatalog("catalog.yaml", []byte("apiVersion: probing.dev/v1\nkind: Catalog\ncategories:\n  triage: {label: Triage, description: First}\nskills:\n  - {id: a, category: triage, priority: 2, entry: true, path: a/steps.yaml}\n"))
	if err != nil || c.Skills[0].Priority != 2 || !c.Skills[0].Entry || c.Categories[0].Label != "Triage" {
		t.Fatalf("%+v %v", c, err)
	}
	_, err = ParseCatalog("catalog.yaml", []byte("apiVersion: probing.dev/v1\nkind: Catalog\nskills:\n  - id: a\n    priority: high\n    owner: x\n"))
	for _, want := range []string{`catalog.yaml:5: skills[0].priority must be an integer, not "high"`, `catalog.yaml:6: unknown field "owner" in skills[0]`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %s", err, want)
		}
	}
}
