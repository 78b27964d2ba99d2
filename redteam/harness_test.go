package redteam

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The bounds every hostile input is held to (issue 23, "Done when").
const (
	maxPeakMB = 512
	// startTime bounds a command's start-up and a refusal at start (the
	// first start on a busy 2-core machine reads the binary from disk).
	startTime = 60 * time.Second
)

// bin is the probing-mcp binary under attack, built once per run
// (PROBING_REDTEAM_BIN names a prebuilt one instead).
var bin string

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(helperRole(role))
	}
	code, cleanup := 0, func() {}
	if b := os.Getenv("PROBING_REDTEAM_BIN"); b != "" {
		bin = b
	} else {
		var err error
		if bin, cleanup, err = build(); err != nil {
			fmt.Fprintf(os.Stderr, "redteam: building probing-mcp: %v\n", err)
			os.Exit(1)
		}
	}
	code = m.Run()
	cleanup()
	if attackerDir != "" {
		os.RemoveAll(attackerDir)
	}
	os.Exit(code)
}

// build compiles ./cmd/probing-mcp into a directory of its own.
func build() (string, func(), error) {
	dir, err := os.MkdirTemp("", "probing-mcp-redteam-bin-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(dir, "probing-mcp")
	cmd := exec.Command(goBin, "build", "-o", out, "./cmd/probing-mcp")
	cmd.Dir = ".."
	cmd.Env = os.Environ()
	if os.Getenv("CGO_CFLAGS") == "" {
		cmd.Env = append(cmd.Env, "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("%v: %s", err, b)
	}
	return out, cleanup, nil
}

// env is a clean environment for the binary: nothing of the job this
// test may run in (MASTER_ADDR, a token, another data dir), a home and a
// control root of the test's own, GPU sampling off unless a test turns
// it on, and the extra KEY=VALUE pairs.
func env(t *testing.T, dataDir string, extra ...string) []string {
	home := t.TempDir()
	e := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"PROBING_DATA_DIR=" + dataDir,
		"PROBING_CTRL_ROOT=" + filepath.Join(home, "ctrl"),
		"PROBING_GPU=0",
	}
	return append(e, extra...)
}

// proc is one run of the binary: its stderr kept (bounded), its peak
// memory and time measured.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *capped
	stdout *capped
	start  time.Time
	done   chan struct{}
	took   time.Duration
	err    error
	hwm    float64 // VmHWM (MB) last read while it ran
}

// capped keeps the first max bytes written to it.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// start runs the binary with args; stdin is r (nil: none). The process
// is killed at the end of the test if it still runs.
func start(t *testing.T, environ []string, stdin io.Reader, args ...string) *proc {
	t.Helper()
	p := newProc(t, environ, args...)
	p.cmd.Stdin = stdin
	p.cmd.Stdout = p.stdout
	p.launch()
	return p
}

// newProc prepares a run; the caller may set its stdin and stdout, then
// launch it.
func newProc(t *testing.T, environ []string, args ...string) *proc {
	p := &proc{t: t, cmd: exec.Command(bin, args...), stderr: &capped{max: 4 << 20}, stdout: &capped{max: 16 << 20}, done: make(chan struct{})}
	p.cmd.Env = environ
	p.cmd.Dir = t.TempDir()
	p.cmd.Stderr = p.stderr
	return p
}

func (p *proc) launch() {
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("starting %s: %v", p.cmd.Args, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		p.took = time.Since(p.start)
		close(p.done)
	}()
	p.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// wait waits at most d for the process to end, and returns its exit code.
func (p *proc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("%s ran past %s; stderr:\n%s", p.cmd.Args, d, tail(p.stderr.String(), 3000))
	}
	return p.cmd.ProcessState.ExitCode()
}

// stop sends SIGTERM and waits for the exit code.
func (p *proc) stop() int {
	p.t.Helper()
	p.sample()
	p.cmd.Process.Signal(syscall.SIGTERM)
	return p.wait(startTime)
}

