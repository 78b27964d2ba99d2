package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/probing-mcp/probing-mcp/internal/demojob"
)

// pipeGuard is the demo's stdout. The first EPIPE (the reader went away:
// `demo | head`) ends the demo through broken, so that it cleans up, and
// later writes are dropped.
type pipeGuard struct {
	w      io.Writer
	broken func(error)
	mu     sync.Mutex
	gone   bool
}

var errStdoutClosed = errors.New("stdout was closed")

func (p *pipeGuard) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return len(b), nil
	}
	n, err := p.w.Write(b)
	if err != nil && errors.Is(err, syscall.EPIPE) {
		p.gone = true
		p.broken(errStdoutClosed)
		return len(b), nil
	}
	return n, err
}

func (p *pipeGuard) isBroken() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gone
}

// demoCLI names this binary in the commands the demo prints: run is valid
// while the demo runs, lasting after it ends.
type demoCLI struct {
	run, lasting string
	copied       bool // run is a copy of go run's temporary binary, in the demo's directory
	err          error
}

// goRunBinary: go run builds into a go-build temporary directory and
// removes it when the program exits.
func goRunBinary(exe string) bool {
	return strings.Contains(exe, string(filepath.Separator)+"go-build")
}

func cliFor(exit bool, jobDir, repo string) demoCLI {
	exe, err := os.Executable()
	if err == nil {
		exe, _ = filepath.Abs(exe)
	}
	if err != nil || exe == "" {
		return demoCLI{run: "probing-mcp", lasting: "probing-mcp", err: fmt.Errorf("cannot tell where this binary is (%v): run `make build` and use bin/probing-mcp", err)}
	}
	if !goRunBinary(exe) {
		return demoCLI{run: exe, lasting: exe}
	}
	c := demoCLI{lasting: "go run github.com/probing-mcp/probing-mcp/cmd/probing-mcp"}
	if cwd, _ := os.Getwd(); repo != "" && cwd == repo {
		c.lasting = "go run ./cmd/probing-mcp"
	}
	c.run = c.lasting
	if exit {
		return c
	}
	// An MCP client needs a binary that exists while the demo runs.
	dst := filepath.Join(jobDir, "probing-mcp")
	if err := copyFile(exe, dst); err != nil {
		c.err = fmt.Errorf("copying this binary into the demo's directory for the MCP client: %v", err)
		return c
	}
	c.run, c.copied = dst, true
	return c
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// findRepo is the probing-mcp checkout holding the shipped Flight Recorder
// dumps: the working directory or one above it, else the source tree this
// binary was built from (go run, make build); "" when neither has them.
func findRepo() string {
	var cands []string
	if cwd, err := os.Getwd(); err == nil {
		for d := cwd; ; d = filepath.Dir(d) {
			cands = append(cands, d)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		cands = append(cands, filepath.Dir(filepath.Dir(filepath.Dir(file))))
	}
	for _, d := range cands {
		if fi, err := os.Stat(filepath.Join(d, frDumps)); err == nil && fi.IsDir() {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				return d
			}
		}
	}
	return ""
}

const frDumps = "testdata/fr/real/missing_rank"

// frDumpsCommand: the dumps' path absolute, so it works from any
// directory; when no checkout is found, where the relative path holds.
func frDumpsCommand(cli, repo string) string {
	if repo == "" {
		return fmt.Sprintf("%s analyze %s    (run from the root of a probing-mcp checkout: no checkout was found here)", cli, frDumps)
	}
	if cwd, _ := os.Getwd(); cwd == repo {
		return fmt.Sprintf("%s analyze %s", cli, frDumps)
	}
	return fmt.Sprintf("%s analyze %s", cli, filepath.Join(repo, frDumps))
}

// The SQL the demo shows. Without torch, each rank's last span (the
// ranks trace their steps' phases); with torch, each rank's last
// collective. Rank 2 stands out in both. Single-quoted literals only and
// no $, so the query pastes inside double quotes into any POSIX shell.
const (
	demoSQLSpans = "SELECT _rank AS rank, attributes->>'step' AS step, name AS last_entered, " +
		"round(unixepoch('subsec') - max(time) / 1e9, 1) AS seconds_ago " +
		"FROM python.trace_event WHERE record_type = 'span_start' GROUP BY _rank ORDER BY _rank"
	demoSQLComm = "SELECT _rank AS rank, global_step AS step, op AS last_collective, group_seq AS seq, " +
		"round(unixepoch('subsec') - max(timestamp) / 1e6, 1) AS seconds_ago " +
		"FROM python.comm_collective GROUP BY _rank ORDER BY _rank"
)

// demoSQL runs the demo's query through the CLI's own query command, so
// what it prints is what pasting the command prints.
func demoSQL(out io.Writer, job *demojob.Job, cli demoCLI, exit bool) error {
	sql, what := demoSQLSpans, "each rank's last span (the ranks trace each step's phases: load_batch, all_reduce)"
	if job.Torch {
		sql, what = demoSQLComm, "each rank's last collective"
	}
	var res, errb bytes.Buffer
	if code := query([]string{"--data-dir", job.DataDir, sql}, &res, &errb); code != 0 {
		return fmt.Errorf("the demo's query failed: %s", strings.TrimSpace(errb.String()))
	}
	fmt.Fprintf(out, "\nWhat the rings hold: %s, by SQL over every rank's ring tables\n(the query tool, or `probing-mcp query` from a shell):\n\n  %s\n\n%s", what, sql, indent(res.String(), "  "))
	if exit {
		fmt.Fprintf(out, "\nWith the job kept running (make demo, or %s demo), paste it with the data dir that prints:\n"+
			"  PROBING_DATA_DIR=<its data dir> %s query \"%s\"\n", cli.lasting, cli.lasting, sql)
		return nil
	}
	fmt.Fprintf(out, "\nPaste it into a shell while the demo runs:\n  PROBING_DATA_DIR=%s %s query \"%s\"\n", job.DataDir, cli.run, sql)
	return nil
}

// printMCPConfig: each client's own format, labelled. Claude Desktop and
// Claude Code's .mcp.json use "mcpServers"; VS Code's .vscode/mcp.json
// uses "servers" with a type.
func printMCPConfig(out io.Writer, cli demoCLI, job *demojob.Job) {
	env := map[string]string{"PROBING_DATA_DIR": job.DataDir, "PROBING_CTRL_ROOT": job.CtrlRoot}
	server := map[string]any{"command": cli.run, "args": []string{"serve"}, "env": env}
	claude, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"probing-demo": server}})
	vscode, _ := json.Marshal(map[string]any{"servers": map[string]any{"probing-demo": map[string]any{
		"type": "stdio", "command": cli.run, "args": []string{"serve"}, "env": env}}})
	fmt.Fprintf(out, "\nExplore it with an MCP client while the demo runs (its data and control directories below are removed when it stops):\n"+
		"  Claude Code:\n    claude mcp add probing-demo -e PROBING_DATA_DIR=%s -e PROBING_CTRL_ROOT=%s -- %s serve\n"+
		"  Claude Desktop (claude_desktop_config.json) or a project's .mcp.json:\n    %s\n"+
		"  VS Code (.vscode/mcp.json):\n    %s\n", job.DataDir, job.CtrlRoot, cli.run, claude, vscode)
	if cli.copied {
		fmt.Fprintf(out, "  (%s is a copy of go run's temporary binary, removed with the demo; `make build` gives a lasting bin/probing-mcp.)\n", cli.run)
	}
	fmt.Fprintln(out, "Then ask: \"why is my job stuck?\"")
}
