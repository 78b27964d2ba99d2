package mcp_test

// The official MCP Inspector's CLI drives the built binary, in the two
// releases people have: 0.15 (what `npm install` picked on Node 20 for a
// long time) and 2.12 (with --strict, its schema portability report).
// Inspector 0.15 turns each --tool-arg into the type the tool's schema
// gives, so a schema it cannot read (a type array) sends strings; this test
// calls every tool through both. make test installs both from npm into
// node_modules (package.json); elsewhere set PROBING_INSPECTOR_DIR to a
// node_modules holding them, or the test skips (fails under
// PROBING_E2E_REQUIRED=1).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// inspectorCLI is one Inspector release's CLI entry point.
type inspectorCLI struct {
	version string
	script  string
	strict  bool // supports --strict
}

func inspectors(t *testing.T, root string) []inspectorCLI {
	t.Helper()
	dir := os.Getenv("PROBING_INSPECTOR_DIR")
	if dir == "" {
		dir = filepath.Join(root, "node_modules")
	}
	node, err := exec.LookPath("node")
	all := []inspectorCLI{
		{"2.12", filepath.Join(dir, "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js"), true},
		{"0.15", filepath.Join(dir, "inspector-0.15", "cli", "build", "cli.js"), false},
	}
	var missing []string
	for _, in := range all {
		if _, err := os.Stat(in.script); err != nil {
			missing = append(missing, in.script)
		}
	}
	if err != nil || len(missing) > 0 {
		why := fmt.Sprintf("the MCP Inspector CLI is not installed (node: %v; missing %v)", err, missing)
		if e2eRequired() {
			t.Fatalf("PROBING_E2E_REQUIRED is set, but %s; run npm ci --ignore-scripts in the repository root (make test does)", why)
		}
		t.Skipf("skipping: %s. To run it: npm ci --ignore-scripts (or set PROBING_INSPECTOR_DIR)", why)
	}
	_ = node
	return all
}

// inspect runs one Inspector CLI command against `probing-mcp serve`.
func inspect(t *testing.T, in inspectorCLI, bin string, env []string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard, not a margin
	defer cancel()
	full := []string{in.script, "--cli"}
	for _, e := range env {
		full = append(full, "-e", e)
	}
	full = append(full, bin, "serve")
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, "node", full...)
	cmd.Dir = t.TempDir() // not a project directory: no extra file root
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run() // the exit status differs by release; the output says what happened
	if ctx.Err() != nil {
		t.Fatalf("inspector %s %v: no answer in 2 minutes\n%s", in.version, args, errb.String())
	}
	return out.String(), errb.String()
}

