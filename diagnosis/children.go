package diagnosis

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// subCauses names what a CPU-side culprit waits for outside any
// collective, from the kernel's facts the evidence read (RankFacts.Waits):
// its DataLoader workers (a worker blocked opening a FIFO nobody writes),
// a child process (an upload command that never returns), or its own
// read or open of a file or a FIFO. The category stays cpu_stall: these
// are where the stall is, said in its evidence and in how to confirm it.
// The command lines and paths are the job's data: quoted, clipped
// (jobtext).
func subCauses(hs []Hypothesis, in Input) []Hypothesis {
	for i, h := range hs {
		if h.Category != CatCPUStall || len(h.culprits) == 0 {
			continue
		}
		var confirm []string
		for n, r := range h.culprits {
			if n == 3 {
				break // the first culprits say it; the rest are alike
			}
			f := in.Ranks[r]
			if f == nil || !f.Alive || f.Waits == nil {
				continue
			}
			line, how, short := waitWords(f)
			if line == "" {
				continue
			}
			hs[i].Evidence = append(hs[i].Evidence, Evidence{"proc", line})
			if n == 0 {
				hs[i].waits = short
			}
			if how != "" {
				confirm = append(confirm, how)
			}
		}
		if len(confirm) > 0 {
			hs[i].Confirm = strings.Join(confirm, "; ") + "; " + h.Confirm
		}
	}
	return hs
}

// waitKind is what the main thread waits for among its children
// (evidence.ChildWait), or a child its wait4 names; "" neither.
func waitKind(t *stacks.Thread, io *procfacts.IOWait) string {
	if k := evidence.ChildWait(t); k != "" {
		return k
	}
	if io != nil && io.Kind == "child" {
		return "child process"
	}
	return ""
}

// waitWords is the evidence line for one rank's wait, how to confirm it
// and a few words for the summary; "" when the facts say nothing specific.
func waitWords(f *RankFacts) (line, confirm, short string) {
	w := f.Waits
	kind := waitKind(f.Main, w.IO)
	if kind == "" || len(w.Children) == 0 {
		if w.IO == nil || w.IO.Kind == "child" || w.IO.Kind == "pipe" {
			if kind != "" {
				return fmt.Sprintf("rank %d's main thread waits for its %s, but none could be read in /proc%s", f.Rank, kind, skipped(w)), "", "waiting for its " + kind
			}
			return "", "", ""
		}
		state := ""
		if st := mainState(f); st != "" {
			state = fmt.Sprintf(" (state %s%s)", st, wchanWords(mainWChan(f)))
		}
		return fmt.Sprintf("rank %d's main thread is blocked%s %s", f.Rank, state, ioWords(w.IO)),
			fmt.Sprintf("/proc/%d/syscall and ls -l /proc/%d/fd on its node: the same call", f.PID, f.PID),
			"blocked " + ioShort(w.IO)
	}
	kids := rankChildren(w)
	var parts, others []string
	for n, c := range kids {
		// The first always; then up to three that show a wait of their
		// own; the rest (a resource tracker, idle workers) by pid only.
		// A shell's command (subprocess with shell=True) is shown too.
		if n == 0 || (len(parts) < 3 && (relevance(c, w) <= 3 || c.PPID == kids[0].PID)) {
			parts = append(parts, childWords(c, kind))
		} else {
			others = append(others, strconv.Itoa(c.PID))
		}
	}
	if len(others) > 0 {
		pids := "pid "
		if len(others) > 1 {
			pids = "pids "
		}
		parts = append(parts, "also "+pids+strings.Join(others, ", ")+" (its other children, no wait of their own seen)")
	}
	if w.More > 0 {
		parts = append(parts, fmt.Sprintf("%d more not read", w.More))
	}
	noun := kind
	if len(kids)+w.More > 1 && relevance(kids[0], w) > 0 { // not one the wait4 names
		noun = strings.Replace(kind+"s", "processs", "processes", 1)
	}
	line = fmt.Sprintf("rank %d's main thread waits for its %s: %s%s", f.Rank, noun, strings.Join(parts, "; "), skipped(w))
	c := kids[0]
	if c.State == "R" {
		// Busy, not blocked: a slow or looping child holds the rank the
		// same way, and is worth telling apart.
		line += fmt.Sprintf("; pid %d is running, not blocked: slow or looping rather than stuck", c.PID)
	}
	short = fmt.Sprintf("waiting for its %s pid %d", kind, c.PID)
	if kind == "child process" && c.Cmdline != "" {
		short += " (" + jobtext.Quote(c.Cmdline, 40) + ellipsis(c.CmdTruncated) + ")"
	}
	if c.IO != nil && c.IO.Kind != "child" && c.IO.Kind != "" {
		short += ", blocked " + ioShort(c.IO)
	}
	if c.Main != nil {
		confirm = fmt.Sprintf("get_stacks {\"pids\":[%d]}: its worker still there", c.PID)
	} else {
		confirm = fmt.Sprintf("/proc/%d/wchan, /proc/%d/syscall and ls -l /proc/%d/fd on its node: still blocked there", c.PID, c.PID, c.PID)
	}
	return line, confirm, short
}

