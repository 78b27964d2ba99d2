package skills

import (
	"errors"
	"strings"
	"testing"
)

func demoSkill(t *testing.T) *Skill {
	t.Helper()
	sf, err := ParseSteps("demo/steps.yaml", []byte(goodSteps))
	if err != nil {
		t.Fatal(err)
	}
	return &Skill{ID: "demo", Steps: sf}
}

func TestExpandInjection(t *testing.T) {
	s := demoSkill(t)
	b, err := s.Bind(map[string]string{"stage": "x'; DROP TABLE t; --", "seq_window": "0042", "use_global": "TRUE"}, BindOptions{GOOS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	e, err := b.Expand(&s.Steps.Spec.Steps[0])
	if err != nil {
		t.Fatal(err)
	}
	want := "SELECT rank, seq FROM global.python.torch_nccl_flight_record\nWHERE stage = 'x''; DROP TABLE t; --' AND rank IN (0,1,2,3)\nORDER BY seq desc LIMIT 42\n"
	if e.SQL != want || !e.Fanout || e.SkipReason != "" {
		t.Errorf("got %q fanout=%v skip=%q", e.SQL, e.Fanout, e.SkipReason)
	}
	// The whole value stays one literal: the lexer sees no code after it.
	strs := 0
	sqlContexts(strings.ReplaceAll(e.SQL, "DROP", "{probe}"), func(_ string, _, _ int, ctx sqlContext) {
		if ctx == sqlString {
			strs++
		}
	})
	if strs != 1 {
		t.Errorf("DROP escaped its literal in %q", e.SQL)
	}
	if b.Overrides["seq_window"] != "42" || b.Overrides["use_global"] != "true" {
		t.Errorf("overrides %v", b.Overrides)
	}
	api, _ := b.Expand(&s.Steps.Spec.Steps[1])
	if api.Path != "/apis/pythonext/fr?stage=x%27%3B+DROP+TABLE+t%3B+--" {
		t.Errorf("path %q", api.Path)
	}
	tool, _ := b.Expand(&s.Steps.Spec.Steps[2])
	if tool.Args["ranks"] != "0,1,2,3" || tool.Tool != "get_stacks" {
		t.Errorf("tool %+v", tool)
	}
}

func TestBindErrors(t *testing.T) {
	s := demoSkill(t)
	cases := []struct {
		over map[string]string
		want string
	}{
		{map[string]string{"seq_window": "1; SELECT 1"}, "parameter `seq_window` of skill `demo`: must be an integer"},
		{map[string]string{"ratio": "NaN"}, "must be a finite number"},
		{map[string]string{"ratio": "1e400"}, "must be a finite number"},
		{map[string]string{"use_global": "yes"}, "must be true or false"},
		{map[string]string{"order": "desc; DROP"}, "must be one of asc, desc"},
		{map[string]string{"ranks": "0-9999999"}, "more than"},
		{map[string]string{"ranks": "1) OR (1=1"}, "is not a rank"},
		{map[string]string{"stage": "a\x00b"}, "NUL"},
		{map[string]string{"nope": "1"}, "unknown parameter `nope` for skill `demo`; its parameters: `"},
	}
	for _, c := range cases {
		if _, err := s.Bind(c.over, BindOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v want %s", c.over, err, c.want)
		}
	}
}

func TestUseGlobal(t *testing.T) {
	s := demoSkill(t)
	peers := func(n int, err error) BindOptions {
		return BindOptions{GOOS: "linux", PeerCount: func() (int, error) { return n, err }}
	}
	b, _ := s.Bind(nil, peers(3, nil))
	if !b.UseGlobal || b.Values["comm_table"] != "global.python.comm_collective" || b.Values["fr"] != "global.python.torch_nccl_flight_record" {
		t.Errorf("peers: %+v", b.Values)
	}
	b, _ = s.Bind(nil, peers(0, nil))
	e, _ := b.Expand(&s.Steps.Spec.Steps[0])
	if b.UseGlobal || e.SkipReason != "skipped (standalone / use_global=false)" || !strings.Contains(e.SQL, "FROM python.torch_nccl_flight_record") || e.Fanout {
		t.Errorf("standalone: %+v", e)
	}
	if _, err := s.Bind(nil, peers(0, errors.New("boom"))); err == nil || err.Error() != "failed to discover cluster peers before running `demo`: boom" {
		t.Errorf("discovery: %v", err)
	}
	b, _ = s.Bind(map[string]string{"use_global": "false"}, peers(0, errors.New("never asked")))
	if b.UseGlobal || b.Values["global_prefix"] != "" {
		t.Errorf("override: %+v", b.Values)
	}
	for i, want := range map[int]string{3: "ui step (view=analytics) — run probing Web UI for navigation", 4: "config steps are not applied automatically in CLI skill", 5: "step requires platform windows, current platform is linux"} {
		if e, _ := b.Expand(&s.Steps.Spec.Steps[i]); e.SkipReason != want {
			t.Errorf("step %d: %q", i, e.SkipReason)
		}
	}
	if e, err := s.Expand("pg_status", nil); err != nil || !strings.Contains(e.SQL, "LIMIT 200") {
		t.Errorf("Skill.Expand: %v %q", err, e.SQL)
	}
}

// A hand-built skill (not through ParseSteps) still cannot inject: Expand
// re-checks the quoting.
func TestExpandRechecksQuoting(t *testing.T) {
	s := &Skill{ID: "h", Steps: &StepsFile{File: "h/steps.yaml", Spec: Spec{
		Parameters: []Parameter{{Name: "s", Type: TypeString, Default: "x", HasDefault: true}},
		Steps:      []Step{{ID: "a", SQL: "SELECT * FROM t WHERE x = {s}"}, {ID: "b", SQL: "SELECT {missing}"}},
	}}}
	_, err := s.Expand("a", map[string]string{"s": "1 OR 1=1"})
	if err == nil || !strings.Contains(err.Error(), "skill `h` (h/steps.yaml): step \"a\" sql: string parameter {s} is in bare SQL") {
		t.Errorf("got %v", err)
	}
	_, err = s.Expand("b", nil)
	if err == nil || !strings.Contains(err.Error(), "unknown placeholder {missing}") {
		t.Errorf("got %v", err)
	}
}

func TestSQLContexts(t *testing.T) {
	sql := "SELECT {a}, '{b}', 'it''s {c}', \"{d}\", `{e}` -- {f}\n{g} /* {h} */ {i}"
	got := map[string]sqlContext{}
	sqlContexts(sql, func(name string, _, _ int, ctx sqlContext) { got[name] = ctx })
	want := map[string]sqlContext{"a": sqlCode, "b": sqlString, "c": sqlString, "d": sqlIdent, "e": sqlIdent, "f": sqlComment, "g": sqlCode, "h": sqlComment, "i": sqlCode}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("{%s}: %v, want %v", k, got[k], v)
		}
	}
}

// Probing's bundled skills restate a built-in table variable as itself
// (nccl_proxy_table: "{nccl_proxy_table}"); that must load and expand to the
// built-in name.
func TestSelfNamedBuiltinVariable(t *testing.T) {
	src := "apiVersion: probing.dev/v1\nkind: Skill\nmetadata:\n  id: v\n  title: V\nspec:\n" +
		"  variables:\n    nccl_proxy_table: \"{nccl_proxy_table}\"\n" +
		"  steps:\n    - id: s\n      title: S\n      sql: SELECT * FROM {nccl_proxy_table}\n"
	sf, err := ParseSteps("v/steps.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	sk := &Skill{ID: "v", Steps: sf}
	ex, err := sk.Expand("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ex.SQL != "SELECT * FROM nccl.proxy_ops" {
		t.Fatalf("expanded to %q", ex.SQL)
	}
}
