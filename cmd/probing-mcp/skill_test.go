package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestSkillCommands(t *testing.T) {
	t.Setenv("PROBING_DATA_DIR", t.TempDir())
	t.Setenv("PROBING_SKILLS_DIR", "")
	var out, errb bytes.Buffer
	if code := run([]string{"skill", "list"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "training_hang") {
		t.Fatalf("list: %d %s %s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run([]string{"skill", "validate"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "0 problem(s)") {
		t.Fatalf("validate: %d %s", code, out.String())
	}
	out.Reset()
	if code := run([]string{"skill", "plan", "collective_inflight", "min_age_s=7", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("plan: %d %s", code, errb.String())
	}
	var plan struct {
		Parameters map[string]string `json:"parameters"`
	}
	if err := json.Unmarshal(out.Bytes(), &plan); err != nil || plan.Parameters["min_age_s"] != "7" {
		t.Fatalf("plan JSON: %v %s", err, out.String())
	}
	// A dead data dir: health_overview runs and says there is nothing.
	out.Reset()
	if code := run([]string{"skill", "run", "health_overview"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "no_tables") {
		t.Fatalf("run: %d %s %s", code, out.String(), errb.String())
	}
	errb.Reset()
	if code := run([]string{"skill", "run", "collective_inflight", "min_age_s=1;DROP"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "min_age_s") {
		t.Fatalf("injection: %d %s", code, errb.String())
	}
	if code := run([]string{"skill", "plan", "x", "noequals"}, &out, &errb); code != 2 {
		t.Fatalf("bad parameter syntax: %d", code)
	}
}