// rankChildren orders the children by what they say of the wait: the one
// the main thread's wait4 names, then those blocked on a file or a FIFO,
// then those with frames, then the rest (a multiprocessing resource
// tracker reads its pipe for the whole run: last).
func rankChildren(w *evidence.Waits) []evidence.SubProcess {
	kids := append([]evidence.SubProcess(nil), w.Children...)
	sort.SliceStable(kids, func(i, j int) bool { return relevance(kids[i], w) < relevance(kids[j], w) })
	return kids
}

// relevance: 0 the child the wait4 names, 1 blocked on a file or a FIFO,
// 2 in disk sleep, 3 frames from its agent, 4 the rest, 5 a helper.
func relevance(c evidence.SubProcess, w *evidence.Waits) int {
	waited := -2
	if w.IO != nil && w.IO.Kind == "child" {
		waited, _ = strconv.Atoi(w.IO.Path)
	}
	switch {
	case c.PID == waited:
		return 0
	case c.IO != nil && (c.IO.Kind == "fifo" || c.IO.Kind == "file" || strings.HasPrefix(c.IO.Syscall, "open")):
		return 1
	case c.State == "D":
		return 2
	case c.Main != nil:
		return 3
	case strings.Contains(c.Cmdline, "resource_tracker") || strings.Contains(c.Cmdline, "forkserver"):
		return 5
	}
	return 4
}

// childWords describes one child: pid, command (for a child process:
// the job's data, quoted), state, wait channel, age and CPU, what it is
// blocked in, and where its frames are when its agent answered.
func childWords(c evidence.SubProcess, kind string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d", c.PID)
	if c.Depth > 1 {
		fmt.Fprintf(&b, " (a grandchild, under pid %d)", c.PPID)
	}
	if kind == "child process" && c.Cmdline != "" {
		fmt.Fprintf(&b, ", command %s%s", jobtext.Quote(c.Cmdline, jobtext.Line), ellipsis(c.CmdTruncated))
	}
	fmt.Fprintf(&b, " (state %s%s", jobtext.Token(c.State, 16), wchanWords(c.WChan))
	if c.IdleS >= 1 {
		fmt.Fprintf(&b, ", asleep for the last %s", secs(c.IdleS))
	}
	if c.AgeS >= 0 {
		fmt.Fprintf(&b, "; up %s, %.1f s of CPU", secs(c.AgeS), c.CPUS)
	}
	b.WriteString(")")
	switch {
	case c.IO != nil && c.IO.Kind == "child":
		b.WriteString(" waiting for its own child")
	case c.IO != nil && c.IO.Kind != "":
		b.WriteString(" " + ioWords(c.IO))
	}
	if c.Main != nil {
		fmt.Fprintf(&b, ", its main thread at %s (its agent)", frameWords(c.Main))
	}
	return b.String()
}

// ioWords is "in read of "/x", a FIFO (...)" for a blocked read or open.
func ioWords(io *procfacts.IOWait) string {
	verb := "reading"
	if strings.HasPrefix(io.Syscall, "open") {
		verb = "opening"
	}
	if io.Path == "" {
		return fmt.Sprintf("%s a file (%s) whose name could not be read", verb, jobtext.Token(io.Syscall, jobtext.Name))
	}
	cut := ellipsis(io.Truncated)
	what := ""
	switch {
	case io.Kind == "fifo" && verb == "opening":
		what = ", a FIFO: opening it waits until a writer opens it, and none has"
	case io.Kind == "fifo":
		what = ", a FIFO: nothing is written to it"
	case io.Kind == "file":
		what = ", a file: the read does not return (a slow or hung file system?)"
	}
	return fmt.Sprintf("%s %s%s (%s)%s", verb, jobtext.QuoteTail(io.Path, jobtext.Path), cut, jobtext.Token(io.Syscall, jobtext.Name), what)
}

// ioShort is "opening FIFO "name"" for the summary: the base name only,
// clipped.
func ioShort(io *procfacts.IOWait) string {
	verb := "reading"
	if strings.HasPrefix(io.Syscall, "open") {
		verb = "opening"
	}
	kind := io.Kind
	if kind == "fifo" {
		kind = "FIFO"
	}
	if io.Path == "" {
		return verb + " a " + kind
	}
	return fmt.Sprintf("%s %s %s%s", verb, jobtext.Token(kind, jobtext.Name), jobtext.Quote(path.Base(io.Path), 40), ellipsis(io.Truncated))
}

func ellipsis(cut bool) string {
	if cut {
		return "…"
	}
	return ""
}

func secs(s float64) string {
	if s < 10 {
		return fmt.Sprintf("%.1f s", s)
	}
	return fmt.Sprintf("%.0f s", s)
}

func skipped(w *evidence.Waits) string {
	if len(w.Skipped) == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d not read: another user's, or gone)", len(w.Skipped))
}
