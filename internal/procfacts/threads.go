// A process's threads as Linux's /proc shows them (ReadProcess): the
// evidence that needs no agent, for a process too wedged to answer (stuck
// holding the GIL, or in D state where no signal is handled, faulthandler's
// included). Thread states, kernel wait channels, system calls and CPU use
// tell a process that spins from one that sleeps, and a lock from I/O.
package procfacts

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ClockTicks is USER_HZ, the unit of /proc's utime, stime and start time.
// The kernel reports these in USER_HZ whatever its internal HZ, and USER_HZ
// is 100 on every architecture Linux runs PyTorch on (x86, arm64, ppc64,
// s390; sysconf(_SC_CLK_TCK) says the same), so no cgo call is made.
const ClockTicks = 100

// Process is one process.
type Process struct {
	PID     int      `json:"pid"`
	Comm    string   `json:"comm"` // the kernel's 15-character name
	Cmdline []string `json:"cmdline"`
	// State is the main thread's: R running, S sleeping, D uninterruptible
	// sleep, Z zombie, T stopped, t traced, I idle (kernel), X dead.
	State string `json:"state"`
	PPID  int    `json:"ppid"`
	// StartTime is field 22 of stat, clock ticks after boot: with the pid
	// it names the process (pid reuse changes it). Started is the same as
	// a time, when /proc/stat's btime is readable.
	StartTime  uint64        `json:"start_time"`
	Started    time.Time     `json:"started,omitzero"`
	UTime      time.Duration `json:"utime"` // whole process, all threads
	STime      time.Duration `json:"stime"`
	NumThreads int           `json:"num_threads"`
	VmRSS      int64         `json:"vm_rss_bytes"` // 0 for kernel threads
	// UID is the real user id (the first of status's Uid line): the one
	// kill(2) checks a sender against, with the saved one.
	UID int `json:"uid"`
	// CapturedAt is when the reading started.
	CapturedAt time.Time `json:"captured_at"`
	Threads    []Task    `json:"threads"`
	// CPU is per-thread CPU use in percent over CPUInterval, when the caller
	// filled it from SampleCPU; Diagnose uses it.
	CPU         map[int]float64 `json:"cpu_percent,omitempty"`
	CPUInterval time.Duration   `json:"cpu_interval,omitempty"`
}

// Task is one thread.
type Task struct {
	TID   int    `json:"tid"`
	Comm  string `json:"comm"` // the thread's name (prctl PR_SET_NAME, pthread_setname_np)
	State string `json:"state"`
	// WChan is the kernel function a sleeping thread waits in
	// (futex_wait_queue, ep_poll, nfs_…); "" when running or hidden.
	WChan string        `json:"wchan,omitempty"`
	UTime time.Duration `json:"utime"`
	STime time.Duration `json:"stime"`
	// Syscall is the number of the system call the thread is blocked in
	// (the first field of task/<tid>/syscall), or -1: running, not in a
	// system call, or unreadable (it needs ptrace access). SyscallName
	// names the common ones.
	Syscall int `json:"syscall"`
}

// ReadProcess reads /proc/<pid>. A process that exits while it is read
// gives an error that names the pid and wraps os.ErrNotExist; a thread
// that exits meanwhile is left out.
func ReadProcess(pid int) (*Process, error) { return readProcess("/proc", pid) }

func readProcess(root string, pid int) (*Process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: not a process id", pid)
	}
	dir := filepath.Join(root, strconv.Itoa(pid))
	now := time.Now().UTC()
	st, err := StatAt(root, pid)
	if err != nil {
		return nil, err
	}
	p := &Process{PID: pid, CapturedAt: now, Comm: st.Comm, State: st.State, PPID: st.PPID, StartTime: st.Start,
		UTime: ticks(st.UTime), STime: ticks(st.STime), NumThreads: st.Threads}
	if bt, ok := bootTime(root); ok {
		p.Started = bt.Add(ticks(st.Start))
	}

	args, err := CmdlineAt(root, pid)
	if err != nil {
		return nil, procErr(pid, "cmdline", err)
	}
	if len(args) != 1 || args[0] != "" {
		p.Cmdline = args // a lone empty argument reads as none
	}

	status, err := StatusAt(root, pid)
	if err != nil {
		return nil, err
	}
	p.VmRSS, p.UID = status.VmRSS, status.UID[0]

	ents, err := os.ReadDir(filepath.Join(dir, "task"))
	if err != nil {
		return nil, procErr(pid, "task", err)
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		t, err := readTask(root, pid, tid)
		if err != nil {
			if gone(err) {
				continue // the thread exited
			}
			return nil, fmt.Errorf("pid %d: thread %d: %w", pid, tid, err)
		}
		p.Threads = append(p.Threads, t)
	}
	if len(p.Threads) == 0 {
		// Every thread went while the list was read: the process is gone.
		if _, err := os.Stat(dir); err != nil {
			return nil, procErr(pid, "task", err)
		}
	}
	slices.SortFunc(p.Threads, func(a, b Task) int { return a.TID - b.TID })
	return p, nil
}

