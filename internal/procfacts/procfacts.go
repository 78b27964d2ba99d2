// Package procfacts reads the facts about a process on this node that
// several packages need, in one place: /proc/<pid>/stat (state, start
// time), /proc/<pid>/status (owner, caught signals), /proc/<pid>/environ,
// and the identity file an agent leaves in its pid directory; and it
// decides whether a file in a shared directory may speak for the process
// it names (trust.go); and a process's threads with their states, wait
// channels, system calls and CPU use (threads.go, threadwords.go), for a
// process too wedged to answer. One /proc reader: storage and agent both
// build on it, so the two can never read the same file two ways.
package procfacts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Proc is where /proc is mounted; functions named ...At take another root
// (tests build fake trees).
const Proc = "/proc"

// Stat is what /proc/<pid>/stat (or task/<tid>/stat) says.
type Stat struct {
	Comm  string // the kernel's 15-character name
	State string // R, S, D, Z, T, t, I, X
	PPID  int
	// UTime and STime are in clock ticks (USER_HZ).
	UTime, STime uint64
	Threads      int
	// Start is field 22, clock ticks after boot: with the pid it names
	// one process (a reused pid has another start time).
	Start uint64
}

// ParseStat reads a stat line. The name is between the first '(' and the
// LAST ')': it may itself hold spaces and parentheses ("a) (b"), never a
// NUL; the fields after it cannot hold ')'.
func ParseStat(s string) (Stat, error) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return Stat{}, fmt.Errorf("no (name) in %q", Trunc(s))
	}
	f := strings.Fields(s[end+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 20 {
		return Stat{}, fmt.Errorf("%d fields after the name, want 20 or more: %q", len(f), Trunc(s))
	}
	st := Stat{Comm: s[open+1 : end], State: f[0]}
	var errs []error
	num := func(i int) uint64 {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("field %d %q", i+3, f[i]))
		}
		return v
	}
	st.PPID = int(num(1))
	st.UTime, st.STime = num(11), num(12)
	st.Threads = int(num(17))
	st.Start = num(19)
	if len(errs) > 0 {
		return Stat{}, fmt.Errorf("bad number(s) in stat: %w", errors.Join(errs...))
	}
	return st, nil
}

// StatAt reads <root>/<pid>/stat.
func StatAt(root string, pid int) (Stat, error) {
	if pid <= 0 {
		return Stat{}, fmt.Errorf("pid %d: not a process id", pid)
	}
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return Stat{}, Err(pid, "stat", err)
	}
	st, err := ParseStat(string(b))
	if err != nil {
		return Stat{}, fmt.Errorf("pid %d: %s: %w", pid, filepath.Join(root, strconv.Itoa(pid), "stat"), err)
	}
	return st, nil
}

// StartTime is a process's start time as MEMT and identity files record
// it (field 22 of /proc/<pid>/stat).
func StartTime(pid int) (uint64, error) {
	st, err := StatAt(Proc, pid)
	return st.Start, err
}

// Alive reports whether pid runs and, when start is not 0, is the same
// process that recorded it. A zombie does not run: it exited and waits
// for its parent to reap it (a rank whose launcher was killed with it
// stays one where nothing reaps orphans).
func Alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	st, err := StatAt(Proc, pid)
	if err != nil {
		return true // unreadable /proc: trust kill
	}
	if st.State == "Z" || st.State == "X" {
		return false
	}
	return start == 0 || st.Start == start
}

// Gone reports whether err says the process or thread no longer exists
// (ENOENT once it is reaped, ESRCH from some files while it exits).
func Gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// Err names the pid and the /proc file; a process that is gone wraps
// os.ErrNotExist whatever errno said it.
func Err(pid int, file string, err error) error {
	if Gone(err) {
		return fmt.Errorf("pid %d: no such process (it exited, or never ran on this node) reading /proc/%d/%s: %w", pid, pid, file, os.ErrNotExist)
	}
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("pid %d: /proc/%d/%s: permission denied (another user's process: run as that user or root): %w", pid, pid, file, err)
	}
	return fmt.Errorf("pid %d: /proc/%d/%s: %w", pid, pid, file, err)
}

// Trunc shortens s for an error message.
func Trunc(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// TaskStatAt reads <root>/<pid>/task/<tid>/stat: one thread's state and
// CPU times, through the one stat parser.
func TaskStatAt(root string, pid, tid int) (Stat, error) {
	path := filepath.Join(root, strconv.Itoa(pid), "task", strconv.Itoa(tid), "stat")
	b, err := os.ReadFile(path)
	if err != nil {
		return Stat{}, Err(pid, fmt.Sprintf("task/%d/stat", tid), err)
	}
	st, err := ParseStat(string(b))
	if err != nil {
		return Stat{}, fmt.Errorf("pid %d: %s: %w", pid, path, err)
	}
	return st, nil
}
