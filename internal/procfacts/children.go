package procfacts

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// What a rank's main thread may be waiting for outside any collective:
// its child processes (DataLoader workers, an upload command) and the
// file or FIFO it reads. Everything here is the job's data (command
// lines, paths): clipped and kept as written, for the caller to quote.

// Child is one process a rank waits for, as /proc shows it.
type Child struct {
	PID, PPID int
	Comm      string // the kernel's 15-character name
	// Cmdline is its command line, arguments joined by spaces, clipped to
	// MaxCmdline bytes (CmdTruncated then); "" when unreadable.
	Cmdline      string
	CmdTruncated bool `json:",omitempty"`
	State        string
	WChan        string
	// AgeS is how long it has run (seconds, -1 unknown) and CPUS the CPU
	// time it used in that time: a child that used almost none of its age
	// has been waiting most of it. IdleS is how long its main thread has
	// not run, when it sleeps (S, D), from the scheduler's clock (SchedIdle);
	// -1 unknown.
	AgeS, CPUS, IdleS float64
	// IO is the read or open its main thread is blocked in, nil when none.
	IO *IOWait `json:",omitempty"`
	// Depth is 1 for a child, 2 for a grandchild (a shell's command, a
	// forkserver's worker).
	Depth int
}

// IOWait is a thread blocked in a read or an open, and on what.
type IOWait struct {
	Syscall string // read, pread64, readv, open, openat, ...
	// Path is the file (clipped to MaxPath bytes, Truncated then): the fd's
	// link (a path, or "pipe:[n]", "socket:[n]"), or the path being
	// opened; "" when it could not be read.
	Path      string
	Truncated bool `json:",omitempty"`
	// Kind is fifo, pipe, socket, file, or "" when not known. A path read
	// in a pipe wait, or opened in wait_for_partner, is a FIFO. For wait4
	// and waitid Kind is child and Path the pid argument (-1: any child).
	Kind string
}

// Bounds on what is read of one process: the job's own strings.
const (
	MaxCmdline = 256
	MaxPath    = 256
	// MaxScan bounds the /proc entries one Descendants scan reads.
	MaxScan = 1 << 16
)

// Tree is the node's processes by parent pid, from one scan of
// <root>/*/stat (the kernel's children files need CONFIG_PROC_CHILDREN
// and name only one thread's children).
type Tree map[int][]int

// ReadTree scans at most MaxScan processes; it stops at the context's
// end and returns what it saw.
func ReadTree(ctx context.Context, root string) (Tree, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	t := Tree{}
	for i, e := range ents {
		if i >= MaxScan || (i%256 == 0 && ctx.Err() != nil) {
			break
		}
		p, err := strconv.Atoi(e.Name())
		if err != nil || p <= 0 {
			continue
		}
		st, err := StatAt(root, p)
		if err != nil || st.PPID <= 0 {
			continue
		}
		t[st.PPID] = append(t[st.PPID], p)
	}
	return t, nil
}

// Descendants lists the children of pid (depth 1) and, to depth, their
// children: at most max, children first, each level by pid; more is how
// many were left out.
func (t Tree) Descendants(pid, depth, max int) (kids []int, more int) {
	level := []int{pid}
	for d := 0; d < depth && len(level) > 0; d++ {
		var next []int
		for _, p := range level {
			next = append(next, t[p]...)
		}
		sort.Ints(next)
		for _, k := range next {
			if len(kids) < max {
				kids = append(kids, k)
			} else {
				more++
			}
		}
		level = next
	}
	return kids, more
}