func TestE2EInspector(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	ins := inspectors(t, h.root)
	data := t.TempDir()
	env := []string{"PROBING_DATA_DIR=" + data, "PROBING_MCP_ALLOW_WRITE=1", "PROBING_MCP_AUDIT_LOG=" + filepath.Join(data, "audit.jsonl"),
		"PROBING_ALLOWED_FILE_DIRS=" + h.fr(""), "PROBING_CTRL_ROOT=" + t.TempDir(), "PROBING_NODE_HOST=e2e-node"}
	fr := h.fr("missing_rank")
	quoted, _ := json.Marshal([]string{fr})
	// Every tool, with arguments of every JSON type its schema has. ok: the
	// call must succeed; otherwise it must be a tool error (no job runs
	// here) that is not about the arguments.
	calls := []struct {
		tool string
		args []string
		ok   bool
		want string // in the text (0.15 prints it)
	}{
		{"analyze_flight_recorder", []string{"paths=" + string(quoted), "limit=3", "detail=full"}, true, "MISSING_RANKS"},
		{"diagnose_hang", []string{"stall_seconds=60", "detail=summary"}, true, "No training job found"},
		{"list_processes", []string{"include_dead=true"}, true, ""},
		{"get_stacks", []string{"ranks=0-3", "max_groups=3", "merge=true", "pids=[1234]"}, false, ""},
		{"gpu_status", []string{"detail=devices", "max_devices=8", "offset=0", "host=e2e-node"}, true, "GPU(s) on 1 node(s)"},
		{"snapshot_flight_recorder", []string{"only_active=true", "limit=5"}, false, ""},
		{"get_config", []string{"rank=0", "key=server.address"}, false, ""},
		{"list_alerts", []string{"since=6h", "limit=5"}, true, "watcher"},
		{"query", []string{"sql=SELECT 1 AS one", "limit=10"}, true, "one"},
		{"describe_tables", []string{"schema=python", "limit=5"}, true, "comm_collective"},
		{"list_skills", []string{"category=triage"}, true, ""},
		{"plan_skill", []string{"skill_id=training_hang", `params={"stall_seconds":"60"}`}, true, "training_hang"},
		{"run_skill", []string{"skill_id=training_hang"}, true, ""},
		{"set_config", []string{"key=mcp.loglevel", "value=debug"}, true, "debug"},
		{"eval_python", []string{"pid=1", "code=1+1", "timeout=5"}, false, ""},
	}
	for _, in := range ins {
		t.Run(in.version, func(t *testing.T) {
			args := []string{"--method", "tools/list"}
			if in.strict {
				args = append(args, "--strict")
			}
			out, errOut := inspect(t, in, h.bin, env, args...)
			var list struct {
				Tools []struct {
					Name string `json:"name"`
				} `json:"tools"`
			}
			if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Tools) == 0 {
				t.Fatalf("tools/list: %v\n%s\n%s", err, out, errOut)
			}
			if in.strict && (strings.Contains(errOut, "Warning:") || strings.Contains(errOut, "Error:") || strings.Contains(errOut, "portability")) {
				t.Errorf("--strict reports schema problems:\n%s", errOut)
			}
			listed := map[string]bool{}
			for _, tl := range list.Tools {
				listed[tl.Name] = true
			}
			for _, c := range calls {
				if !listed[c.tool] {
					t.Errorf("%s is not listed", c.tool)
					continue
				}
				delete(listed, c.tool)
				args := []string{"--method", "tools/call", "--tool-name", c.tool}
				for _, a := range c.args {
					args = append(args, "--tool-arg", a)
				}
				out, errOut := inspect(t, in, h.bin, env, args...)
				checkInspectorCall(t, in, c.tool, c.ok, c.want, out, errOut)
			}
			for name := range listed {
				t.Errorf("%s is listed but this test does not call it: add it", name)
			}
			// An unknown argument is refused, naming it and the valid ones.
			out, _ = inspect(t, in, h.bin, env, "--method", "tools/call", "--tool-name", "query", "--tool-arg", "sql=SELECT 1", "--tool-arg", "rows=5")
			if !strings.Contains(out, "unknown argument") && !strings.Contains(out, "tool_is_error") {
				t.Errorf("query with an unknown argument: %s", out)
			}
		})
	}
}

// checkInspectorCall reads one tools/call as the release prints it: 0.15
// prints the result (isError included); 2.12 prints a success's result
// and, for a tool error, an error object without the text.
func checkInspectorCall(t *testing.T, in inspectorCLI, tool string, ok bool, want, out, errOut string) {
	t.Helper()
	var res struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
		Error   *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Errorf("%s via Inspector %s: output is not JSON: %v\n%s\n%s", tool, in.version, err, out, errOut)
		return
	}
	var text strings.Builder
	for _, c := range res.Content {
		text.WriteString(c.Text)
	}
	toolErr := res.IsError || (res.Error != nil && res.Error.Code == "tool_is_error")
	switch {
	case res.Error != nil && res.Error.Code != "tool_is_error":
		t.Errorf("%s via Inspector %s: not a tool result: %s %s", tool, in.version, res.Error.Code, res.Error.Message)
	case ok && toolErr:
		t.Errorf("%s via Inspector %s: isError: %s%s", tool, in.version, text.String(), out)
	case !ok && !toolErr:
		t.Errorf("%s via Inspector %s: succeeded with no job to ask: %s", tool, in.version, text.String())
	case strings.Contains(text.String(), "invalid arguments"):
		t.Errorf("%s via Inspector %s: the arguments were refused: %s", tool, in.version, text.String())
	case ok && want != "" && !strings.Contains(text.String(), want):
		t.Errorf("%s via Inspector %s: result lacks %q: %.600s", tool, in.version, want, text.String())
	}
}
