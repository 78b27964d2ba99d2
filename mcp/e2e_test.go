package mcp_test

// End-to-end tests: the built probing-mcp binary, driven by the official
// Python MCP SDK (testdata/e2e/client.py) over stdio and Streamable HTTP.
// client.py only reports what it observed, as JSON; every assertion is here.
//
// The Python interpreter is $PROBING_E2E_PYTHON, else <repo>/.venv/bin/python,
// else python3 on PATH; it needs the pip package pinned in
// testdata/e2e/requirements.txt. Without it the tests skip, unless
// PROBING_E2E_REQUIRED=1 (as in CI), where they fail.
//
//	python3 -m venv .venv && .venv/bin/pip install -r mcp/testdata/e2e/requirements.txt
//	PROBING_E2E_REQUIRED=1 go test -run E2E ./mcp/

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/testpython"
	"github.com/probing-mcp/probing-mcp/tools"
)

const (
	e2eClientRel       = "mcp/testdata/e2e/client.py"
	e2eRequirementsRel = "mcp/testdata/e2e/requirements.txt"
	e2eFRRel           = "testdata/fr/real"

	e2eBuildTimeout  = 5 * time.Minute
	e2eClientTimeout = 2 * time.Minute // one client.py run (it bounds itself at 90s)
	e2eStartTimeout  = 30 * time.Second
	e2eStopTimeout   = 15 * time.Second
)

// e2eHarness is what every end-to-end test needs, set up once per test binary.
type e2eHarness struct {
	root       string // repository root
	bin        string // the built probing-mcp
	python     string
	mcpVersion string // of the Python SDK
	client     string // client.py
}

var (
	e2eOnce    sync.Once
	e2eH       *e2eHarness
	e2eSkip    string // why the Python side is unavailable
	e2eErr     error  // a setup failure no environment excuses (the build)
	e2eTempDir string // holds the binary; removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	if e2eTempDir != "" {
		_ = os.RemoveAll(e2eTempDir)
	}
	os.Exit(code)
}

func e2eRequired() bool { return testpython.Required() }

// e2eSetup returns the harness, skipping the test (or failing it when
// PROBING_E2E_REQUIRED is set) if the Python SDK is unavailable.
func e2eSetup(t *testing.T) *e2eHarness {
	t.Helper()
	e2eOnce.Do(e2eInit)
	if e2eErr != nil {
		t.Fatalf("end-to-end setup: %v", e2eErr)
	}
	if e2eSkip != "" {
		if e2eRequired() {
			t.Fatalf("PROBING_E2E_REQUIRED is set, but %s", e2eSkip)
		}
		t.Skipf("skipping end-to-end test: %s. To run it: python3 -m venv .venv && .venv/bin/pip install -r %s "+
			"(or set PROBING_E2E_PYTHON to an interpreter that has it)", e2eSkip, e2eRequirementsRel)
	}
	return e2eH
}

func e2eInit() {
	wd, err := os.Getwd()
	if err != nil {
		e2eErr = err
		return
	}
	root := filepath.Dir(wd)
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		e2eErr = fmt.Errorf("no go.mod in %s, the parent of the test directory: %v", root, err)
		return
	}
	h := &e2eHarness{root: root, client: filepath.Join(root, filepath.FromSlash(e2eClientRel))}
	if h.python, h.mcpVersion, e2eSkip = e2eFindPython(root); e2eSkip != "" {
		return // no point building a binary nothing can drive
	}
	dir, err := os.MkdirTemp("", "probing-mcp-e2e-")
	if err != nil {
		e2eErr = err
		return
	}
	e2eTempDir = dir
	h.bin = filepath.Join(dir, "probing-mcp")
	ctx, cancel := context.WithTimeout(context.Background(), e2eBuildTimeout)
	defer cancel()
	// go test puts its own go first on PATH; the build cache is shared.
	cmd := exec.CommandContext(ctx, "go", "build", "-o", h.bin, "./cmd/probing-mcp")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		e2eErr = fmt.Errorf("go build ./cmd/probing-mcp: %v\n%s", err, out)
		return
	}
	e2eH = h
}

