package procfacts

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A real parent with three children: one blocked opening a FIFO nobody
// writes, one blocked reading a FIFO it holds open itself, one sleeping
// (a stuck upload command). Each is found and read as it is.
func TestDescendantsAndIOWaits(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	fifoOpen, fifoRead := filepath.Join(dir, "shard open\n3.bin"), filepath.Join(dir, "shard-read.bin")
	for _, p := range []string{fifoOpen, fifoRead} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Skip("mkfifo:", err)
		}
	}
	src := `
import os, subprocess, sys
kids = [
  subprocess.Popen([sys.executable, "-c", "import os,sys; os.open(sys.argv[1], os.O_RDONLY)", sys.argv[1]]),
  subprocess.Popen([sys.executable, "-c", "import os,sys; fd=os.open(sys.argv[1], os.O_RDWR); os.read(fd, 1)", sys.argv[2]]),
  subprocess.Popen(["sleep", "600"]),
]
print(" ".join(str(k.pid) for k in kids), flush=True)
kids[2].wait()
`
	cmd := exec.Command(py, "-c", src, fifoOpen, fifoRead)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	var pids []int
	for _, f := range strings.Fields(line) {
		n, _ := strconv.Atoi(f)
		pids = append(pids, n)
	}
	t.Cleanup(func() {
		for _, p := range pids {
			if pr, err := os.FindProcess(p); err == nil {
				pr.Kill()
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	if err != nil || len(pids) != 3 {
		t.Fatalf("children: %q %v", line, err)
	}

	tree, err := ReadTree(context.Background(), Proc)
	if err != nil {
		t.Fatal(err)
	}
	kids, more := tree.Descendants(cmd.Process.Pid, 2, 8)
	if more != 0 || len(kids) != 3 || kids[0] != min(pids[0], pids[1], pids[2]) {
		t.Fatalf("Descendants = %v, %d; want %v", kids, more, pids)
	}
	if kids, more := tree.Descendants(cmd.Process.Pid, 1, 2); len(kids) != 2 || more != 1 {
		t.Fatalf("bounded: %v, %d more; want 2 and 1 more", kids, more)
	}

	// Wait (without a fixed margin) until each is where it blocks.
	read := func(pid int) Child {
		deadline := time.Now().Add(60 * time.Second)
		for {
			c, err := ReadChild(Proc, pid, 1, Uptime(Proc))
			if err != nil {
				t.Fatal(err)
			}
			// Asleep where it blocks: a child read while it is still on its
			// way into the call shows the call without the wait channel that
			// names the FIFO.
			asleep := c.State == "S" && c.WChan != "" && c.WChan != "0"
			if (c.IO != nil && c.IO.Path != "" && asleep) || strings.HasPrefix(c.Cmdline, "sleep") && asleep || time.Now().After(deadline) {
				return c
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	opening := read(pids[0])
	if opening.IO == nil || !strings.HasPrefix(opening.IO.Syscall, "open") || opening.IO.Path != fifoOpen || opening.IO.Kind != "fifo" {
		t.Errorf("the child opening a FIFO: %+v (io %+v)", opening, opening.IO)
	}
	if opening.IdleS < 0 || opening.IdleS > opening.AgeS+1 {
		t.Errorf("the child opening a FIFO: idle %v s of %v s", opening.IdleS, opening.AgeS)
	}
	if opening.State != "S" || opening.AgeS < 0 || opening.PPID != cmd.Process.Pid {
		t.Errorf("the child opening a FIFO: state %q, age %v, ppid %d", opening.State, opening.AgeS, opening.PPID)
	}
	reading := read(pids[1])
	if reading.IO == nil || reading.IO.Syscall != "read" || reading.IO.Path != fifoRead || reading.IO.Kind != "fifo" {
		t.Errorf("the child reading a FIFO: %+v (io %+v)", reading, reading.IO)
	}
	parent := ReadIOWait(Proc, cmd.Process.Pid, cmd.Process.Pid, "")
	for deadline := time.Now().Add(60 * time.Second); parent == nil && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond) // it prints the pids, then waits
		parent = ReadIOWait(Proc, cmd.Process.Pid, cmd.Process.Pid, "")
	}
	if parent == nil || parent.Kind != "child" || parent.Path != strconv.Itoa(pids[2]) {
		t.Errorf("the parent waits for its sleeping child: %+v", parent)
	}
	sleeping := read(pids[2])
	if sleeping.IO != nil || sleeping.Cmdline != "sleep 600" || sleeping.Comm != "sleep" {
		t.Errorf("the sleeping child: %+v", sleeping)
	}
}

func TestClip(t *testing.T) {
	if s, cut := Clip("abc", 3); s != "abc" || cut {
		t.Errorf("Clip(abc, 3) = %q, %v", s, cut)
	}
	if s, cut := Clip("aé", 2); s != "a" || !cut {
		t.Errorf("a rune is never split: %q, %v", s, cut)
	}
	if s, _ := Clip("a\xffb", 10); s != "a\uFFFDb" {
		t.Errorf("invalid UTF-8 replaced: %q", s)
	}
}

func TestParseSyscall(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"running", ""},
		{"", ""},
		{"-1 0x7ffd 0x0", ""},
		{"202 0x1 0x2 0x3 0x4 0x5 0x6 0x7ffd 0x7f00", ""}, // futex: not followed
	} {
		if got, _ := parseSyscall(tc.in); got != tc.want {
			t.Errorf("parseSyscall(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
