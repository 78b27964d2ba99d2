package mcp_test

// End-to-end tests over stdio (see e2e_test.go for the harness).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/tools"
)

func TestE2EStdioDefaultIsReadOnly(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	data := t.TempDir()
	env := e2eEnv("PROBING_DATA_DIR="+data, "PROBING_MCP_AUDIT_LOG="+filepath.Join(data, "audit.jsonl"))
	out := h.stdio(t, env, "stdio-list", e2eArgs("set_config", map[string]string{"key": "mcp.loglevel", "value": "debug"})...)
	out.mustOK(t)

	if out.ServerInfo["name"] != "probing-mcp" {
		t.Errorf("server name %q, want probing-mcp", out.ServerInfo["name"])
	}
	for _, c := range []string{"tools", "prompts"} {
		if _, ok := out.Capabilities[c]; !ok {
			t.Errorf("capability %q not advertised: %v", c, out.Capabilities)
		}
	}
	checkAnalyzeTool(t, out)
	if out.tool("set_config") != nil {
		t.Errorf("set_config is listed although writes are off; tools: %v", out.toolNames())
	}

	// An unregistered tool cannot be called, whatever the client claims.
	c := out.call(t, 0)
	switch {
	case c.Error == nil && !c.IsError:
		t.Errorf("set_config succeeded with writes off: %s", c.Text)
	case c.Error != nil && !strings.Contains(c.Error.Message, "set_config"):
		t.Errorf("set_config refused with %s; want a message that names the tool", c.Error)
	}

	if !strings.Contains(out.Instructions, "analyze_flight_recorder") {
		t.Errorf("instructions do not mention analyze_flight_recorder:\n%s", out.Instructions)
	}
	if !strings.Contains(out.Instructions, "disabled") || !strings.Contains(out.Instructions, "PROBING_MCP_ALLOW_WRITE") {
		t.Errorf("instructions do not say write tools are disabled and how to enable them:\n%s", out.Instructions)
	}
	if e2eExists(filepath.Join(data, "audit.jsonl")) {
		t.Error("an audit log was created although writes are off")
	}
}

type e2eAuditRecord struct {
	Time       string `json:"time"`
	ID         string `json:"id"`
	Phase      string `json:"phase"`
	Tool       string `json:"tool"`
	Caller     string `json:"caller"`
	ArgsSHA256 string `json:"args_sha256"`
	ArgsBytes  int    `json:"args_bytes"`
	Outcome    string `json:"outcome"`
	Error      string `json:"error"`
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func readAudit(t *testing.T, path string) []e2eAuditRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() != 0o600 {
		t.Errorf("audit log mode %v, want 0600", fi.Mode().Perm())
	}
	var recs []e2eAuditRecord
	for line := range strings.Lines(string(b)) {
		var r e2eAuditRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit log line is not JSON (%v): %q", err, line)
		}
		recs = append(recs, r)
	}
	return recs
}

// checkAuditPair checks the two lines one write call leaves: its intent, then
// its outcome.
func checkAuditPair(t *testing.T, recs []e2eAuditRecord, args any, callerPrefix, outcome string) {
	t.Helper()
	if len(recs) != 2 {
		t.Fatalf("%d audit line(s) for one call, want 2: %+v", len(recs), recs)
	}
	canon, _ := json.Marshal(args) // sorted keys, as the server hashes them
	sum := sha256.Sum256(canon)
	want := hex.EncodeToString(sum[:])
	for i, phase := range []string{"call", "result"} {
		r := recs[i]
		if r.Phase != phase || r.Tool != "set_config" {
			t.Errorf("audit line %d: phase %q tool %q, want %q set_config", i, r.Phase, r.Tool, phase)
		}
		if !strings.HasPrefix(r.Caller, callerPrefix) {
			t.Errorf("audit line %d: caller %q, want prefix %q", i, r.Caller, callerPrefix)
		}
		if !hex64.MatchString(r.ArgsSHA256) || r.ArgsSHA256 != want || r.ArgsBytes != len(canon) {
			t.Errorf("audit line %d: args_sha256 %q (%d bytes), want %s (%d bytes) of %s", i, r.ArgsSHA256, r.ArgsBytes, want, len(canon), canon)
		}
		if _, err := time.Parse(time.RFC3339Nano, r.Time); err != nil {
			t.Errorf("audit line %d: time %q: %v", i, r.Time, err)
		}
	}
	if recs[0].ID == "" || recs[0].ID != recs[1].ID {
		t.Errorf("audit ids %q and %q, want one non-empty id for the call and its result", recs[0].ID, recs[1].ID)
	}
	if recs[0].Outcome != "" {
		t.Errorf("the intent line has outcome %q", recs[0].Outcome)
	}
	if recs[1].Outcome != outcome {
		t.Errorf("audit outcome %q (%s), want %q", recs[1].Outcome, recs[1].Error, outcome)
	}
}

