package procfacts

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/stacks"
)

// Thresholds of Diagnose.
const (
	busyPercent = 90 // a thread at or above this over a sample spins
	idlePercent = 1  // below this it did nothing
	maxListed   = 4  // threads named per line
)

// SyscallName names a system call number of this architecture ("futex"),
// or "" for one Diagnose has no use for or does not know.
func SyscallName(n int) string { return syscallNames[n] }

// Diagnose turns a reading into short lines of evidence: what the process
// is (first), then, most telling first, zombie or stopped, threads in D
// state, threads that spin (with p.CPU from SampleCPU) or run, what the
// main thread waits in, and what all the threads sleep in. It states what
// /proc shows and what that usually means, never more: /proc has no
// Python frames.
func Diagnose(p *Process) []string {
	var out []string
	add := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }

	what := p.Comm
	if len(p.Cmdline) > 0 {
		what = strings.Join(p.Cmdline[:min(len(p.Cmdline), 3)], " ")
		if len(p.Cmdline) > 3 {
			what += " …"
		}
	}
	up := ""
	if !p.Started.IsZero() {
		up = ", up " + roundDur(time.Since(p.Started))
	}
	add("pid %d (%s): state %s, %d thread(s), RSS %s%s, CPU time %s user + %s system",
		p.PID, what, p.State, len(p.Threads), bytesText(p.VmRSS), up, roundDur(p.UTime), roundDur(p.STime))

	switch p.State {
	case "Z", "X":
		add("process is a zombie: it has exited and its parent (pid %d) has not reaped it; nothing runs in it", p.PPID)
		return out
	case "T":
		add("process stopped (T): SIGSTOP or a job-control stop; it makes no progress until SIGCONT")
	case "t":
		add("process stopped by a tracer (t): a debugger or py-spy holds it; it makes no progress until released")
	}

	sample := ""
	if p.CPU != nil {
		sample = fmt.Sprintf(" over a %s sample", roundDur(p.CPUInterval))
	}
	main, others := p.split()

	// D state: no signal is handled until the call returns.
	var inD []Task
	for _, t := range others {
		if t.State == "D" {
			inD = append(inD, t)
		}
	}
	if main != nil && main.State == "D" {
		cpu := ""
		if c, ok := p.CPU[main.TID]; ok {
			cpu = fmt.Sprintf(", %.0f%% CPU%s", c, sample)
		}
		add("main thread in D state (uninterruptible sleep) in %s%s: blocked in the kernel, usually file-system or device I/O (NFS, Lustre, a GPU driver); no signal, faulthandler's included, is handled until it returns", waitText(*main), cpu)
	}
	if len(inD) > 0 {
		add("%d other thread(s) in D state: %s", len(inD), listTasks(inD, waitText))
	}

	// Spinning or running.
	if p.CPU != nil {
		var busy []Task
		if main != nil && p.CPU[main.TID] >= busyPercent {
			add("main thread at %.0f%% CPU%s: spinning (a Python loop, or a CUDA/NCCL wait that polls); holding the GIL, it keeps the agent from answering: use faulthandler", p.CPU[main.TID], sample)
		}
		for _, t := range others {
			if p.CPU[t.TID] >= busyPercent {
				busy = append(busy, t)
			}
		}
		slices.SortStableFunc(busy, func(a, b Task) int { return cmp.Compare(p.CPU[b.TID], p.CPU[a.TID]) })
		for i, t := range busy {
			if i == maxListed {
				add("%d more thread(s) at %d%% CPU or more", len(busy)-i, busyPercent)
				break
			}
			add("thread %s (tid %d) at %.0f%% CPU%s", t.Comm, t.TID, p.CPU[t.TID], sample)
		}
	} else {
		var running []Task
		for _, t := range p.Threads {
			if t.State == "R" {
				running = append(running, t)
			}
		}
		if len(running) > 0 {
			add("%d thread(s) running (R) when read: %s; SampleCPU tells a spin from a passing moment", len(running), listTasks(running, nil))
		}
	}

	// What the main thread waits in.
	if main != nil && main.State == "S" {
		add("main thread sleeping in %s: %s", waitText(*main), meaning(*main))
	}

	// Everyone asleep.
	asleep, futex := 0, 0
	kinds := map[string]int{}
	maxCPU := 0.0
	for _, t := range p.Threads {
		if t.State == "S" || t.State == "I" {
			asleep++
			kinds[waitOf(t)]++
			if isFutex(t) {
				futex++
			}
		}
		maxCPU = max(maxCPU, p.CPU[t.TID])
	}
	quiet := ""
	if p.CPU != nil {
		if maxCPU < idlePercent {
			quiet = fmt.Sprintf(", none used CPU%s", sample)
		} else {
			quiet = fmt.Sprintf(", busiest %.0f%% CPU%s", maxCPU, sample)
		}
	}
	n := len(p.Threads)
	switch {
	case n == 0 || asleep < n:
	case futex == n:
		add("all %d threads sleeping in futex waits%s: likely blocked in a collective or on a lock (a condition variable, the GIL), nothing runs", n, quiet)
	default:
		var ks []string
		for _, k := range slices.Sorted(maps.Keys(kinds)) {
			ks = append(ks, k+" ×"+strconv.Itoa(kinds[k]))
		}
		slices.SortStableFunc(ks, func(a, b string) int { return cmp.Compare(kinds[countKey(b)], kinds[countKey(a)]) })
		add("all %d threads sleeping%s: %s", n, quiet, strings.Join(ks, ", "))
	}
	return out
}

