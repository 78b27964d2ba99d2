package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestDemoCommand runs the README's main command (without torch, as on a
// fresh machine): real ranks, a real hang, the diagnosis naming rank 2,
// the rings' SQL with a row per rank, and nothing left behind; with
// --exit it prints no path that is gone.
func TestDemoCommand(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3: the demo's ranks are Python processes")
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var out, errb bytes.Buffer
	if code := run([]string{"demo", "--exit", "--torch", "no", "--python", "python3"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	s := out.String()
	for _, want := range []string{
		"ranks 0-1,3 in ⟦all_reduce⟧", "rank 2 in ⟦fake_data_loader⟧", "odd one out",
		"rank 2 is the culprit (cpu_stall, high confidence) at ⟦socket_rank.py⟧:67 (⟦fake_data_loader⟧); ranks 0-1,3 wait for it",
		"  " + demoSQLSpans + "\n",
		"rank  step  last_entered  seconds_ago", "(4 rows)",
		"make demo", "analyze " + filepath.Join(findRepo(), frDumps),
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	// A row per rank, from the agent's own span rings: rank 2 loading a
	// batch, the others in the all-reduce.
	for _, r := range []string{"0", "1", "3"} {
		if !regexp.MustCompile(`(?m)^  ` + r + ` +5 +⟦all_reduce⟧ +[0-9.]+$`).MatchString(s) {
			t.Errorf("no row for rank %s in all_reduce at step 5:\n%s", r, s)
		}
	}
	if !regexp.MustCompile(`(?m)^  2 +5 +⟦load_batch⟧ +[0-9.]+$`).MatchString(s) {
		t.Errorf("no row for rank 2 in load_batch:\n%s", s)
	}
	// --exit: no MCP configuration and no path of the removed job.
	for _, gone := range []string{"mcpServers", `"servers"`, "claude mcp add probing-demo", "PROBING_DATA_DIR=" + tmp, "PROBING_CTRL_ROOT"} {
		if strings.Contains(s, gone) {
			t.Errorf("--exit output names %q, which is gone:\n%s", gone, s)
		}
	}
	// The SQL pastes into a shell inside double quotes unchanged.
	sh, err := exec.Command("sh", "-c", `printf %s "`+demoSQLSpans+`"`).Output()
	if err != nil || string(sh) != demoSQLSpans {
		t.Errorf("the printed SQL does not survive the shell: %v %q", err, sh)
	}
	assertCleanedUp(t, tmp, s)
}

// assertCleanedUp: the demo's directory under tmp is gone and none of
// the ranks whose pids the output lists still runs.
func assertCleanedUp(t *testing.T, tmp, out string) {
	t.Helper()
	if m, _ := filepath.Glob(filepath.Join(tmp, "*")); len(m) > 0 {
		t.Errorf("left behind: %v", m)
	}
	pids := regexp.MustCompile(`pids \[([0-9 ]+)\]`).FindStringSubmatch(out)
	if pids == nil {
		t.Fatalf("no pids in the output:\n%s", out)
	}
	for _, p := range strings.Fields(pids[1]) {
		if b, err := os.ReadFile("/proc/" + p + "/cmdline"); err == nil && bytes.Contains(b, []byte(tmp)) {
			t.Errorf("rank pid %s still runs", p)
		}
	}
}

// TestMain removes the binary demoBinary built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// demoBinary builds the command once: signal and pipe behaviour needs the
// real process.
func demoBinary(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3: the demo's ranks are Python processes")
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "probing-mcp-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "probing-mcp")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			t.Logf("%s", out)
			binErr = err
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// TestDemoPipeClosed: `demo --exit | head -1`: the reader goes away after
// the first line; the demo still kills its ranks and removes its
// directory instead of dying of SIGPIPE.
func TestDemoPipeClosed(t *testing.T) {
	bin := demoBinary(t)
	tmp := t.TempDir()
	cmd := exec.Command(bin, "demo", "--exit", "--torch", "no", "--python", "python3")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || !strings.Contains(line, "Starting") {
		t.Fatalf("first line %q %v", line, err)
	}
	// Wait for the ranks to exist, so that there is something to clean up,
	// then close the pipe as head does.
	waitFor(t, func() bool { m, _ := filepath.Glob(filepath.Join(tmp, "*", "rank*.log")); return len(m) > 0 })
	pr.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute): // a hang guard only
		cmd.Process.Kill()
		t.Fatal("the demo did not end after its stdout closed")
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("killed by %v: no cleanup ran (stderr %s)", ws.Signal(), errb.String())
	}
	if !strings.Contains(errb.String(), "stdout was closed; stopped the job and removed its files") {
		t.Errorf("exit %v, stderr %q", err, errb.String())
	}
	assertNoDemoLeft(t, tmp)
}

// TestDemoKeptRunning: without --exit the MCP configurations name paths
// that exist while it runs, each client's in its own format, and SIGTERM
// cleans up.
func TestDemoKeptRunning(t *testing.T) {
	bin := demoBinary(t)
	tmp := t.TempDir()
	cmd := exec.Command(bin, "demo", "--torch", "no", "--python", "python3")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	stdout, _ := cmd.StdoutPipe()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var out strings.Builder
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(3 * time.Minute) // a hang guard only
	for ready := false; !ready; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the demo ended:\n%s\n%s", out.String(), errb.String())
			}
			out.WriteString(l + "\n")
			ready = strings.Contains(l, "The job keeps running")
		case <-timeout:
			t.Fatalf("no 'keeps running' line:\n%s", out.String())
		}
	}
	s := out.String()
	var claude struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	var vscode struct {
		Servers map[string]struct {
			Type    string            `json:"type"`
			Command string            `json:"command"`
			Env     map[string]string `json:"env"`
		} `json:"servers"`
	}
	if err := json.Unmarshal([]byte(lineAfter(t, s, "Claude Desktop (claude_desktop_config.json)")), &claude); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lineAfter(t, s, "VS Code (.vscode/mcp.json):")), &vscode); err != nil {
		t.Fatal(err)
	}
	c, v := claude.MCPServers["probing-demo"], vscode.Servers["probing-demo"]
	if v.Type != "stdio" || v.Command != c.Command || c.Command != bin {
		t.Errorf("claude %+v, vscode %+v; want the binary %s", c, v, bin)
	}
	for _, p := range []string{c.Command, c.Env["PROBING_DATA_DIR"], c.Env["PROBING_CTRL_ROOT"]} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the config names %s, which does not exist while the demo runs: %v", p, err)
		}
	}
	// The printed query pastes: run it as printed, through sh.
	paste := strings.TrimSpace(lineAfter(t, s, "Paste it into a shell while the demo runs:"))
	q, err := exec.Command("sh", "-c", paste).CombinedOutput()
	if err != nil || !strings.Contains(string(q), "load_batch") || !strings.Contains(string(q), "(4 rows)") {
		t.Errorf("%s: %v\n%s", paste, err, q)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	go io.Copy(io.Discard, stdout)
	done := make(chan error, 1)
	go func() {
		for range lines {
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after SIGTERM: %v %s", err, errb.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the demo did not stop on SIGTERM")
	}
	assertNoDemoLeft(t, tmp)
}

func lineAfter(t *testing.T, s, label string) string {
	t.Helper()
	i := strings.Index(s, label)
	if i < 0 {
		t.Fatalf("no %q in:\n%s", label, s)
	}
	rest := s[i:]
	rest = rest[strings.Index(rest, "\n")+1:]
	line, _, _ := strings.Cut(rest, "\n")
	return strings.TrimSpace(line)
}

// assertNoDemoLeft: nothing under tmp, and no process runs from it.
func assertNoDemoLeft(t *testing.T, tmp string) {
	t.Helper()
	if m, _ := filepath.Glob(filepath.Join(tmp, "*")); len(m) > 0 {
		t.Errorf("left behind: %v", m)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(tmp)) {
			t.Errorf("still runs: %s (%s)", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang guard only
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