// ReadChild reads what /proc says of pid; what cannot be read is left
// empty. uptime is the node's /proc/uptime in seconds (Uptime), 0 to
// leave AgeS unknown.
func ReadChild(root string, pid, depth int, uptime float64) (Child, error) {
	st, err := StatAt(root, pid)
	if err != nil {
		return Child{}, err
	}
	c := Child{PID: pid, PPID: st.PPID, Comm: st.Comm, State: st.State, Depth: depth, AgeS: -1, IdleS: -1,
		CPUS: float64(st.UTime+st.STime) / clockTicks}
	if uptime > 0 {
		c.AgeS = max(0, uptime-float64(st.Start)/clockTicks)
	}
	c.WChan = readSmall(filepath.Join(root, strconv.Itoa(pid), "wchan"), 128)
	if st.State == "S" || st.State == "D" {
		c.IdleS = SchedIdle(root, pid)
	}
	if b, ok := readBounded(filepath.Join(root, strconv.Itoa(pid), "cmdline"), MaxCmdline); ok || len(b) > 0 {
		s := strings.TrimRight(string(bytes.ReplaceAll(bytes.TrimRight(b, "\x00"), []byte{0}, []byte{' '})), " ")
		c.Cmdline, c.CmdTruncated = Clip(s, MaxCmdline)
		c.CmdTruncated = c.CmdTruncated || !ok
	}
	c.IO = ReadIOWait(root, pid, pid, c.WChan)
	return c, nil
}

// SchedIdle is how long pid's main thread has not run, in seconds: the
// scheduler's se.exec_start (when it last ran, ms on the scheduler's
// clock) against the reading thread's own, which runs now and so reads
// that clock's now. -1 when either is unreadable.
func SchedIdle(root string, pid int) float64 {
	last := schedExecStart(filepath.Join(root, strconv.Itoa(pid), "sched"))
	now := schedExecStart(filepath.Join(root, "thread-self", "sched"))
	if last <= 0 || now <= 0 {
		return -1
	}
	return max(0, (now-last)/1000)
}

