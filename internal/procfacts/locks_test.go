package procfacts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseLocks(t *testing.T) {
	text := `1: FLOCK  ADVISORY  WRITE 23487 fe:00:9978463 0 EOF
1: -> FLOCK  ADVISORY  WRITE 23528 fe:00:9978463 0 EOF
1: -> FLOCK  ADVISORY  WRITE 23529 fe:00:9978463 0 EOF
2: POSIX  ADVISORY  READ 100 08:01:42 0 EOF
3: OFDLCK ADVISORY  WRITE -1 08:01:7 0 EOF
4: -> POSIX  ADVISORY  WRITE 7 08:01:9 0 EOF
garbage
`
	got := ParseLocks(strings.NewReader(text))
	want := []LockWait{{Waiter: 23528, Holder: 23487, Kind: "FLOCK", File: "fe:00:9978463"}, {Waiter: 23529, Holder: 23487, Kind: "FLOCK", File: "fe:00:9978463"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%v", got)
	}
}

// TestLockWaitsReal: a real process blocked in flock on a file this test
// holds is found, with this process as the holder.
func TestLockWaitsReal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "manifest")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("flock", path, "true")
	if err := cmd.Start(); err != nil {
		t.Skipf("no flock(1) to block: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second) // a hang guard: the wait is on the kernel's table
	for time.Now().Before(deadline) {
		ws, err := LockWaits("/proc")
		if err != nil {
			t.Skipf("no /proc/locks: %v", err)
		}
		for _, w := range ws {
			if w.Waiter == cmd.Process.Pid {
				if w.Holder != os.Getpid() || w.Kind != "FLOCK" {
					t.Fatalf("%+v", w)
				}
				// The resource by name: both sides have the file open.
				for _, pid := range []int{w.Waiter, w.Holder} {
					if got := LockPath("/proc", pid, w.File); got != path {
						t.Errorf("LockPath(pid %d, %s) = %q, want %q", pid, w.File, got, path)
					}
				}
				if got := LockPath("/proc", w.Holder, "fe:00:1"); got != "" {
					t.Errorf("another inode: %q", got)
				}
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the blocked flock never showed in /proc/locks")
}

// TestZombieIsNotAlive: a child that exited and was not reaped yet has a
// pid and a start time, but runs nothing: not alive.
func TestZombieIsNotAlive(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skipf("no true(1): %v", err)
	}
	pid := cmd.Process.Pid
	start, err := StartTime(pid)
	deadline := time.Now().Add(60 * time.Second) // a hang guard: the wait is on its state
	for time.Now().Before(deadline) {
		st, err := StatAt(Proc, pid)
		if err == nil && st.State == "Z" {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err == nil && Alive(pid, start) {
		t.Errorf("zombie %d counted alive", pid)
	}
	cmd.Wait()
	if !Alive(os.Getpid(), 0) {
		t.Error("this process is not alive?")
	}
}
