//go:build linux

package procfacts

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// The test binary doubles as the child processes the tests read: with
// PROCFS_HELPER set it sleeps, spins or blocks threads instead of testing.
const helperEnv = "PROCFS_HELPER"

func init() {
	if os.Getenv(helperEnv) != "" {
		runtime.LockOSThread() // main runs on the main thread (tid == pid)
	}
}

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		helper(mode)
		return
	}
	os.Exit(m.Run())
}

func setThreadName(name string) {
	b := append([]byte(name), 0)
	syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0)
}

func helper(mode string) {
	switch mode {
	case "exit":
		os.Exit(0)
	case "sleep":
		fmt.Println("ready")
		time.Sleep(time.Hour)
	case "spin":
		fmt.Println("ready")
		for x := 0; ; x++ {
			_ = x
		}
	case "threads":
		// Names with ") (" in them, as /proc's parser must survive.
		setThreadName("odd) (main")
		var r, w [2]int
		if err := syscall.Pipe(r[:]); err != nil {
			panic(err)
		}
		_ = w
		for i := range 4 {
			go func() {
				runtime.LockOSThread()
				setThreadName(fmt.Sprintf("w) (%d", i))
				buf := make([]byte, 1)
				syscall.Read(r[0], buf) // blocks this thread in read(2) forever
			}()
		}
		time.Sleep(200 * time.Millisecond)
		fmt.Println("ready")
		select {}
	}
	panic("unknown helper mode " + mode)
}

// spawn starts the test binary in a helper mode and waits for it to be
// ready; the child is killed at the end of the test.
func spawn(t *testing.T, mode string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, helperEnv+"="+mode)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if mode == "exit" {
		return cmd
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("helper %s: %q %v", mode, line, err)
	}
	return cmd
}

func TestReadProcessSelf(t *testing.T) {
	// Pinned, so that the thread found below by its tid is the one that
	// did the reading, not one the goroutine left meanwhile.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p, err := ReadProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != os.Getpid() || p.PPID != os.Getppid() || len(p.Cmdline) == 0 || p.Cmdline[0] != os.Args[0] || p.UID != os.Getuid() {
		t.Errorf("%+v", p)
	}
	// The process state is its main thread's, which may sleep while the
	// goroutine running this test runs on another thread.
	if (p.State != "R" && p.State != "S") || p.VmRSS <= 0 || p.StartTime == 0 || p.NumThreads < 1 || len(p.Threads) < 1 {
		t.Errorf("state %s rss %d start %d threads %d/%d", p.State, p.VmRSS, p.StartTime, p.NumThreads, len(p.Threads))
	}
	if p.Started.IsZero() || time.Since(p.Started) < 0 || time.Since(p.Started) > time.Hour {
		t.Errorf("started %v", p.Started)
	}
	if p.Threads[0].TID != p.PID {
		t.Errorf("first thread %d is not the main one", p.Threads[0].TID)
	}
	// This thread is running, in the read(2) of its own syscall file.
	self := syscall.Gettid()
	for _, th := range p.Threads {
		if th.TID == self && (th.State != "R" || (th.Syscall != -1 && SyscallName(th.Syscall) != "read")) {
			t.Errorf("reading thread: %+v", th)
		}
	}
}

