package procfacts

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// other is a second user for the tests that need one (root can chown to it).
const other = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: files and processes of a second user are made with chown and setuid")
	}
}

func TestProcessOwner(t *testing.T) {
	o, err := ProcessOwner(os.Getpid())
	if err != nil || o.UID != os.Geteuid() || o.GID != os.Getegid() || !o.Live {
		t.Errorf("owner %+v %v", o, err)
	}
}

func TestCheckFile(t *testing.T) {
	me := Owner{UID: os.Geteuid(), GID: os.Getegid(), Live: true}
	dir := t.TempDir()
	file := func(name string, mode os.FileMode) os.FileInfo {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	if err := CheckFile(file("ok", 0o644), me); err != nil {
		t.Errorf("own 0644 file: %v", err)
	}
	if err := CheckFile(file("world", 0o666), me); err == nil || !strings.Contains(err.Error(), "writable by every user (mode 0666)") {
		t.Errorf("world-writable: %v", err)
	}
	// Group-writable is fine for the owner's own group (umask 002 with
	// user private groups), not for another.
	if err := CheckFile(file("group", 0o664), me); err != nil {
		t.Errorf("group-writable by the owner's group: %v", err)
	}
	if err := CheckFile(file("group2", 0o664), Owner{UID: me.UID, GID: me.GID + 1, Live: true}); err == nil || !strings.Contains(err.Error(), "writable by group") {
		t.Errorf("group-writable by another group: %v", err)
	}
	if os.Geteuid() == 0 {
		fi := file("theirs", 0o644)
		if err := os.Chown(filepath.Join(dir, "theirs"), other, other); err != nil {
			t.Fatal(err)
		}
		fi, _ = os.Lstat(filepath.Join(dir, "theirs"))
		if err := CheckFile(fi, Owner{UID: 1000, GID: 1000, Live: true}); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") || !strings.Contains(err.Error(), "the process runs as uid 1000") {
			t.Errorf("another user's file: %v", err)
		}
		// Root's files are trusted for anyone: only root can make them.
		if err := CheckFile(file("root", 0o644), Owner{UID: 1000, GID: 1000, Live: true}); err != nil {
			t.Errorf("root's file: %v", err)
		}
	}
}

func TestOpenRegular(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("AWS_SECRET=x"), 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink(secret, link)
	if _, _, err := OpenRegular(link); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symlink: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A FIFO with no writer would block a plain open for reading forever.
	if _, _, err := OpenRegular(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("fifo: %v", err)
	}
	if _, _, err := ReadIdentity(fifo); err == nil {
		t.Error("identity from a FIFO")
	}
	os.WriteFile(filepath.Join(dir, "id"), []byte(`{"agent":"probing-mcp","pid":7}`), 0o644)
	id, fi, err := ReadIdentity(filepath.Join(dir, "id"))
	if err != nil || id.PID != 7 || id.Rank != -1 || id.WorldSize != -1 || fi == nil {
		t.Errorf("identity %+v %v", id, err)
	}
	big := make([]byte, MaxIdentityBytes+10)
	os.WriteFile(filepath.Join(dir, "big"), big, 0o644)
	if _, _, err := ReadIdentity(filepath.Join(dir, "big")); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("big identity: %v", err)
	}
}

func TestScope(t *testing.T) {
	user := Scope{Self: 1000}
	if s := user.Resolve(map[int]int{1000: 3, 1001: 5}); !s.Has(1000) || s.Has(1001) || !strings.Contains(s.Why(1001, 1000), "another user's") {
		t.Errorf("a user's server: %+v %q", s, s.Why(1001, 1000))
	}
	root := Scope{Self: 0}
	if s := root.Resolve(map[int]int{1000: 3}); !s.Has(1000) || s.Has(1001) {
		t.Errorf("root, one user: %+v", s)
	}
	if s := root.Resolve(nil); !s.Has(1000) || !s.Has(0) {
		t.Errorf("root, nothing there yet: %+v", s)
	}
	s := root.Resolve(map[int]int{0: 1, other: 1})
	if s.Has(0) || s.Has(other) || !strings.Contains(s.Ambiguous, "processes of 2 users") || !strings.Contains(s.Ambiguous, "PROBING_MCP_JOB_USER=") || s.Why(0, 0) != s.Ambiguous {
		t.Errorf("root, two users: %+v", s)
	}
	named := Scope{Self: 0, UIDs: []int{other}}
	if s := named.Resolve(map[int]int{0: 1, other: 1}); !s.Has(other) || s.Has(0) || !strings.Contains(s.Why(0, 0), "PROBING_MCP_JOB_USER") {
		t.Errorf("root, user named: %+v", s)
	}
	if sc, err := ScopeFromEnv(func(string) string { return "nobody, 1234" }); err != nil || len(sc.UIDs) != 2 || sc.UIDs[0] != other || sc.UIDs[1] != 1234 {
		t.Errorf("PROBING_MCP_JOB_USER: %+v %v", sc, err)
	}
	if _, err := ScopeFromEnv(func(string) string { return "no-such-user-here" }); err == nil || !strings.Contains(err.Error(), "PROBING_MCP_JOB_USER") {
		t.Errorf("unknown user: %v", err)
	}
}