// e2eFindPython picks the interpreter and checks that it has the SDK; problem
// says why not.
func e2eFindPython(root string) (python, version, problem string) {
	const probe = "import importlib.metadata as md\n" +
		"import anyio, httpx2\n" +
		"from mcp import ClientSession, StdioServerParameters\n" +
		"from mcp.client.stdio import stdio_client\n" +
		"from mcp.client.streamable_http import streamable_http_client\n" +
		"print(md.version('mcp'))\n"
	path, out, problem := testpython.Find(root, probe, e2eEnv())
	if problem != "" {
		return path, "", problem
	}
	version = strings.TrimSpace(string(out))
	pin := e2ePinnedVersion(root)
	switch {
	case !strings.HasPrefix(version, "2."):
		problem = fmt.Sprintf("%s has mcp %s; client.py needs the 2.x API (%s pins %s)", path, version, e2eRequirementsRel, pin)
	case pin != "" && version != pin && e2eRequired():
		problem = fmt.Sprintf("%s has mcp %s, but %s pins %s", path, version, e2eRequirementsRel, pin)
	}
	return path, version, problem
}

// e2ePinnedVersion reads the mcp==X pin from requirements.txt.
func e2ePinnedVersion(root string) string {
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(e2eRequirementsRel)))
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "mcp=="); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func e2eExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func lastLines(s string, n int) string { return testpython.LastLines(s, n) }

// e2eEnv is this process's environment without any PROBING_* variable (so a
// developer's shell cannot change what is tested), plus kv ("K=V"), which
// win.
func e2eEnv(kv ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PROBING_") {
			env = append(env, e)
		}
	}
	env = append(env, "PYTHONDONTWRITEBYTECODE=1", "PYTHONIOENCODING=utf-8")
	return append(env, kv...)
}

// serverEnv is e2eEnv with a fresh PROBING_DATA_DIR, so that nothing lands
// in /dev/shm, ahead of kv.
func (h *e2eHarness) serverEnv(t *testing.T, kv ...string) []string {
	return e2eEnv(append([]string{"PROBING_DATA_DIR=" + t.TempDir()}, kv...)...)
}

func (h *e2eHarness) fr(name string) string {
	return filepath.Join(h.root, filepath.FromSlash(e2eFRRel), name)
}

// --- what client.py reports ---

type e2eOut struct {
	Scenario        string            `json:"scenario"`
	ClientPID       int               `json:"client_pid"`
	ProtocolVersion string            `json:"protocol_version"`
	ServerInfo      map[string]string `json:"server_info"`
	Instructions    string            `json:"instructions"`
	Capabilities    map[string]any    `json:"capabilities"`
	Tools           []e2eTool         `json:"tools"`
	Prompts         []e2ePromptInfo   `json:"prompts"`
	Calls           []e2eCall         `json:"calls"`
	Prompt          *e2ePrompt        `json:"prompt"`
	Resources       []e2eResource     `json:"resources"`
	Templates       []e2eResource     `json:"resource_templates"`
	Reads           []e2eRead         `json:"reads"`
	HTTPStatuses    []int             `json:"http_statuses"`
	StreamErrors    []e2eError        `json:"stream_errors"`
	Error           *e2eError         `json:"error"`
	Traceback       string            `json:"traceback"`

	stderr string // client.py's stderr, which has a stdio server's logs
}

type e2eTool struct {
	Name         string         `json:"name"`
	Description  string         `json:"description"`
	InputSchema  map[string]any `json:"inputSchema"`
	OutputSchema map[string]any `json:"outputSchema"`
	Annotations  *e2eHints      `json:"annotations"`
}

type e2eHints struct {
	ReadOnly    *bool `json:"readOnlyHint"`
	Destructive *bool `json:"destructiveHint"`
	Idempotent  *bool `json:"idempotentHint"`
	OpenWorld   *bool `json:"openWorldHint"`
}

type e2ePromptInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Arguments   []struct {
		Name     string `json:"name"`
		Required bool   `json:"required"`
	} `json:"arguments"`
}

type e2eCall struct {
	Tool              string          `json:"tool"`
	IsError           bool            `json:"is_error"`
	Text              string          `json:"text"`
	StructuredContent json.RawMessage `json:"structured_content"`
	Error             *e2eError       `json:"error"`
}

type e2ePrompt struct {
	Name        string    `json:"name"`
	Description string    `json:"description"`
	Text        string    `json:"text"`
	Error       *e2eError `json:"error"`
}