func checkSetConfigListed(t *testing.T, out *e2eOut) {
	t.Helper()
	tl := out.tool("set_config")
	if tl == nil {
		t.Fatalf("set_config not listed with writes on; tools: %v", out.toolNames())
	}
	checkHints(t, tl, false, false, true, false)
	checkSchemas(t, tl, []string{"key", "value"}, nil)
	checkAnalyzeTool(t, out)
	if !strings.Contains(out.Instructions, "`set_config`") || !strings.Contains(out.Instructions, "enabled") ||
		!strings.Contains(out.Instructions, "audited") {
		t.Errorf("instructions do not say set_config is enabled and audited:\n%s", out.Instructions)
	}
}

func checkSetConfigOK(t *testing.T, c e2eCall, previous, value string) {
	t.Helper()
	var res tools.SetConfigResult
	if err := json.Unmarshal(c.ok(t), &res); err != nil {
		t.Fatalf("structured content is not a SetConfigResult: %v", err)
	}
	want := tools.SetConfigResult{Status: "ok", Key: "probing.mcp.loglevel", Previous: previous, Value: value, WriteEnabled: true}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("set_config result %+v, want %+v", res, want)
	}
}

func TestE2EStdioWriteTools(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	debug := map[string]string{"key": "mcp.loglevel", "value": "debug"}

	t.Run("allow=1", func(t *testing.T) {
		t.Parallel()
		audit := filepath.Join(t.TempDir(), "not-yet", "audit.jsonl") // the server creates the directory
		env := h.serverEnv(t, "PROBING_MCP_ALLOW_WRITE=1", "PROBING_MCP_AUDIT_LOG="+audit)
		out := h.stdio(t, env, "stdio-list", e2eArgs("set_config", debug)...)
		out.mustOK(t)
		checkSetConfigListed(t, out)
		checkSetConfigOK(t, out.call(t, 0), "info", "debug")
		checkAuditPair(t, readAudit(t, audit), debug, fmt.Sprintf("stdio:ppid=%d", out.ClientPID), "ok")

		// Refusals are audited too, and say which key and value were wrong.
		loud := map[string]string{"key": "mcp.loglevel", "value": "loud"}
		unknown := map[string]string{"key": "no.such.key", "value": "1"}
		out = h.stdio(t, env, "stdio-call", slices.Concat(e2eArgs("set_config", loud), e2eArgs("set_config", unknown))...)
		out.mustOK(t)
		if msg := out.call(t, 0).toolError(t); !strings.Contains(msg, "probing.mcp.loglevel") || !strings.Contains(msg, "loud") {
			t.Errorf("bad value: message %q does not name the key and the value", msg)
		}
		if msg := out.call(t, 1).toolError(t); !strings.Contains(msg, "probing.no.such.key") {
			t.Errorf("unknown key: message %q does not name the key", msg)
		}
		recs := readAudit(t, audit)
		if len(recs) != 6 {
			t.Fatalf("%d audit lines after three calls, want 6", len(recs))
		}
		checkAuditPair(t, recs[2:4], loud, "stdio:", "error")
		checkAuditPair(t, recs[4:6], unknown, "stdio:", "error")
		if !strings.Contains(recs[3].Error, "probing.mcp.loglevel") {
			t.Errorf("audited error %q does not name the key", recs[3].Error)
		}
	})

	t.Run("allow= TRUE ", func(t *testing.T) {
		t.Parallel()
		data := t.TempDir() // no PROBING_MCP_AUDIT_LOG: <data dir>/probing-mcp/mcp-audit.jsonl
		env := e2eEnv("PROBING_DATA_DIR="+data, "PROBING_MCP_ALLOW_WRITE= TRUE ")
		out := h.stdio(t, env, "stdio-list", e2eArgs("set_config", debug)...)
		out.mustOK(t)
		checkSetConfigListed(t, out)
		checkSetConfigOK(t, out.call(t, 0), "info", "debug")
		checkAuditPair(t, readAudit(t, filepath.Join(data, "probing-mcp", "mcp-audit.jsonl")), debug, "stdio:", "ok")
	})

	for _, v := range []string{"2", "enable"} {
		t.Run("allow="+v+" refused", func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), e2eStartTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, h.bin, "serve")
			cmd.Env = h.serverEnv(t, "PROBING_MCP_ALLOW_WRITE="+v)
			out, err := cmd.CombinedOutput() // stdin is /dev/null
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("serve with PROBING_MCP_ALLOW_WRITE=%q: err %v, want a refusal at start\n%s", v, err, out)
			}
			if !strings.Contains(string(out), "PROBING_MCP_ALLOW_WRITE=\""+v+"\"") || !strings.Contains(string(out), "want 1") {
				t.Errorf("the refusal does not name the variable and its values:\n%s", out)
			}
		})
	}
	for _, v := range []string{"0", "false", "off", ""} {
		t.Run("allow="+v, func(t *testing.T) {
			t.Parallel()
			audit := filepath.Join(t.TempDir(), "audit.jsonl")
			env := h.serverEnv(t, "PROBING_MCP_ALLOW_WRITE="+v, "PROBING_MCP_AUDIT_LOG="+audit)
			out := h.stdio(t, env, "stdio-list", e2eArgs("set_config", debug)...)
			out.mustOK(t)
			if out.tool("set_config") != nil {
				t.Errorf("PROBING_MCP_ALLOW_WRITE=%q lists set_config", v)
			}
			if c := out.call(t, 0); c.Error == nil && !c.IsError {
				t.Errorf("PROBING_MCP_ALLOW_WRITE=%q: set_config succeeded: %s", v, c.Text)
			}
			if !strings.Contains(out.Instructions, "disabled") {
				t.Errorf("instructions do not say writes are disabled:\n%s", out.Instructions)
			}
			if e2eExists(audit) {
				t.Errorf("PROBING_MCP_ALLOW_WRITE=%q created the audit log", v)
			}
		})
	}
}

