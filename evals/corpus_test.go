package evals

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/testpython"
)

// The scored corpus, torch-free part: evals/score.py runs every case of
// evals/jobs/socket_job.py (real rank processes with the agent, one fault
// each) against the built binary's diagnose_hang, called through the
// official MCP Python SDK, and exits 1 when a case's top hypothesis has
// the wrong culprits, category, state or frame.
//
// The interpreter is found as the end-to-end tests find theirs:
// $PROBING_E2E_PYTHON, else <repo>/.venv/bin/python, else python3; it
// needs the mcp package (mcp/testdata/e2e/requirements.txt). Without it the
// test skips, unless PROBING_E2E_REQUIRED=1 (make test, CI), where it fails.

const (
	corpusBuildTimeout = 5 * time.Minute
	// The whole run: 20 cases, two at a time, take about a minute on 2
	// busy cores; each case bounds itself (its launcher, its call).
	corpusRunTimeout = 15 * time.Minute
)

func corpusRequired() bool { return testpython.Required() }

// corpusPython picks the interpreter and checks it has the MCP SDK;
// problem says why not.
func corpusPython(root string) (python, problem string) {
	path, _, problem := testpython.Find(root, "import anyio\nfrom mcp import ClientSession, StdioServerParameters\nfrom mcp.client.stdio import stdio_client\n", nil)
	return path, problem
}

// scoreRun is one run of score.py against a freshly built binary, with
// its stdout and what it wrote to --json.
type scoreRun struct {
	root           string
	stdout, stderr bytes.Buffer
	err            error // score.py's exit
	json           []byte
}

// runScore builds the binary and runs score.py with args (--bin and
// --json added) within timeout; it skips (or, when the corpus is
// required, fails) without an interpreter that has the MCP SDK.
func runScore(t *testing.T, what string, timeout time.Duration, args ...string) *scoreRun {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	r := &scoreRun{root: filepath.Dir(wd)}
	python, problem := corpusPython(r.root)
	if problem != "" {
		if corpusRequired() {
			t.Fatalf("PROBING_E2E_REQUIRED is set, but %s", problem)
		}
		t.Skipf("skipping %s: %s. To run it: python3 -m venv .venv && .venv/bin/pip install -r mcp/testdata/e2e/requirements.txt", what, problem)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "probing-mcp")
	bctx, bcancel := context.WithTimeout(context.Background(), corpusBuildTimeout)
	defer bcancel()
	build := exec.CommandContext(bctx, "go", "build", "-o", bin, "./cmd/probing-mcp")
	build.Dir = r.root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/probing-mcp: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := filepath.Join(dir, "result.json")
	cmd := exec.CommandContext(ctx, python, append(append([]string{filepath.Join(r.root, "evals", "score.py")}, args...), "--bin", bin, "--json", out)...)
	cmd.Dir = r.root
	// score.py stops its launchers on SIGTERM; the context's kill is the last resort.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	cmd.Stdout, cmd.Stderr = &r.stdout, &r.stderr
	r.err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("score.py %s did not finish within %s\n%s", strings.Join(args, " "), timeout, r.stderr.String())
	}
	if r.json, err = os.ReadFile(out); err != nil {
		t.Fatalf("score.py %s wrote no results (%v): %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.err, err, r.stdout.String(), r.stderr.String())
	}
	return r
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// corpusResult is the part of score.py's --json this test reads.
type corpusResult struct {
	Totals struct {
		Right   [2]int `json:"right"`
		Errors  int    `json:"errors"`
		Skipped int    `json:"skipped"`
	} `json:"totals"`
	Cases []struct {
		Case  string           `json:"case"`
		Error string           `json:"error"`
		Score map[string]*bool `json:"score"`
	} `json:"cases"`
}

func TestCorpusTorchFree(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the corpus runs real jobs (about a minute)")
	}
	run := runScore(t, "the scored corpus", corpusRunTimeout, "--torch-free", "--check")
	runErr, stdout := run.err, &run.stdout
	var res corpusResult
	if err := json.Unmarshal(run.json, &res); err != nil {
		t.Fatalf("score.py's --json: %v", err)
	}
	// A harness that ran nothing, or scored nothing, must not pass.
	if len(res.Cases) == 0 || res.Totals.Right[1] != len(res.Cases) || res.Totals.Skipped != 0 {
		t.Fatalf("score.py ran %d case(s), scored %d, skipped %d: want every torch-free case run and scored\n%s",
			len(res.Cases), res.Totals.Right[1], res.Totals.Skipped, stdout.String())
	}
	var wrong []string
	for _, c := range res.Cases {
		if c.Error != "" {
			wrong = append(wrong, c.Case+": "+lastLine(c.Error))
			continue
		}
		for k, v := range c.Score {
			if v != nil && !*v {
				wrong = append(wrong, c.Case+": wrong "+k)
			}
		}
	}
	if runErr != nil || len(wrong) > 0 {
		t.Fatalf("%d/%d case(s) right (score.py: %v); wrong:\n  %s\n\n%s", res.Totals.Right[0], res.Totals.Right[1], runErr,
			strings.Join(wrong, "\n  "), stdout.String())
	}
	t.Logf("score.py --torch-free --check:\n%s", stdout.String())
}