// split returns the main thread (tid == pid) and the others.
func (p *Process) split() (*Task, []Task) {
	var main *Task
	var others []Task
	for i := range p.Threads {
		if p.Threads[i].TID == p.PID {
			main = &p.Threads[i]
		} else {
			others = append(others, p.Threads[i])
		}
	}
	return main, others
}

// waitOf names what a sleeping thread waits in: the system call when
// known, else the kernel function.
func waitOf(t Task) string {
	if s := SyscallName(t.Syscall); s != "" {
		return s
	}
	if t.WChan != "" {
		return t.WChan
	}
	if t.Syscall >= 0 {
		return "syscall " + strconv.Itoa(t.Syscall)
	}
	return "unknown"
}

// waitText is "futex (wchan futex_do_wait)": both, when both are known.
func waitText(t Task) string {
	s := waitOf(t)
	if t.WChan != "" && t.WChan != s {
		s += " (wchan " + t.WChan + ")"
	}
	return s
}

func isFutex(t Task) bool { return waitOf(t) == "futex" || strings.Contains(t.WChan, "futex") }

// meaning says what a main thread's wait usually is in a training job.
func meaning(t Task) string {
	w, sc := t.WChan, SyscallName(t.Syscall)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(w, s) {
				return true
			}
		}
		return false
	}
	switch {
	case isFutex(t):
		return "a lock or condition variable (the GIL, a queue, a CUDA/NCCL wait in blocking-sync mode, a collective's work.wait)"
	case has("nfs", "rpc_", "lustre", "ll_", "osc_", "fuse", "ceph"):
		return "a network file system"
	case has("nvidia", "uvm", "os_acquire"):
		return "the GPU driver"
	case has("pipe"):
		return "a pipe: a child process or a data-loader worker"
	case has("sk_wait", "inet_csk", "unix_stream", "tcp", "wait_woken") || slices.Contains([]string{"recvfrom", "recvmsg", "accept", "accept4", "connect"}, sc):
		return "the network: a TCPStore or rendezvous, or a peer"
	case sc == "wait4" || has("do_wait"):
		return "a child process to exit"
	case has("ep_poll", "poll", "select") || strings.Contains(sc, "poll") || strings.Contains(sc, "select"):
		return "file descriptors (an event loop, sockets or pipes)"
	case has("nanosleep") || strings.HasSuffix(sc, "nanosleep"):
		return "a timed sleep (time.sleep, a retry or polling loop)"
	}
	return "see the wait channel; py-spy or faulthandler show the Python side"
}

// listTasks is "pt_autograd_0 (tid 12, …), …", at most maxListed.
func listTasks(ts []Task, detail func(Task) string) string {
	var s []string
	for i, t := range ts {
		if i == maxListed {
			s = append(s, fmt.Sprintf("%d more", len(ts)-i))
			break
		}
		d := ""
		if detail != nil {
			d = ", " + detail(t)
		}
		s = append(s, fmt.Sprintf("%s (tid %d%s)", t.Comm, t.TID, d))
	}
	return strings.Join(s, ", ")
}

func countKey(s string) string {
	i := strings.LastIndex(s, " ×")
	if i < 0 {
		return s
	}
	return s[:i]
}

func roundDur(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	case d >= time.Minute:
		return d.Round(time.Second).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

func bytesText(n int64) string {
	const k = 1024
	switch {
	case n >= k*k*k:
		return fmt.Sprintf("%.1f GiB", float64(n)/(k*k*k))
	case n >= k*k:
		return fmt.Sprintf("%.0f MiB", float64(n)/(k*k))
	}
	return fmt.Sprintf("%d kB", n/k)
}

// AsStacks turns the reading into a stacks.Process (Source "proc"):
// threads without Python frames but with their names, states and wait
// channels, to merge with other ranks' stacks. The main thread is the one
// whose tid is the pid.
func (p *Process) AsStacks(rank int, host string) stacks.Process {
	sp := stacks.Process{PID: p.PID, Rank: rank, Host: host, Source: stacks.SourceProc, CapturedAt: p.CapturedAt}
	for _, t := range p.Threads {
		sp.Threads = append(sp.Threads, stacks.Thread{NativeID: t.TID, Name: t.Comm, IsMain: t.TID == p.PID,
			Frames: []stacks.Frame{}, State: t.State, WChan: t.WChan})
	}
	return sp
}