// A server that cannot audit must not start with writes on.
func TestE2EStdioWriteNeedsAuditLog(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	dir := t.TempDir() // a directory cannot be opened as the log file
	ctx, cancel := context.WithTimeout(context.Background(), e2eStartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, "serve")
	cmd.Env = h.serverEnv(t, "PROBING_MCP_ALLOW_WRITE=1", "PROBING_MCP_AUDIT_LOG="+dir)
	out, err := cmd.CombinedOutput() // stdin is /dev/null: a server that starts exits 0 at EOF
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("serve with an unusable audit log: err %v, want a non-zero exit\n%s", err, out)
	}
	if !strings.Contains(string(out), "audit log") || !strings.Contains(string(out), "PROBING_MCP_ALLOW_WRITE") {
		t.Errorf("the error does not explain the audit log problem:\n%s", out)
	}
}

func TestE2EStdioAnalyzeFlightRecorder(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	// Allowed: the real dumps and a scratch directory with two links, one
	// into the dumps (allowed) and one out of the allowed roots (refused).
	scratch := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(h.fr("missing_rank"), filepath.Join(scratch, "into")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(scratch, "escape")); err != nil {
		t.Fatal(err)
	}
	env := h.serverEnv(t, "PROBING_ALLOWED_FILE_DIRS="+h.fr("")+":"+scratch)
	calls := [][]string{
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}}),
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("healthy")}}),
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{"/etc"}}),
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{outside}}),
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{filepath.Join(scratch, "escape")}}),
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{filepath.Join(scratch, "into")}}),
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{}}),
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{filepath.Join(scratch, "nothing-here")}}),
	}
	out := h.stdio(t, env, "stdio-call", slices.Concat(calls...)...)
	out.mustOK(t)
	if len(out.Calls) != len(calls) {
		t.Fatalf("%d call report(s), want %d", len(out.Calls), len(calls))
	}

	t.Run("missing_rank", func(t *testing.T) { checkMissingRank(t, out.Calls[0]) })
	t.Run("healthy", func(t *testing.T) { checkHealthy(t, out.Calls[1]) })
	for i, name := range map[int]string{2: "/etc", 3: "outside", 4: "symlink_escape"} {
		t.Run(strings.TrimPrefix(name, "/"), func(t *testing.T) {
			if msg := out.Calls[i].toolError(t); !strings.Contains(msg, "PROBING_ALLOWED_FILE_DIRS") {
				t.Errorf("refusal %q does not name PROBING_ALLOWED_FILE_DIRS", msg)
			}
		})
	}
	t.Run("symlink_inside", func(t *testing.T) { checkMissingRank(t, out.Calls[5]) })
	t.Run("empty_paths", func(t *testing.T) {
		if msg := out.Calls[6].toolError(t); !strings.Contains(msg, "paths") {
			t.Errorf("message %q does not mention paths", msg)
		}
	})
	t.Run("nonexistent", func(t *testing.T) {
		if msg := out.Calls[7].toolError(t); !strings.Contains(msg, "does not exist") {
			t.Errorf("message %q does not say the path does not exist", msg)
		}
	})
}

