// Package procfs reads what Linux's /proc says about a process: the
// evidence that needs no agent, for a process too wedged to answer (stuck
// holding the GIL, or in D state where no signal is handled, faulthandler's
// included). Thread states, kernel wait channels, system calls and CPU use
// tell a process that spins from one that sleeps, and a lock from I/O.
package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ClockTicks is USER_HZ, the unit of /proc's utime, stime and start time.
// The kernel reports these in USER_HZ whatever its internal HZ, and USER_HZ
// is 100 on every architecture Linux runs PyTorch on (x86, arm64, ppc64,
// s390; sysconf(_SC_CLK_TCK) says the same), so no cgo call is made.
const ClockTicks = 100

// MaxEnvBytes bounds what Env reads.
const MaxEnvBytes = 4 << 20

// ErrTruncated: Env stopped at MaxEnvBytes.
var ErrTruncated = errors.New("truncated")

// Proc is one process.
type Proc struct {
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
func ReadProcess(pid int) (*Proc, error) { return readProcess("/proc", pid) }

func readProcess(root string, pid int) (*Proc, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: not a process id", pid)
	}
	dir := filepath.Join(root, strconv.Itoa(pid))
	now := time.Now().UTC()
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return nil, procErr(pid, "stat", err)
	}
	st, err := parseStat(string(b))
	if err != nil {
		return nil, fmt.Errorf("pid %d: %s: %w", pid, filepath.Join(dir, "stat"), err)
	}
	p := &Proc{PID: pid, CapturedAt: now, Comm: st.comm, State: st.state, PPID: st.ppid, StartTime: st.start,
		UTime: ticks(st.utime), STime: ticks(st.stime), NumThreads: st.threads}
	if bt, ok := bootTime(root); ok {
		p.Started = bt.Add(ticks(st.start))
	}

	b, err = os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return nil, procErr(pid, "cmdline", err)
	}
	if b = bytes.TrimSuffix(b, []byte{0}); len(b) > 0 {
		p.Cmdline = strings.Split(string(b), "\x00")
	}

	b, err = os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return nil, procErr(pid, "status", err)
	}
	p.VmRSS, p.UID = parseStatus(string(b))

	ents, err := os.ReadDir(filepath.Join(dir, "task"))
	if err != nil {
		return nil, procErr(pid, "task", err)
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		t, err := readTask(filepath.Join(dir, "task", e.Name()), tid)
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

func readTask(dir string, tid int) (Task, error) {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return Task{}, err
	}
	st, err := parseStat(string(b))
	if err != nil {
		return Task{}, fmt.Errorf("%s: %w", filepath.Join(dir, "stat"), err)
	}
	t := Task{TID: tid, Comm: st.comm, State: st.state, UTime: ticks(st.utime), STime: ticks(st.stime), Syscall: -1}
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

type stat struct {
	comm, state         string
	ppid, threads       int
	utime, stime, start uint64
}

// parseStat reads /proc/<pid>/stat and task/<tid>/stat. The name is
// between the first '(' and the LAST ')': it may itself hold spaces and
// parentheses ("a) (b"), never a NUL; the fields after it cannot hold ')'.
func parseStat(s string) (stat, error) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return stat{}, fmt.Errorf("no (name) in %q", trunc(s))
	}
	f := strings.Fields(s[end+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 20 {
		return stat{}, fmt.Errorf("%d fields after the name, want 20 or more: %q", len(f), trunc(s))
	}
	st := stat{comm: s[open+1 : end], state: f[0]}
	var errs []error
	num := func(i int) uint64 {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("field %d %q", i+3, f[i]))
		}
		return v
	}
	st.ppid = int(num(1))
	st.utime, st.stime = num(11), num(12)
	st.threads = int(num(17))
	st.start = num(19)
	if len(errs) > 0 {
		return stat{}, fmt.Errorf("bad number(s) in stat: %w", errors.Join(errs...))
	}
	return st, nil
}

// parseStatus takes VmRSS (kB → bytes) and the real UID from
// /proc/<pid>/status.
func parseStatus(s string) (rss int64, uid int) {
	uid = -1
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		switch {
		case k == "VmRSS" && len(f) >= 1:
			if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				rss = n << 10 // the unit is always kB
			}
		case k == "Uid" && len(f) >= 1:
			if n, err := strconv.Atoi(f[0]); err == nil {
				uid = n
			}
		}
	}
	return rss, uid
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

// Env reads the process's environment as it was at exec (later setenv
// calls in the process do not show), at most MaxEnvBytes: past that, the
// entries read are returned with an error wrapping ErrTruncated. Reading
// another user's process needs root.
func Env(pid int) (map[string]string, error) { return readEnv("/proc", pid, MaxEnvBytes) }

func readEnv(root string, pid, limit int) (map[string]string, error) {
	f, err := os.Open(filepath.Join(root, strconv.Itoa(pid), "environ"))
	if err != nil {
		return nil, procErr(pid, "environ", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, procErr(pid, "environ", err)
	}
	var tail error
	if len(b) > limit {
		// Drop the entry the limit cut.
		b = b[:limit]
		if i := bytes.LastIndexByte(b, 0); i >= 0 {
			b = b[:i]
		} else {
			b = nil
		}
		tail = fmt.Errorf("pid %d: environ over %d bytes: %w", pid, limit, ErrTruncated)
	}
	env := map[string]string{}
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte("="))
		if !ok || len(k) == 0 {
			continue
		}
		if _, dup := env[string(k)]; !dup { // getenv takes the first
			env[string(k)] = string(v)
		}
	}
	return env, tail
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
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat"))
		if err != nil {
			continue // exited
		}
		st, err := parseStat(string(b))
		if err != nil {
			continue
		}
		c := cpuTime{ns: -1, ticks: st.utime + st.stime}
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

// gone: the process or thread no longer exists (ENOENT once it is
// reaped, ESRCH from some files while it exits).
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// procErr names the pid and the file; a process that is gone wraps
// os.ErrNotExist whatever errno said it.
func procErr(pid int, file string, err error) error {
	if gone(err) {
		return fmt.Errorf("pid %d: no such process (it exited, or never ran on this node) reading /proc/%d/%s: %w", pid, pid, file, os.ErrNotExist)
	}
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("pid %d: /proc/%d/%s: permission denied (another user's process: run as that user or root): %w", pid, pid, file, err)
	}
	return fmt.Errorf("pid %d: /proc/%d/%s: %w", pid, pid, file, err)
}

func trunc(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}