// peak is the process's peak resident memory in MB and how it was read.
// While it runs, and as read just before the test tells it to end (after
// the hostile inputs, since a high-water mark only grows): its VmHWM, the
// high-water mark of its own address space, exact. For a process that
// ended by itself (a refusal at start): its rusage maximum RSS, an upper
// bound, since Linux counts in it the test process's own (Go starts a
// child with vfork, and exec keeps the larger high-water mark).
func (p *proc) peak() (float64, string) {
	select {
	case <-p.done:
	default:
		p.sample()
	}
	if p.hwm > 0 {
		return p.hwm, "peak"
	}
	if ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return float64(ru.Maxrss) / 1024, "peak at most" // KiB
	}
	return -1, "peak"
}

// sample reads the running process's VmHWM.
func (p *proc) sample() {
	if mb := vmHWM(p.cmd.Process.Pid); mb > p.hwm {
		p.hwm = mb
	}
}

var hwmRe = regexp.MustCompile(`(?m)^VmHWM:\s+(\d+) kB`)

func vmHWM(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	m := hwmRe.FindSubmatch(b)
	if m == nil {
		return -1
	}
	kb, _ := strconv.ParseFloat(string(m[1]), 64)
	return kb / 1024
}

// logLine waits (at most d) for a stderr log line matching re and returns
// its submatches.
func (p *proc) logLine(re *regexp.Regexp, d time.Duration) []string {
	p.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if m := re.FindStringSubmatch(p.stderr.String()); m != nil {
			return m
		}
		select {
		case <-p.done:
			p.t.Fatalf("%s exited (%v) before logging %s:\n%s", p.cmd.Args, p.err, re, tail(p.stderr.String(), 3000))
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not log %s within %s:\n%s", p.cmd.Args, re, d, tail(p.stderr.String(), 3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serving is the node daemon's start-up line; [1] is its address.
var serving = regexp.MustCompile(`msg="node daemon serving" addr=(\S+)`)

// post makes one HTTP request as this test's user (root when the
// two-user tests run), bounded; it returns the status and the body.
func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	res, err := (&http.Client{Timeout: startTime}).Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	return res.StatusCode, string(b)
}

// bounded asserts and logs one hostile input's cost: peak memory under
// maxPeakMB and time under limit. The log line is the suite's record
// (make redteam -v prints every one).
func bounded(t *testing.T, attack string, p *proc, took, limit time.Duration) {
	t.Helper()
	mb, what := p.peak()
	boundedAs(t, attack, what, mb, took, limit)
}

// boundedIn is bounded for an attack on code run in the test's own
// process: its memory is what the attacked call allocated in all (an
// upper bound of its peak).
func boundedIn(t *testing.T, attack string, allocMB float64, took, limit time.Duration) {
	t.Helper()
	boundedAs(t, attack, "allocated", allocMB, took, limit)
}

func boundedAs(t *testing.T, attack, what string, peakMB float64, took, limit time.Duration) {
	t.Helper()
	t.Logf("redteam: %s: %s %.0f MB, %.2f s (bounds %d MB, %s)", attack, what, peakMB, took.Seconds(), maxPeakMB, limit)
	if peakMB < 0 {
		t.Errorf("%s: peak memory could not be read", attack)
	}
	if peakMB >= maxPeakMB {
		t.Errorf("%s: peak memory %.0f MB, want under %d MB", attack, peakMB, maxPeakMB)
	}
	if took >= limit {
		t.Errorf("%s: took %s, want under %s", attack, took.Round(time.Millisecond), limit)
	}
}

// mustContain fails unless s holds every one of want (case-sensitive).
func mustContain(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, tail(s, 4000))
		}
	}
}

// said logs the line of s that holds key (clipped): the message the
// attack got, in the -v record.
func said(t *testing.T, s, key string) {
	t.Helper()
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, key) {
			if len(line) > 400 {
				line = line[:400] + "…"
			}
			t.Logf("said: %s", line)
			return
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// sharedDir is a directory like a shared data dir or /tmp (mode 1777:
// every user may create files, none may remove another's), outside the
// test's private temp dir so that another uid can reach it.
func sharedDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "probing-mcp-redteam-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return d
}

// freePort is a loopback address nothing listens on (a store that is
// down).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// withTimeout is a context for one exchange with a subprocess.
func withTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