func TestSleepingChild(t *testing.T) {
	cmd := spawn(t, "sleep", "PROCFS_MARK=a=b")
	pid := cmd.Process.Pid
	// The Go runtime's threads settle down shortly after start (on a
	// loaded machine, not so shortly).
	p := waitProc(t, pid, allAsleep)
	if p.State != "S" || p.PPID != os.Getpid() || p.Comm != filepath.Base(os.Args[0])[:min(15, len(filepath.Base(os.Args[0])))] {
		t.Errorf("%+v", p)
	}
	for _, th := range p.Threads {
		if th.State != "S" {
			t.Errorf("thread %+v not sleeping", th)
		}
	}
	cpu, err := SampleCPU(pid, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(cpu) != len(p.Threads) {
		t.Errorf("%d samples for %d threads", len(cpu), len(p.Threads))
	}
	for tid, c := range cpu {
		if c > 5 {
			t.Errorf("sleeping thread %d at %.1f%% CPU", tid, c)
		}
	}
	p.CPU, p.CPUInterval = cpu, 300*time.Millisecond
	d := strings.Join(Diagnose(p), "\n")
	if !strings.Contains(d, fmt.Sprintf("all %d threads sleeping", len(p.Threads))) || !strings.Contains(d, "none used CPU over a 300ms sample") {
		t.Errorf("diagnosis:\n%s", d)
	}
	env, err := Env(pid)
	if err != nil || env["PROCFS_MARK"] != "a=b" || env[helperEnv] != "sleep" {
		t.Errorf("env: %v (%d vars)", err, len(env))
	}
}

func TestSpinningChild(t *testing.T) {
	pid := spawn(t, "spin").Process.Pid
	// The spinner shares the CPUs with whatever else runs (other test
	// binaries under go test ./...): a few tries for it to show.
	var cpu map[int]float64
	for try := 0; try < 5; try++ {
		var err error
		if cpu, err = SampleCPU(pid, 500*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if cpu[pid] >= 30 {
			break
		}
	}
	if cpu[pid] < 30 {
		t.Errorf("spinning main thread at %.1f%%: %v", cpu[pid], cpu)
	}
	for tid, c := range cpu {
		if tid != pid && c > cpu[pid] {
			t.Errorf("thread %d (%.0f%%) busier than the spinning main thread (%.0f%%)", tid, c, cpu[pid])
		}
	}
	p, err := ReadProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	p.CPU, p.CPUInterval = cpu, 500*time.Millisecond
	d := strings.Join(Diagnose(p), "\n")
	if cpu[pid] >= busyPercent && !strings.Contains(d, "main thread at") {
		t.Errorf("diagnosis:\n%s", d)
	}
	t.Logf("spin: %.0f%%\n%s", cpu[pid], d)
}

func TestThreadedChild(t *testing.T) {
	pid := spawn(t, "threads").Process.Pid
	// "ready" comes 200 ms after the readers were started, which on a
	// loaded machine does not mean they are all blocked in read(2) yet.
	p := waitProc(t, pid, func(p *Process) bool {
		n := 0
		for _, th := range p.Threads {
			if strings.HasPrefix(th.Comm, "w) (") && th.State == "S" {
				n++
			}
		}
		return n == 4 && p.NumThreads == len(p.Threads)
	})
	if p.Comm != "odd) (main" || p.Threads[0].Comm != "odd) (main" {
		t.Errorf("comm %q", p.Comm)
	}
	if p.NumThreads != len(p.Threads) {
		t.Errorf("num_threads %d, %d read", p.NumThreads, len(p.Threads))
	}
	readers := 0
	for _, th := range p.Threads {
		if strings.HasPrefix(th.Comm, "w) (") {
			readers++
			if th.State != "S" || (th.Syscall != -1 && SyscallName(th.Syscall) != "read") {
				t.Errorf("reader %+v", th)
			}
		}
	}
	if readers != 4 {
		t.Errorf("%d named reader threads: %+v", readers, p.Threads)
	}
	sp := p.AsStacks(3, "node-a")
	if sp.Rank != 3 || sp.Source != "proc" || len(sp.Threads) != len(p.Threads) || !sp.Threads[0].IsMain || sp.Threads[1].IsMain {
		t.Errorf("as stacks: %+v", sp)
	}
}

// A Python process whose threads all wait on Events: every thread in a
// futex wait (skipped without python3).
func TestPythonFutex(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	cmd := exec.Command(py, "-c", `import threading, sys
e = threading.Event()
for _ in range(3): threading.Thread(target=e.wait, daemon=True).start()
print("ready", flush=True)
e.wait()`)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatal(l, err)
	}
	// "ready" comes before the main thread's own wait, and on a loaded
	// machine the threads may take a while to reach theirs.
	futexWaits := func(d string) bool {
		return strings.Contains(d, "all 4 threads sleeping in futex waits") && strings.Contains(d, "main thread sleeping in futex")
	}
	p := waitProc(t, cmd.Process.Pid, func(p *Process) bool { return futexWaits(strings.Join(Diagnose(p), "\n")) })
	if d := strings.Join(Diagnose(p), "\n"); !futexWaits(d) {
		t.Errorf("diagnosis after 10 s:\n%s\n%+v", d, p.Threads)
	}
}

func TestDeadAndZombie(t *testing.T) {
	cmd := spawn(t, "exit")
	pid := cmd.Process.Pid
	// Until it is waited for, the child is a zombie.
	p := waitProc(t, pid, func(p *Process) bool { return p.State == "Z" })
	if p.State != "Z" || len(p.Cmdline) != 0 {
		t.Fatalf("zombie: %+v", p)
	}
	if d := Diagnose(p); len(d) != 2 || !strings.Contains(d[1], "zombie") || !strings.Contains(d[1], "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("%q", d)
	}
	cmd.Wait()
	for _, err := range []error{
		func() error { _, err := ReadProcess(pid); return err }(),
		func() error { _, err := Env(pid); return err }(),
		func() error { _, err := SampleCPU(pid, time.Millisecond); return err }(),
	} {
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(pid)) {
			t.Errorf("dead pid: %v", err)
		}
	}
	if _, err := ReadProcess(0); err == nil {
		t.Error("pid 0")
	}
}

// waitProc reads pid until ready says yes, for up to 10 s, and returns
// the last reading either way: the caller's checks then say what is wrong.
func waitProc(t *testing.T, pid int, ready func(*Process) bool) *Process {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := ReadProcess(pid)
		if err != nil {
			t.Fatal(err)
		}
		if ready(p) || time.Now().After(deadline) {
			return p
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// allAsleep: the process and each of its threads. The process state is
// read from its own stat file, a moment apart from the threads' files, so
// it is checked as well.
func allAsleep(p *Process) bool {
	if p.State != "S" {
		return false
	}
	for _, th := range p.Threads {
		if th.State != "S" {
			return false
		}
	}
	return true
}