type e2eResource struct {
	URI         string `json:"uri"`
	URITemplate string `json:"uriTemplate"`
	Name        string `json:"name"`
	Title       string `json:"title"`
	MIMEType    string `json:"mimeType"`
}

type e2eRead struct {
	URI      string `json:"uri"`
	Contents []struct {
		URI      string `json:"uri"`
		MIMEType string `json:"mimeType"`
		Text     string `json:"text"`
	} `json:"contents"`
	Error *e2eError `json:"error"`
}

type e2eError struct {
	Type    string `json:"error_type"`
	Message string `json:"message"`
	Code    *int   `json:"code"`
}

func (e *e2eError) String() string {
	if e == nil {
		return "<nil>"
	}
	if e.Code != nil {
		return fmt.Sprintf("%s(%d): %s", e.Type, *e.Code, e.Message)
	}
	return e.Type + ": " + e.Message
}

// mustOK fails the test if the session as a whole failed, or if the
// transport met anything that was not a protocol message.
func (o *e2eOut) mustOK(t *testing.T) {
	t.Helper()
	if o.Error != nil {
		t.Fatalf("%s failed: %s\n%s\nclient stderr:\n%s", o.Scenario, o.Error, o.Traceback, lastLines(o.stderr, 40))
	}
	for _, e := range o.StreamErrors {
		t.Errorf("%s: transport fault (stray output on the protocol stream?): %s", o.Scenario, &e)
	}
}

// summary describes the calls briefly, for failure messages.
func (o *e2eOut) summary() string {
	var b strings.Builder
	for _, c := range o.Calls {
		fmt.Fprintf(&b, "\n  %s: error=%s is_error=%v text=%.120q", c.Tool, c.Error, c.IsError, c.Text)
	}
	return b.String()
}

func (o *e2eOut) tool(name string) *e2eTool {
	for i := range o.Tools {
		if o.Tools[i].Name == name {
			return &o.Tools[i]
		}
	}
	return nil
}

func (o *e2eOut) toolNames() []string {
	var names []string
	for _, tl := range o.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// call returns the i-th call's report, failing the test if it is missing.
func (o *e2eOut) call(t *testing.T, i int) e2eCall {
	t.Helper()
	if i >= len(o.Calls) {
		t.Fatalf("client reported %d call(s), want at least %d", len(o.Calls), i+1)
	}
	return o.Calls[i]
}

// ok fails the test unless the call succeeded, and returns its structured
// content.
func (c e2eCall) ok(t *testing.T) json.RawMessage {
	t.Helper()
	if c.Error != nil {
		t.Fatalf("%s: protocol error %s", c.Tool, c.Error)
	}
	if c.IsError {
		t.Fatalf("%s: is_error result: %s", c.Tool, c.Text)
	}
	if len(c.StructuredContent) == 0 || string(c.StructuredContent) == "null" {
		t.Fatalf("%s: no structured content; text: %s", c.Tool, c.Text)
	}
	return c.StructuredContent
}

// toolError fails the test unless the call gave an is_error result, and
// returns its text.
func (c e2eCall) toolError(t *testing.T) string {
	t.Helper()
	if c.Error != nil {
		t.Fatalf("%s: protocol error %s, want an is_error result", c.Tool, c.Error)
	}
	if !c.IsError {
		t.Fatalf("%s: succeeded, want an is_error result; text: %.300s", c.Tool, c.Text)
	}
	return c.Text
}

func e2eArgs(name string, args any) []string {
	b, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return []string{"--call", name, string(b)}
}

// run runs client.py with args in env and decodes its report.
func (h *e2eHarness) run(t *testing.T, env []string, args ...string) *e2eOut {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eClientTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.python, append([]string{h.client}, args...)...)
	cmd.Dir = h.root
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A stdio server is client.py's child; killing client.py closes the
	// server's stdin, on which it exits.
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("client.py %s: no answer in %v; killed\nstderr:\n%s", strings.Join(args, " "), e2eClientTimeout, lastLines(stderr.String(), 40))
	}
	if err != nil {
		t.Fatalf("client.py %s: %v\nstderr:\n%s", strings.Join(args, " "), err, lastLines(stderr.String(), 40))
	}
	out := &e2eOut{stderr: stderr.String()}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("client.py %s: bad report: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), lastLines(stderr.String(), 40))
	}
	t.Logf("client.py %s (%s): %v", args[0], h.mcpVersion, time.Since(start).Round(time.Millisecond))
	return out
}

