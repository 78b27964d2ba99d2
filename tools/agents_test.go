package tools

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"

	"github.com/probing-mcp/probing-mcp/agent"
)

// liveAgent starts a Python process with our agent active (as the installed
// .pth would activate it) in its own data dir and control root, and
// returns the Env that finds it once its socket answers.
func liveAgent(t *testing.T, env ...string) (*Env, int) {
	t.Helper()
	py := os.Getenv("PROBING_TEST_PYTHON")
	if py == "" {
		py = "python3"
	}
	if _, err := exec.LookPath(py); err != nil {
		t.Skipf("no %s on PATH: these tests need a Python 3.9+ interpreter (set PROBING_TEST_PYTHON)", py)
	}
	// A Unix socket path must stay under 108 bytes: the control root is
	// under /tmp, not t.TempDir().
	ctrl, err := os.MkdirTemp("/tmp", "pmcpt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ctrl) })
	opt := agent.Options{DataDir: filepath.Join(t.TempDir(), "data"), CtrlRoot: ctrl}
	site := filepath.Join(t.TempDir(), "site")
	if err := agent.ExtractTo(site, "test"); err != nil {
		t.Fatal(err)
	}
	code := "import site, sys\nsite.addsitedir(sys.argv[1])\nsecret = 41\nprint('READY', flush=True)\nsys.stdin.read()\n"
	cmd := exec.Command(py, "-c", code, site)
	cmd.Env = append(os.Environ(), "PROBING=1", "PROBING_DATA_DIR="+opt.DataDir, "PROBING_CTRL_ROOT="+ctrl, "PYTHONUNBUFFERED=1")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
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
	t.Cleanup(func() { stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "READY" {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the Python process exited before READY")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the Python process did not print READY within 30 s")
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		all, err := agent.Discover(opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range all {
			if a.PID != pid || !a.Alive || a.Identity == nil {
				continue
			}
			if c, err := agent.NewClient(a); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, err = c.Do(ctx, "GET", "/health", nil, "")
				cancel()
				if err == nil {
					return &Env{Agents: opt}, pid
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the agent of pid %d did not come up", pid)
	return nil, 0
}

// callEval runs the eval_python handler as the server would; it returns
// the result, or the error text of an isError result.
func callEval(t *testing.T, env *Env, args map[string]any) (EvalPythonResult, string) {
	t.Helper()
	res, err := evalPython(env).Handler(context.Background(), mcplib.CallToolRequest{
		Params: mcplib.CallToolParams{Name: "eval_python", Arguments: args}})
	if err != nil {
		t.Fatalf("eval_python: a server fault: %v", err)
	}
	if res.IsError {
		var text []string
		for _, c := range res.Content {
			if tc, ok := mcplib.AsTextContent(c); ok {
				text = append(text, tc.Text)
			}
		}
		return EvalPythonResult{}, strings.Join(text, "\n")
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var r EvalPythonResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return r, ""
}

// With the server's write switch on (this tool is registered only then), a
// job needs nothing more: no PROBING_ALLOW_EVAL.
func TestEvalPythonNeedsNoJobOptIn(t *testing.T) {
	env, pid := liveAgent(t, "PROBING_ALLOW_EVAL=")
	r, msg := callEval(t, env, map[string]any{"pid": pid, "code": "print(secret + 1)"})
	if msg != "" || r.Status != "ok" || strings.TrimSpace(r.Output) != "42" || r.PID != pid {
		t.Fatalf("eval_python in a job without PROBING_ALLOW_EVAL: %+v %q", r, msg)
	}
	desc := evalPython(env).Tool.Description
	if strings.Contains(desc, "PROBING_ALLOW_EVAL=1") || !strings.Contains(desc, "PROBING_ALLOW_EVAL=0") {
		t.Errorf("the description must name the opt-out, not an opt-in: %s", desc)
	}
}

func TestEvalPythonJobOptOut(t *testing.T) {
	env, pid := liveAgent(t, "PROBING_ALLOW_EVAL=off")
	_, msg := callEval(t, env, map[string]any{"pid": pid, "code": "1+1"})
	if !strings.Contains(msg, "opted out") || !strings.Contains(msg, "PROBING_ALLOW_EVAL") {
		t.Fatalf("eval_python in a job that opted out: %q", msg)
	}
}

func TestEvalPythonArguments(t *testing.T) {
	env := &Env{Agents: agent.Options{DataDir: t.TempDir(), CtrlRoot: t.TempDir()}}
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"pid": 1, "code": "  "}, "code is empty"},
		{map[string]any{"pid": 1, "code": "1", "timeout": 301}, "timeout: 301 is out of range: want 0..300"},
		{map[string]any{"pid": 1, "code": "1", "timeout": -1}, "timeout: -1 is out of range: want 0..300"},
		{map[string]any{"pid": 1}, "code is required"},
		{map[string]any{"pid": 1, "code": strings.Repeat("#", agent.MaxEvalCode+1)}, "at most 4194304"},
	} {
		if _, msg := callEval(t, env, c.args); !strings.Contains(msg, c.want) {
			t.Errorf("%.60v: %q, want %q", c.args, msg, c.want)
		}
	}
}
