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
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	Meta              map[string]any  `json:"meta"`
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