// With PROBING_MCP_OUTPUT_SCHEMAS=1 every tool lists its output schema,
// and the official client, which validates structured content against it,
// accepts the results.
func TestE2EStdioOutputSchemas(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	env := h.serverEnv(t, "PROBING_MCP_OUTPUT_SCHEMAS=1", "PROBING_ALLOWED_FILE_DIRS="+h.fr(""))
	out := h.stdio(t, env, "stdio-list", slices.Concat(
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}}),
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}, "detail": "full"}),
		e2eArgs("list_processes", map[string]any{}),
		e2eArgs("describe_tables", map[string]any{"schema": "python"}),
		e2eArgs("list_skills", map[string]any{}),
		e2eArgs("plan_skill", map[string]any{"skill_id": "training_hang"}),
	)...)
	out.mustOK(t)
	tl := out.tool("analyze_flight_recorder")
	if tl == nil {
		t.Fatalf("analyze_flight_recorder not listed; tools: %v", out.toolNames())
	}
	checkSchemas(t, tl, []string{"paths", "detail"}, []string{"verdict", "summary", "process_groups"})
	for _, name := range out.toolNames() {
		if len(out.tool(name).OutputSchema) == 0 {
			t.Errorf("%s: no output schema with PROBING_MCP_OUTPUT_SCHEMAS=1", name)
		}
	}
	checkMissingRank(t, out.Calls[0])
	for i, c := range out.Calls {
		if c.Error != nil {
			t.Errorf("call %d (%s): the client refused the result: %s", i, c.Tool, c.Error)
		}
	}
}

func TestE2EStdioPrompt(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	out := h.stdio(t, h.serverEnv(t), "stdio-prompt", "--prompt", "diagnose_hang",
		"--prompt-args", `{"dumps": "/x", "symptom": "step 1200 never finished"}`)
	out.mustOK(t)
	i := slices.IndexFunc(out.Prompts, func(p e2ePromptInfo) bool { return p.Name == "diagnose_hang" })
	if i < 0 {
		t.Fatalf("diagnose_hang not listed: %+v", out.Prompts)
	}
	var args []string
	for _, a := range out.Prompts[i].Arguments {
		args = append(args, a.Name)
	}
	if !slices.Contains(args, "dumps") || !slices.Contains(args, "symptom") {
		t.Errorf("diagnose_hang arguments %v, want dumps and symptom", args)
	}
	p := out.Prompt
	if p == nil {
		t.Fatal("no get_prompt report")
	}
	if p.Error != nil {
		t.Fatalf("get_prompt failed: %s", p.Error)
	}
	for _, want := range []string{"analyze_flight_recorder", `"/x"`, "step 1200 never finished"} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("rendered prompt does not contain %s:\n%s", want, p.Text)
		}
	}
	var names []string
	for _, pi := range out.Prompts {
		names = append(names, pi.Name)
	}
	slices.Sort(names)
	if strings.Join(names, ",") != "diagnose_hang,explain_slow_step,find_straggler,investigate_watchdog_timeout,post_mortem" {
		t.Errorf("prompts listed: %v", names)
	}
	// A typed argument that does not parse is refused, naming it.
	out = h.stdio(t, h.serverEnv(t), "stdio-prompt", "--prompt", "find_straggler", "--prompt-args", `{"window": "soon"}`)
	out.mustOK(t)
	if out.Prompt == nil || out.Prompt.Error == nil || !strings.Contains(out.Prompt.Error.Message, "window") || out.Prompt.Error.Code == nil || *out.Prompt.Error.Code != -32602 {
		t.Errorf("find_straggler with window=soon: %+v, want -32602 Invalid params naming window", out.Prompt)
	}
	out = h.stdio(t, h.serverEnv(t), "stdio-prompt", "--prompt", "explain_slow_step", "--prompt-args", `{"step": "120"}`)
	out.mustOK(t)
	if out.Prompt == nil || out.Prompt.Error != nil || !strings.Contains(out.Prompt.Text, "BETWEEN 117 AND 123") || !strings.Contains(out.Prompt.Text, "python.torch_step_timing") {
		t.Errorf("explain_slow_step: %+v", out.Prompt)
	}
}

