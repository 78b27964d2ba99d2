package safefile

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const otherUser = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make another user's files (chown) and processes")
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("x"), 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink(target, link)
	if _, err := Open(link, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symlink: %v", err)
	}
	dangling := filepath.Join(dir, "dangling")
	os.Symlink(filepath.Join(dir, "nowhere"), dangling)
	if _, err := Open(dangling, os.O_RDWR|os.O_CREATE, 0o600); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("dangling symlink: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); err == nil {
		t.Error("the dangling link's target was created")
	}
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o600)
	if _, err := Open(fifo, os.O_RDWR, 0); err == nil || !strings.Contains(err.Error(), "named pipe") {
		t.Errorf("fifo: %v", err)
	}
	open := filepath.Join(dir, "open")
	os.WriteFile(open, nil, 0o600)
	os.Chmod(open, 0o666)
	if _, err := Open(open, os.O_RDONLY, 0); err == nil || !strings.Contains(err.Error(), "writable by every user") || !strings.Contains(err.Error(), open) {
		t.Errorf("world-writable: %v", err)
	}
	f, err := Open(target, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestPrivateDir(t *testing.T) {
	base := t.TempDir()
	d := filepath.Join(base, "a", "probing-mcp")
	if err := PrivateDir(d); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o700 {
		t.Errorf("created %v, want 0700", fi.Mode())
	}
	os.Chmod(d, 0o777)
	if err := PrivateDir(d); err == nil || !strings.Contains(err.Error(), d) || !strings.Contains(err.Error(), "writable by other users") {
		t.Errorf("world-writable dir: %v", err)
	}
	os.Chmod(d, 0o700)
	// A parent anyone can write without the sticky bit lets anyone swap it.
	os.Chmod(filepath.Dir(d), 0o777)
	if err := PrivateDir(d); err == nil || !strings.Contains(err.Error(), "not sticky") {
		t.Errorf("non-sticky shared parent: %v", err)
	}
	os.Chmod(filepath.Dir(d), 0o777|os.ModeSticky)
	if err := PrivateDir(d); err != nil {
		t.Errorf("sticky parent: %v", err)
	}
	link := filepath.Join(base, "link")
	os.Symlink(d, link)
	if err := PrivateDir(link); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symlinked dir: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: another user's directory is not tried")
		return
	}
	os.Chown(d, otherUser, otherUser)
	if err := PrivateDir(d); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") || !strings.Contains(err.Error(), d) {
		t.Errorf("another user's dir: %v", err)
	}
}

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "probing-mcp", "x.lock")
	f, err := Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("lock file mode %v, want 0600", fi.Mode())
	}
	if _, err := Lock(path); !errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second Lock: %v, want ErrHeld naming the file and this pid", err)
	}
	f.Close()
	g, err := Lock(path)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	g.Close()
	link := filepath.Join(filepath.Dir(path), "link.lock")
	os.Symlink(path, link)
	if _, err := Lock(link); err == nil || errors.Is(err, ErrHeld) {
		t.Fatalf("a symlinked lock must be refused: %v", err)
	}
}

// TestLockOtherUsersFile: a lock file another user made is refused with
// its owner and the fix, never taken as "held" (which a daemon answers by
// exiting 0).
func TestLockOtherUsersFile(t *testing.T) {
	needRoot(t)
	dir := filepath.Join(t.TempDir(), "probing-mcp")
	os.Mkdir(dir, 0o700)
	path := filepath.Join(dir, "node.lock")
	os.WriteFile(path, nil, 0o600)
	os.Chown(path, otherUser, otherUser)
	_, err := Lock(path)
	if err == nil || errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), "belongs to uid 65534") || !strings.Contains(err.Error(), "rm "+path) {
		t.Fatalf("another user's lock file: %v, want an error naming the owner and the fix", err)
	}
}

// TestLockHeldByOtherUser: an old lock file (0644 in a 0755 directory)
// that another user's process opened and flocked is an error naming that
// process and its user, not ErrHeld.
func TestLockHeldByOtherUser(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755)
	dir := filepath.Join(base, "probing-mcp")
	os.Mkdir(dir, 0o755)
	path := filepath.Join(dir, "node.lock")
	os.WriteFile(path, nil, 0o644)
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1) to hold the lock as another user")
	}
	holder := exec.Command("flock", "--shared", "--nonblock", path, "sleep", "60")
	holder.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUser, Gid: otherUser}}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	f, _ := os.Open(path)
	defer f.Close()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		if time.Now().After(deadline) {
			t.Fatal("the other user's flock never took the lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err := Lock(path)
	if err == nil || errors.Is(err, ErrHeld) || !strings.Contains(err.Error(), "uid 65534") || !strings.Contains(err.Error(), "another user") || !strings.Contains(err.Error(), "rm "+path) {
		t.Fatalf("lock held by another user: %v, want an error naming the holder and the fix", err)
	}
	// The fix works: the file is recreated and taken.
	os.Remove(path)
	g, err := Lock(path)
	if err != nil {
		t.Fatalf("after rm: %v", err)
	}
	g.Close()
}