func (h *e2eHarness) stdio(t *testing.T, env []string, scenario string, args ...string) *e2eOut {
	t.Helper()
	return h.run(t, env, append([]string{scenario, "--server", h.bin}, args...)...)
}

func (h *e2eHarness) http(t *testing.T, url, scenario string, args ...string) *e2eOut {
	t.Helper()
	// The client's environment does not matter to an HTTP server.
	return h.run(t, e2eEnv(), append([]string{scenario, "--url", url}, args...)...)
}

// --- assertions shared by stdio and HTTP ---

func checkHints(t *testing.T, tl *e2eTool, readOnly, destructive, idempotent, openWorld bool) {
	t.Helper()
	if tl.Annotations == nil {
		t.Fatalf("%s: no annotations", tl.Name)
	}
	a := tl.Annotations
	for _, h := range []struct {
		name string
		got  *bool
		want bool
	}{
		{"readOnlyHint", a.ReadOnly, readOnly},
		{"destructiveHint", a.Destructive, destructive},
		{"idempotentHint", a.Idempotent, idempotent},
		{"openWorldHint", a.OpenWorld, openWorld},
	} {
		switch {
		case h.got == nil:
			t.Errorf("%s: %s is not set (a client would assume the worst default)", tl.Name, h.name)
		case *h.got != h.want:
			t.Errorf("%s: %s = %v, want %v", tl.Name, h.name, *h.got, h.want)
		}
	}
}

func checkSchemas(t *testing.T, tl *e2eTool, wantInput, wantOutput []string) {
	t.Helper()
	for _, s := range []struct {
		kind   string
		schema map[string]any
		props  []string
	}{{"input", tl.InputSchema, wantInput}, {"output", tl.OutputSchema, wantOutput}} {
		if s.kind == "output" && wantOutput == nil {
			// Listed only with PROBING_MCP_OUTPUT_SCHEMAS=1 (the token budget).
			if len(s.schema) != 0 {
				t.Errorf("%s: output schema listed by default", tl.Name)
			}
			continue
		}
		if len(s.schema) == 0 {
			t.Errorf("%s: empty %s schema", tl.Name, s.kind)
			continue
		}
		if s.schema["type"] != "object" {
			t.Errorf("%s: %s schema type %v, want object", tl.Name, s.kind, s.schema["type"])
		}
		props, _ := s.schema["properties"].(map[string]any)
		for _, p := range s.props {
			if _, ok := props[p]; !ok {
				t.Errorf("%s: %s schema has no property %q", tl.Name, s.kind, p)
			}
		}
	}
}

// checkAnalyzeTool checks the read-only tool as every configuration lists it.
func checkAnalyzeTool(t *testing.T, out *e2eOut) {
	t.Helper()
	tl := out.tool("analyze_flight_recorder")
	if tl == nil {
		t.Fatalf("analyze_flight_recorder not listed; tools: %v", out.toolNames())
	}
	checkHints(t, tl, true, false, true, false)
	checkSchemas(t, tl, []string{"paths", "detail"}, nil)
	if req, _ := tl.InputSchema["required"].([]any); !slices.Contains(req, any("paths")) {
		t.Errorf("analyze_flight_recorder: input schema does not require paths: %v", tl.InputSchema["required"])
	}
	if tl.Description == "" {
		t.Error("analyze_flight_recorder: no description")
	}
}