func readTask(root string, pid, tid int) (Task, error) {
	dir := filepath.Join(root, strconv.Itoa(pid), "task", strconv.Itoa(tid))
	st, err := TaskStatAt(root, pid, tid)
	if err != nil {
		return Task{}, err
	}
	t := Task{TID: tid, Comm: st.Comm, State: st.State, UTime: ticks(st.UTime), STime: ticks(st.STime), Syscall: -1}
	// wchan and syscall are best effort: hidden (kptr_restrict, ptrace
	// checks) or racing with the thread's exit.
	if b, err := os.ReadFile(filepath.Join(dir, "wchan")); err == nil {
		if w := strings.TrimSpace(string(b)); w != "0" {
			t.WChan = w
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "syscall")); err == nil {
		f, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		if n, err := strconv.Atoi(f); err == nil && n >= 0 {
			t.Syscall = n
		}
	}
	return t, nil
}

// bootTime is /proc/stat's btime, for Started.
func bootTime(root string) (time.Time, bool) {
	f, err := os.Open(filepath.Join(root, "stat"))
	if err != nil {
		return time.Time{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "btime "); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return time.Unix(n, 0), true
			}
		}
	}
	return time.Time{}, false
}

// SampleCPU measures each thread's CPU use over interval, in percent of
// one CPU (0–100): near 100 spins, near 0 sleeps. It uses the scheduler's
// nanosecond counters (task/<tid>/schedstat) when the kernel has them,
// else utime+stime, whose 10 ms ticks make intervals under a second
// coarse. Threads that start or end during the interval are left out.
func SampleCPU(pid int, interval time.Duration) (map[int]float64, error) {
	return sampleCPU("/proc", pid, interval)
}

func sampleCPU(root string, pid int, interval time.Duration) (map[int]float64, error) {
	a, err := cpuTimes(root, pid)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	time.Sleep(interval)
	b, err := cpuTimes(root, pid)
	if err != nil {
		return nil, err
	}
	wall := time.Since(t0)
	out := make(map[int]float64, len(b))
	for tid, y := range b {
		x, ok := a[tid]
		if !ok {
			continue
		}
		var used time.Duration
		if x.ns >= 0 && y.ns >= 0 {
			used = time.Duration(y.ns - x.ns)
		} else {
			used = ticks(y.ticks - x.ticks)
		}
		out[tid] = min(100, max(0, 100*used.Seconds()/wall.Seconds()))
	}
	return out, nil
}

type cpuTime struct {
	ns    int64 // schedstat, -1 when unreadable
	ticks uint64
}

func cpuTimes(root string, pid int) (map[int]cpuTime, error) {
	dir := filepath.Join(root, strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, procErr(pid, "task", err)
	}
	out := make(map[int]cpuTime, len(ents))
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := TaskStatAt(root, pid, tid)
		if err != nil {
			continue // exited, or unreadable
		}
		c := cpuTime{ns: -1, ticks: st.UTime + st.STime}
		if b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat")); err == nil {
			f, _, _ := strings.Cut(string(b), " ")
			if n, err := strconv.ParseInt(f, 10, 64); err == nil {
				c.ns = n
			}
		}
		out[tid] = c
	}
	if len(out) == 0 {
		return nil, procErr(pid, "task", fs.ErrNotExist)
	}
	return out, nil
}

func ticks(n uint64) time.Duration { return time.Duration(n) * (time.Second / ClockTicks) }

func gone(err error) bool { return Gone(err) }

func procErr(pid int, file string, err error) error { return Err(pid, file, err) }
