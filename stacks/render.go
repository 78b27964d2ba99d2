package stacks

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Bounds of the text: whatever the rank count, the groups are Merge's
// (MaxGroups), each with at most maxTextFrames frame lines.
const (
	maxTextFrames    = 8
	maxTextProcesses = 16
	maxTextThreads   = 8
	maxTextFailures  = 5
	// againSet: a rank set the summary line gave in full is cut shorter
	// when named again.
	againSet = 40
)

// TextOptions is what the caller knows beyond the merge.
type TextOptions struct {
	// WholeJob: the merge is the whole job's, gathered from the node
	// daemons; the caller says which nodes answered, so the count line
	// leaves the ranks out, and says Answered of Asked when some did not.
	WholeJob        bool
	Asked, Answered int
	// Processes, when set, is listed after the groups: each process's
	// threads unmerged (get_stacks' merge=false).
	Processes []Process
}

// Text is the one rendering of a merge, for the get_stacks tool and the
// CLI alike: the one-line summary (long rank sets cut), then each group's
// stack innermost first with repeated frames folded, then what was
// collapsed, cut or failed; every list bounded, every cut said with the
// argument that shows the rest. Job text is quoted (jobtext).
func (m Merged) Text(o TextOptions) string {
	var b strings.Builder
	b.WriteString(rankset.ShortSets(m.Summary) + "\n")
	fmt.Fprintf(&b, "%d process(es)", m.Processes)
	if m.Ranks != "" && !o.WholeJob { // the whole job: the caller's scope says who is missing
		b.WriteString(" (" + rankset.Words(m.Ranks) + ")")
	}
	fmt.Fprintf(&b, ", %d thread(s), %d distinct stack(s)", m.Threads, m.Stacks)
	if o.WholeJob && o.Answered < o.Asked {
		fmt.Fprintf(&b, "; partial: %d of %d node(s) answered (Scope below)", o.Answered, o.Asked)
	}
	b.WriteString(".\n")
	for i, g := range m.Groups {
		tag := ""
		switch {
		case g.Outlier:
			tag = "ODD ONE OUT "
		case g.Idle:
			tag = "idle "
		}
		who := g.Where
		if g.Ranks != "" {
			who = strings.Replace(who, g.Ranks, rankset.ShortTo(g.Ranks, againSet), 1)
		}
		fmt.Fprintf(&b, "[%d] %s%s, %s: %d thread(s)", i+1, tag, g.Role, who, g.Count)
		if len(g.States) > 0 {
			b.WriteString(", states " + statesText(g.States))
			if len(g.Members) > 0 && g.Members[0].WChan != "" {
				b.WriteString(" (wchan " + jobtext.Quote(g.Members[0].WChan, jobtext.Name) + ")")
			}
		}
		b.WriteString("\n")
		writeFrames(&b, g.Frames, "    ")
		if g.FramesTruncated {
			b.WriteString("    … outermost frames cut by the capture itself\n")
		}
	}
	if m.IdleThreads > 0 {
		fmt.Fprintf(&b, "Idle: %d thread(s) in %d stack(s) waiting in the standard library, not listed (include_idle=true lists them).\n", m.IdleThreads, m.IdleGroups)
	}
	if m.OmittedGroups > 0 {
		fmt.Fprintf(&b, "Cut: %d more stack group(s) (%d thread(s)) over max_groups: pass max_groups up to 50, or ranks to narrow.\n", m.OmittedGroups, m.OmittedThreads)
	}
	if o.Processes != nil {
		writeProcesses(&b, o.Processes)
	}
	if len(m.Failed) > 0 {
		b.WriteString("Capture failed or partial:\n")
		for i, f := range m.Failed {
			if i == maxTextFailures {
				fmt.Fprintf(&b, "  … %d more (structured content: failed)\n", len(m.Failed)-i+m.FailedOmitted)
				break
			}
			fmt.Fprintf(&b, "  %s, %s: %s\n", Who(f.PID, f.Rank, f.Host), jobtext.Word(f.Source), jobtext.Quote(f.Err, jobtext.Message))
		}
		if m.FailedOmitted > 0 && len(m.Failed) <= maxTextFailures {
			fmt.Fprintf(&b, "  … and %d more\n", m.FailedOmitted)
		}
	}
	return b.String()
}

// Who names a process: "rank 3 (pid 12)", "pid 12", with its host
// quoted.
func Who(pid, rank int, host string) string {
	who := "pid " + strconv.Itoa(pid)
	if rank >= 0 {
		who = fmt.Sprintf("rank %d (pid %d)", rank, pid)
	}
	if host != "" {
		who += " on " + jobtext.Quote(host, jobtext.Name)
	}
	return who
}
func statesText(states map[string]int) string {
	var st []string
	for s, n := range states {
		st = append(st, fmt.Sprintf("%s×%d", jobtext.Token(s, 16), n))
	}
	slices.Sort(st)
	return strings.Join(st, " ")
}