// In stdio mode stdout is the protocol stream: logs, even at debug level,
// must go to stderr.
func TestE2EStdioLogsStayOffStdout(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	env := h.serverEnv(t, "PROBING_LOGLEVEL=debug", "PROBING_ALLOWED_FILE_DIRS="+h.fr(""))

	t.Run("python", func(t *testing.T) {
		t.Parallel()
		out := h.stdio(t, env, "stdio-list",
			e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}})...)
		out.mustOK(t)
		checkAnalyzeTool(t, out)
		checkMissingRank(t, out.call(t, 0))
		// client.py passes the server's stderr through: the logs are there.
		if !strings.Contains(out.stderr, "msg=starting") {
			t.Errorf("no server log on stderr:\n%s", lastLines(out.stderr, 20))
		}
	})

	// Without the SDK in between: every byte on stdout must be JSON-RPC.
	t.Run("raw", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, h.bin, "serve")
		cmd.Env = env
		cmd.WaitDelay = 5 * time.Second
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waited := false
		t.Cleanup(func() { // on an early failure: kill, and reap
			if !waited {
				cancel()
				_ = cmd.Wait()
			}
		})
		lines := make(chan string)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			sc.Buffer(nil, 16<<20)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		requests := []string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"0"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"analyze_flight_recorder","arguments":{"paths":[` + strconv.Quote(h.fr("missing_rank")) + `]}}}`,
			`{"jsonrpc":"2.0","id":4,"method":"prompts/get","params":{"name":"diagnose_hang","arguments":{"dumps":"/x"}}}`,
		}
		for _, r := range requests {
			if _, err := io.WriteString(stdin, r+"\n"); err != nil {
				t.Fatal(err)
			}
		}
		checkLine := func(line string) (id float64) {
			var msg struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      float64         `json:"id"`
				Error   json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal([]byte(line), &msg); err != nil || msg.JSONRPC != "2.0" {
				t.Errorf("stdout line is not JSON-RPC: %.300q", line)
				return 0
			}
			if msg.Error != nil {
				t.Errorf("request %v failed: %s", msg.ID, msg.Error)
			}
			return msg.ID
		}
		// Close stdin only once every answer is in: the server may drop
		// requests still pending at EOF.
		pending := map[float64]bool{1: true, 2: true, 3: true, 4: true}
		timeout := time.After(30 * time.Second)
		for len(pending) > 0 {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("stdout closed with requests %v unanswered; stderr:\n%s", pending, lastLines(stderr.String(), 20))
				}
				delete(pending, checkLine(line))
			case <-timeout:
				t.Fatalf("requests %v unanswered after 30s", pending)
			}
		}
		_ = stdin.Close()
		for line := range lines { // until the server closes stdout
			checkLine(line)
		}
		waited = true
		if err := cmd.Wait(); err != nil {
			t.Errorf("server exit after stdin EOF: %v; stderr:\n%s", err, lastLines(stderr.String(), 20))
		}
		if !strings.Contains(stderr.String(), "msg=starting") {
			t.Errorf("no log on stderr:\n%s", stderr.String())
		}
	})
}