// checkMissingRank checks the verdict on testdata/fr/real/missing_rank: rank
// 2 never joined collective #5 of the default group.
func checkMissingRank(t *testing.T, c e2eCall) {
	t.Helper()
	var res tools.AnalyzeFlightRecorderResult
	if err := json.Unmarshal(c.ok(t), &res); err != nil {
		t.Fatalf("structured content is not an AnalyzeFlightRecorderResult: %v", err)
	}
	if res.Verdict != "MISSING_RANKS" {
		t.Errorf("verdict %q, want MISSING_RANKS; summary: %s", res.Verdict, res.Summary)
	}
	i := slices.IndexFunc(res.ProcessGroups, func(g tools.GroupView) bool { return g.PGName == "0" })
	if i < 0 {
		t.Fatalf("no process group \"0\" in %+v", res.ProcessGroups)
	}
	g := res.ProcessGroups[i]
	if g.Verdict != "MISSING_RANKS" || g.CulpritRanks != "2" || g.CollectiveSeqID != 5 {
		t.Errorf("pg 0: verdict %q culprit_ranks %q collective_seq_id %d, want MISSING_RANKS, \"2\", 5",
			g.Verdict, g.CulpritRanks, g.CollectiveSeqID)
	}
	// Clients that ignore structured content read the text: the result's
	// ModelText, the verdict first, not its JSON.
	if !strings.HasPrefix(c.Text, res.Verdict+": ") || !strings.Contains(c.Text, "culprits 2") {
		t.Errorf("text content is not the result's rendering: %.300s", c.Text)
	}
}

func checkHealthy(t *testing.T, c e2eCall) {
	t.Helper()
	var res tools.AnalyzeFlightRecorderResult
	if err := json.Unmarshal(c.ok(t), &res); err != nil {
		t.Fatalf("structured content is not an AnalyzeFlightRecorderResult: %v", err)
	}
	if res.Verdict != "OK" || res.ProblemGroups != 0 {
		t.Errorf("verdict %q with %d problem group(s), want OK and 0; summary: %s", res.Verdict, res.ProblemGroups, res.Summary)
	}
}

// --- stdio ---

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
		data := t.TempDir() // no PROBING_MCP_AUDIT_LOG: <data dir>/mcp-audit.jsonl
		env := e2eEnv("PROBING_DATA_DIR="+data, "PROBING_MCP_ALLOW_WRITE= TRUE ")
		out := h.stdio(t, env, "stdio-list", e2eArgs("set_config", debug)...)
		out.mustOK(t)
		checkSetConfigListed(t, out)
		checkSetConfigOK(t, out.call(t, 0), "info", "debug")
		checkAuditPair(t, readAudit(t, filepath.Join(data, "mcp-audit.jsonl")), debug, "stdio:", "ok")
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

// --- Streamable HTTP ---

// e2eHTTPServer is "probing-mcp serve --http ADDR", running until the test ends.
type e2eHTTPServer struct {
	url  string // http://127.0.0.1:PORT/mcp
	base string // http://127.0.0.1:PORT
	logs *e2eLogSink
}

// e2eLogSink collects the server's stderr and reports the URL it logs once
// it listens.
type e2eLogSink struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	listen chan [2]string // addr, url
	sent   bool
}

// The line ServeHTTPListener logs, e.g.
// msg="MCP HTTP server listening" addr=127.0.0.1:41234 url=http://127.0.0.1:41234/mcp auth=false
var e2eListenRE = regexp.MustCompile(`msg="MCP HTTP server listening" .*\baddr=("(?:[^"\\]|\\.)*"|\S+) .*\burl=("(?:[^"\\]|\\.)*"|\S+)`)

func (s *e2eLogSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	if !s.sent {
		for line := range strings.Lines(s.buf.String()) {
			if m := e2eListenRE.FindStringSubmatch(line); m != nil && strings.HasSuffix(line, "\n") {
				s.sent = true
				s.listen <- [2]string{unquoteLogValue(m[1]), unquoteLogValue(m[2])}
				break
			}
		}
	}
	return len(p), nil
}