func schedExecStart(path string) float64 {
	b, _ := readBounded(path, 4096)
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "se.exec_start" {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// Uptime is the node's uptime in seconds (<root>/uptime), 0 unreadable.
func Uptime(root string) float64 {
	f := strings.Fields(readSmall(filepath.Join(root, "uptime"), 64))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// ReadIOWait says what thread tid of pid is blocked reading, opening or
// waiting for a child in, from its syscall file (readable by the
// process's owner or root) and the fd's link or, for an open, the path
// argument read from its memory (bounded); nil when it is in no such
// call or it cannot be read. wchan is the thread's wait channel (it
// tells a FIFO from a file; "": read here). Nothing is
// opened or stat'ed at the path itself: it may be on a hung mount.
func ReadIOWait(root string, pid, tid int, wchan string) *IOWait {
	dir := filepath.Join(root, strconv.Itoa(pid))
	sc := readSmall(filepath.Join(dir, "task", strconv.Itoa(tid), "syscall"), 256)
	name, args := parseSyscall(sc)
	if name == "" {
		return nil
	}
	if wchan == "" {
		wchan = readSmall(filepath.Join(dir, "task", strconv.Itoa(tid), "wchan"), 128)
	}
	w := &IOWait{Syscall: name}
	pipeWait := strings.Contains(wchan, "pipe")
	switch name {
	case "wait4", "waitid":
		w.Kind = "child" // os.waitpid, Popen.wait: the pid is its argument
		if len(args) >= 2 {
			pid := int32(args[0])
			if name == "waitid" {
				pid = int32(args[1]) // waitid(idtype, id, ...)
			}
			w.Path = strconv.Itoa(int(pid))
		}
	case "read", "pread64", "readv", "preadv", "preadv2":
		if len(args) < 1 {
			return w
		}
		link, err := os.Readlink(filepath.Join(dir, "fd", strconv.FormatUint(args[0]&0xffffffff, 10)))
		if err != nil {
			return w
		}
		w.Path, w.Truncated = Clip(link, MaxPath)
		switch {
		case strings.HasPrefix(link, "pipe:["):
			w.Kind = "pipe"
		case strings.HasPrefix(link, "socket:["):
			w.Kind = "socket"
		case strings.HasPrefix(link, "/") && pipeWait:
			w.Kind = "fifo"
		case strings.HasPrefix(link, "/"):
			w.Kind = "file"
		}
	default: // open, openat, openat2
		dirfd, ptr := uint64(atFDCWD), uint64(0)
		if name == "open" && len(args) >= 1 {
			ptr = args[0]
		} else if len(args) >= 2 {
			dirfd, ptr = args[0], args[1]
		}
		p := readCString(filepath.Join(dir, "mem"), ptr, 4096)
		if p == "" {
			return w
		}
		if !strings.HasPrefix(p, "/") {
			base := "cwd"
			if dirfd != atFDCWD && dirfd&0xffffffff != atFDCWD&0xffffffff {
				base = "fd/" + strconv.FormatUint(dirfd&0xffffffff, 10)
			}
			if d, err := os.Readlink(filepath.Join(dir, base)); err == nil {
				p = filepath.Join(d, p)
			}
		}
		w.Path, w.Truncated = Clip(p, MaxPath)
		if strings.Contains(wchan, "wait_for_partner") || strings.Contains(wchan, "fifo") {
			w.Kind = "fifo" // fifo_open waits for a writer there
		}
	}
	return w
}

// atFDCWD is AT_FDCWD (-100) as the syscall file prints it.
const atFDCWD = uint64(0xffffffffffffff9c)

// parseSyscall reads a syscall file ("nr arg0 … arg5 sp pc"): the call's
// name when it is a read or an open this package follows, and its
// arguments.
func parseSyscall(s string) (string, []uint64) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return "", nil // "running", or nothing
	}
	nr, err := strconv.Atoi(f[0])
	if err != nil {
		return "", nil
	}
	name := ioCalls[runtime.GOARCH][nr]
	if name == "" {
		return "", nil
	}
	var args []uint64
	for _, a := range f[1:min(len(f), 7)] {
		v, err := strconv.ParseUint(strings.TrimPrefix(a, "0x"), 16, 64)
		if err != nil {
			return "", nil
		}
		args = append(args, v)
	}
	return name, args
}

// ioCalls are the read, open and wait-for-a-child calls by number, per
// architecture.
var ioCalls = map[string]map[int]string{
	"amd64": {0: "read", 2: "open", 17: "pread64", 19: "readv", 61: "wait4", 247: "waitid", 257: "openat", 295: "preadv", 327: "preadv2", 437: "openat2"},
	"arm64": {56: "openat", 63: "read", 65: "readv", 67: "pread64", 69: "preadv", 95: "waitid", 260: "wait4", 286: "preadv2", 437: "openat2"},
}

// readCString reads a NUL-terminated string at addr of the process's
// memory (mem), at most n bytes; "" when unreadable or not ended.
func readCString(mem string, addr uint64, n int) string {
	if addr == 0 || addr > 1<<62 {
		return ""
	}
	f, err := os.Open(mem)
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, n)
	// A string near the end of a mapping: read what there is.
	k, _ := f.ReadAt(buf, int64(addr))
	if i := bytes.IndexByte(buf[:k], 0); i > 0 {
		return string(buf[:i])
	}
	return ""
}

// readSmall reads at most n bytes of a /proc file, trimmed; "" on error.
func readSmall(path string, n int) string {
	b, _ := readBounded(path, n)
	return strings.TrimSpace(string(b))
}

// readBounded reads at most n bytes; ok is false when the file had more.
func readBounded(path string, n int) ([]byte, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, true
	}
	defer f.Close()
	buf := make([]byte, n+1)
	k := 0
	for k < len(buf) {
		m, err := f.Read(buf[k:])
		k += m
		if err != nil || m == 0 {
			break
		}
	}
	if k > n {
		return buf[:n], false
	}
	return buf[:k], true
}

// Clip cuts s to at most n bytes on a rune boundary and makes it valid
// UTF-8; cut says it was shortened. The caller quotes it (%q): a name is
// the job's data and may hold anything but NUL.
func Clip(s string, n int) (string, bool) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s, false
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i], true
}