// writeFrames writes a stack innermost first, one line a frame, a run of
// the same function in the same file folded into one (×n), at most
// maxTextFrames lines; the rest is counted.
func writeFrames(b *strings.Builder, frames []Frame, indent string) {
	if len(frames) == 0 {
		b.WriteString(indent + "<no Python frame>\n")
		return
	}
	lines := 0
	for i := 0; i < len(frames); {
		j := i + 1
		for j < len(frames) && frames[j].File == frames[i].File && frames[j].Function == frames[i].Function && frames[i].File != "" {
			j++
		}
		if lines == maxTextFrames {
			writeOwnFrames(b, frames[i:], indent)
			return
		}
		f := frames[i]
		switch {
		case f.File == "": // Merge's "... N frames omitted ..." marker
			fmt.Fprintf(b, "%s%s (max_frames raises the limit)\n", indent, f.Function)
		default:
			b.WriteString(indent + frameLine(f))
			if j-i > 1 {
				fmt.Fprintf(b, " ×%d", j-i)
			}
			b.WriteString("\n")
		}
		lines++
		i = j
	}
}

// frameLine is one frame as the text lists it: function, short file, line.
func frameLine(f Frame) string {
	line := "?"
	if f.Line > 0 {
		line = strconv.Itoa(f.Line)
	}
	return quoteFunc(f.Function) + " " + jobtext.QuoteTail(shortFile(f.File), jobtext.Path) + ":" + line
}

// maxOwnFrames is how many of the job's own frames the text still lists
// past the frame limit.
const maxOwnFrames = 3

// writeOwnFrames ends a cut stack: the count of the outer frames left
// out, and the innermost few of them that are the job's own code (not a
// library's, not the standard library's), since the line a verdict names
// (a training loop under DataLoader internals) is often one of them.
func writeOwnFrames(b *strings.Builder, rest []Frame, indent string) {
	var own []Frame
	for _, f := range rest {
		if f.File != "" && !LibraryFile(f.File) {
			if len(own) == maxOwnFrames {
				break
			}
			own = append(own, f)
		}
	}
	if len(own) == 0 {
		fmt.Fprintf(b, "%s… %d more outer frame(s) (structured content: frames)\n", indent, len(rest))
		return
	}
	fmt.Fprintf(b, "%s… %d more outer frame(s) (structured content: frames); the job's own among them:\n", indent, len(rest))
	for _, f := range own {
		b.WriteString(indent + frameLine(f) + "\n")
	}
}

// LibraryFile is whether a frame's file is an installed package's, the
// standard library's or a frozen module's: not the job's own code.
func LibraryFile(f string) bool {
	return strings.Contains(f, "-packages/") || strings.Contains(f, "/lib/python") || strings.Contains(f, "/lib64/python") || strings.HasPrefix(f, "<")
}

// shortFile keeps a library file's path from its package on
// (torch/distributed/distributed_c10d.py) and the standard library's by
// its name; a user's file stays as captured, so it can be opened.
func shortFile(f string) string {
	if i := strings.LastIndex(f, "site-packages/"); i >= 0 {
		return f[i+len("site-packages/"):]
	}
	if i := strings.LastIndex(f, "dist-packages/"); i >= 0 {
		return f[i+len("dist-packages/"):]
	}
	if strings.Contains(f, "/lib/python3") {
		return path.Base(f)
	}
	return f
}

// writeProcesses is the unmerged listing: each process's threads, each
// thread's innermost frames, bounded.
func writeProcesses(b *strings.Builder, procs []Process) {
	b.WriteString("Per process (merge=false):\n")
	for i, p := range procs {
		if i == maxTextProcesses {
			fmt.Fprintf(b, "… %d more process(es): pass pids or ranks to see them\n", len(procs)-i)
			return
		}
		fmt.Fprintf(b, "%s, %s: %d thread(s)\n", Who(p.PID, p.Rank, p.Host), jobtext.Word(p.Source), len(p.Threads))
		for k, t := range p.Threads {
			if k == maxTextThreads {
				fmt.Fprintf(b, "  … %d more thread(s): pass pids=[%d] alone\n", len(p.Threads)-k, p.PID)
				break
			}
			name := "-"
			if t.Name != "" {
				name = jobtext.Quote(t.Name, jobtext.Name)
			}
			if t.IsMain {
				name += " (main)"
			}
			if t.State != "" {
				name += " state " + jobtext.Token(t.State, 16)
			}
			b.WriteString("  " + name + ":\n")
			writeFrames(b, t.Frames, "    ")
		}
	}
}