func (s *e2eLogSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func unquoteLogValue(v string) string {
	if u, err := strconv.Unquote(v); err == nil {
		return u
	}
	return v
}

func (h *e2eHarness) startHTTP(t *testing.T, env []string) *e2eHTTPServer {
	t.Helper()
	cmd := exec.Command(h.bin, "serve", "--http", "127.0.0.1:0")
	cmd.Env = env
	cmd.Dir = h.root
	logs := &e2eLogSink{listen: make(chan [2]string, 1)}
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			// The server must shut down cleanly on SIGTERM.
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
				if waitErr != nil {
					t.Errorf("server exit after SIGTERM: %v", waitErr)
				}
			case <-time.After(e2eStopTimeout):
				_ = cmd.Process.Kill()
				<-exited
				t.Errorf("server still running %v after SIGTERM; killed", e2eStopTimeout)
			}
		}
		if stdout.Len() > 0 {
			t.Errorf("HTTP server wrote to stdout: %.500q", stdout.String())
		}
		if t.Failed() {
			t.Logf("server logs:\n%s", lastLines(logs.String(), 60))
		}
	})
	select {
	case al := <-logs.listen:
		addr, url := al[0], al[1]
		if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") || url != "http://"+addr+"/mcp" {
			t.Fatalf("listening line gives addr=%s url=%s, want a bound 127.0.0.1 port and http://ADDR/mcp", addr, url)
		}
		return &e2eHTTPServer{url: url, base: "http://" + addr, logs: logs}
	case <-exited:
		stopped = true
		t.Fatalf("server exited before listening: %v\n%s", waitErr, logs.String())
	case <-time.After(e2eStartTimeout):
		t.Fatalf("server did not log its address within %v:\n%s", e2eStartTimeout, logs.String())
	}
	return nil
}

var e2eHTTPClient = &http.Client{Timeout: 10 * time.Second}

func httpDo(t *testing.T, method, url, authorization string, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	resp, err := e2eHTTPClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func checkHealth(t *testing.T, srv *e2eHTTPServer) {
	t.Helper()
	resp, body := httpDo(t, http.MethodGet, srv.base+"/health", "", "")
	var health struct{ Status string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &health) != nil || health.Status != "ok" {
		t.Errorf("GET /health without credentials: %d %s, want 200 {\"status\":\"ok\"}", resp.StatusCode, body)
	}
}

func checkNoHTTPFailures(t *testing.T, out *e2eOut) {
	t.Helper()
	if len(out.HTTPStatuses) == 0 {
		t.Error("client recorded no HTTP responses")
	}
	for _, s := range out.HTTPStatuses {
		if s >= 400 {
			t.Errorf("HTTP statuses %v include a failure", out.HTTPStatuses)
			break
		}
	}
}

func TestE2EHTTPNoAuth(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	srv := h.startHTTP(t, h.serverEnv(t, "PROBING_ALLOWED_FILE_DIRS="+h.fr("")))
	checkHealth(t, srv)

	out := h.http(t, srv.url, "http-list",
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}})...)
	out.mustOK(t)
	checkNoHTTPFailures(t, out)
	checkAnalyzeTool(t, out)
	if out.tool("set_config") != nil {
		t.Errorf("set_config is listed although writes are off")
	}
	if !strings.Contains(out.Instructions, "analyze_flight_recorder") {
		t.Errorf("instructions do not mention analyze_flight_recorder:\n%s", out.Instructions)
	}
	checkMissingRank(t, out.call(t, 0))

	out = h.http(t, srv.url, "http-call",
		e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("healthy")}})...)
	out.mustOK(t)
	checkHealthy(t, out.call(t, 0))
}