// start runs a child and waits for it to print READY (its handlers are
// installed by then).
func start(t *testing.T, name string, args ...string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(name, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	rd := bufio.NewReader(out)
	if line, err := rd.ReadString('\n'); err != nil || line != "READY\n" {
		t.Fatalf("%s did not start: %q %v", name, line, err)
	}
	return cmd, rd
}

func running(pid int) bool {
	st, err := StatAt(Proc, pid)
	return err == nil && st.State != "Z"
}

// TestSignalNeverKills: Signal refuses every signal that would run a
// default action, so the process lives; and it delivers a stack-dump
// signal to a process that handles it.
func TestSignalNeverKills(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	// A process that catches SIGUSR2 (and counts) and nothing else of ours.
	catcher, out := start(t, py, "-c", `
import signal, sys, time
n = [0]
def h(s, f):
    n[0] += 1
    print("GOT", flush=True)
signal.signal(signal.SIGUSR2, h)
print("READY", flush=True)
while True:
    time.sleep(1)
`)
	pid := catcher.Process.Pid
	st, _ := StartTime(pid)
	uid := os.Geteuid()
	for _, c := range []struct {
		sig  syscall.Signal
		want string
	}{
		{syscall.SIGKILL, "not a stack-dump signal"},
		{syscall.SIGTERM, "not a stack-dump signal"},
		{syscall.SIGINT, "not a stack-dump signal"},
		{syscall.SIGUSR1, "does not catch signal 10"},
		{40, "does not catch signal 40"},
	} {
		err := Signal(pid, st, uid, c.sig)
		if !errors.Is(err, ErrSignalRefused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("signal %d: %v", c.sig, err)
		}
	}
	if err := Signal(pid, st+1, uid, syscall.SIGUSR2); err == nil || !strings.Contains(err.Error(), "no longer the process") {
		t.Errorf("wrong start time: %v", err)
	}
	if err := Signal(pid, st, uid+1, syscall.SIGUSR2); err == nil || !strings.Contains(err.Error(), "runs as") {
		t.Errorf("wrong owner: %v", err)
	}
	if !running(pid) {
		t.Fatal("a refused signal killed the process")
	}
	if err := Signal(pid, st, uid, syscall.SIGUSR2); err != nil {
		t.Fatalf("a caught stack-dump signal: %v", err)
	}
	if line, err := out.ReadString('\n'); err != nil || line != "GOT\n" {
		t.Fatalf("the handler did not run: %q %v", line, err)
	}
	if !running(pid) {
		t.Fatal("the caught signal killed the process")
	}
}

// TestSignalAnotherUsersProcess: a root caller asked to signal a process
// of a second user by a file of a third (here: root itself, with the
// second user's uid claimed wrongly) is refused.
func TestSignalAnotherUsersProcess(t *testing.T) {
	needRoot(t)
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1)")
	}
	cmd := exec.Command(sleep, "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: other, Gid: other}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	var st uint64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if o, err := ProcessOwner(pid); err == nil && o.UID == other {
			st, _ = StartTime(pid)
			break
		}
	}
	if err := Signal(pid, st, 0, syscall.SIGUSR2); err == nil || !strings.Contains(err.Error(), "runs as uid 65534") {
		t.Errorf("claimed owner root: %v", err)
	}
	// Its real owner asking: sleep catches nothing, so still refused.
	if err := Signal(pid, st, other, syscall.SIGUSR2); err == nil || !strings.Contains(err.Error(), "does not catch") {
		t.Errorf("sleep and SIGUSR2: %v", err)
	}
	if !running(pid) {
		t.Fatal("the process was killed")
	}
}