func TestE2EHTTPAuth(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	const token = "s3cret"
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	srv := h.startHTTP(t, h.serverEnv(t, "PROBING_AUTH_TOKEN="+token, "PROBING_ALLOWED_FILE_DIRS="+h.fr(""),
		"PROBING_MCP_ALLOW_WRITE=1", "PROBING_MCP_AUDIT_LOG="+audit))
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	debug := map[string]string{"key": "mcp.loglevel", "value": "debug"}
	info := map[string]string{"key": "probing.mcp.loglevel", "value": "info"}

	t.Run("health_is_public", func(t *testing.T) { checkHealth(t, srv) })
	t.Run("raw_401", func(t *testing.T) {
		init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"0"}}}`
		resp, body := httpDo(t, http.MethodPost, srv.url, "", init)
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic realm=") {
			t.Errorf("POST /mcp without credentials: %d, WWW-Authenticate %q, want 401 and a Basic challenge; body %s",
				resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
		}
		if resp, body = httpDo(t, http.MethodPost, srv.url, "Bearer "+token, init); resp.StatusCode != http.StatusOK {
			t.Errorf("POST /mcp with the bearer token: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("clients", func(t *testing.T) {
		t.Run("bearer", func(t *testing.T) {
			t.Parallel()
			out := h.http(t, srv.url, "http-list", slices.Concat([]string{"--header", "Authorization: Bearer " + token},
				e2eArgs("set_config", debug),
				e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}}))...)
			out.mustOK(t)
			checkNoHTTPFailures(t, out)
			checkSetConfigListed(t, out)
			if c := out.call(t, 0); c.Error != nil || c.IsError {
				t.Errorf("set_config over HTTP: %s %s", c.Error, c.Text)
			}
			checkMissingRank(t, out.call(t, 1))
		})
		t.Run("basic", func(t *testing.T) {
			t.Parallel()
			out := h.http(t, srv.url, "http-call", slices.Concat([]string{"--header", "Authorization: " + basic("admin", token)},
				e2eArgs("set_config", info),
				e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("healthy")}}))...)
			out.mustOK(t)
			checkNoHTTPFailures(t, out)
			if c := out.call(t, 0); c.Error != nil || c.IsError {
				t.Errorf("set_config over HTTP: %s %s", c.Error, c.Text)
			}
			checkHealthy(t, out.call(t, 1))
		})
		for name, header := range map[string]string{
			"no_credentials": "",
			"wrong_bearer":   "Authorization: Bearer s3cret-not",
			"wrong_user":     "Authorization: " + basic("root", token),
			"wrong_password": "Authorization: " + basic("admin", "guess"),
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				args := e2eArgs("analyze_flight_recorder", map[string]any{"paths": []string{h.fr("missing_rank")}})
				if header != "" {
					args = append([]string{"--header", header}, args...)
				}
				out := h.http(t, srv.url, "http-call", args...)
				if out.Error == nil {
					t.Fatalf("the session succeeded; calls:%s", out.summary())
				}
				if len(out.Calls) > 0 {
					t.Errorf("a tool was called:%s", out.summary())
				}
				if !slices.Contains(out.HTTPStatuses, http.StatusUnauthorized) || slices.ContainsFunc(out.HTTPStatuses, func(s int) bool { return s < 300 }) {
					t.Errorf("HTTP statuses %v, want 401 and no success", out.HTTPStatuses)
				}
			})
		}
	})

	// Both authenticated clients called set_config: two audited calls, each
	// naming how its caller authenticated.
	recs := readAudit(t, audit)
	if len(recs) != 4 {
		t.Fatalf("%d audit lines, want 4 (two calls): %+v", len(recs), recs)
	}
	byID := map[string][]e2eAuditRecord{}
	for _, r := range recs {
		byID[r.ID] = append(byID[r.ID], r)
	}
	for _, pair := range byID {
		switch {
		case len(pair) != 2:
			t.Errorf("audit id %s has %d lines", pair[0].ID, len(pair))
		case strings.HasPrefix(pair[0].Caller, "http:bearer@127.0.0.1:"):
			checkAuditPair(t, pair, debug, "http:bearer@127.0.0.1:", "ok")
		case strings.HasPrefix(pair[0].Caller, "http:basic:admin@127.0.0.1:"):
			checkAuditPair(t, pair, info, "http:basic:admin@127.0.0.1:", "ok")
		default:
			t.Errorf("audit caller %q is neither the bearer nor the basic client", pair[0].Caller)
		}
	}
}

// Without a token the server must refuse to listen beyond loopback.
func TestE2EHTTPRefusesPublicBindWithoutToken(t *testing.T) {
	t.Parallel()
	h := e2eSetup(t)
	for _, addr := range []string{"0.0.0.0:0", ":0"} {
		ctx, cancel := context.WithTimeout(context.Background(), e2eStartTimeout)
		cmd := exec.CommandContext(ctx, h.bin, "serve", "--http", addr)
		cmd.Env = h.serverEnv(t)
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Errorf("serve --http %s without a token is still running after %v (it listens?)\n%s", addr, e2eStartTimeout, out)
			continue
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Errorf("serve --http %s without a token: err %v, want a non-zero exit\n%s", addr, err, out)
		}
		if !strings.Contains(string(out), "PROBING_AUTH_TOKEN") {
			t.Errorf("serve --http %s: the refusal does not mention PROBING_AUTH_TOKEN:\n%s", addr, out)
		}
		if strings.Contains(string(out), "listening") {
			t.Errorf("serve --http %s: listened before refusing:\n%s", addr, out)
		}
	}
}
