package tools

import (
	"fmt"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// Bounds of the agents' tools' text.
const (
	maxTextProcLines = 32
	// maxTextProcBytes keeps the list near 2,000 tokens when the lines
	// are long (command lines that differ, endings).
	maxTextProcBytes = 6 << 10
	maxTextOthers    = 5
	maxTextOutput    = 16 << 10
	maxTextTraceback = 30
	maxTextConfigDoc = 100
	// maxTextCommand is the structured content's bound (maxCommand): the
	// flags of a long command line need it, and a launch's ranks share
	// one line, said once.
	maxTextCommand = maxCommand
)

// commandText is a process's command line for the text: the interpreter
// by its name (the script and its arguments tell the processes apart),
// long arguments cut in the middle so that every flag stays (jobtext.Args).
func commandText(p ProcessView) string {
	argv := p.argv
	if argv == nil {
		argv = strings.Split(p.Command, " ")
	}
	if len(argv) > 1 && strings.Contains(argv[0], "/") {
		argv = append([]string{argv[0][strings.LastIndexByte(argv[0], '/')+1:]}, argv[1:]...)
	}
	return jobtext.Args(argv, maxTextCommand)
}

// ModelText is the summary, then one line per process (pid, rank, how it
// ended, eval), then the other data dirs' and the untrusted entries.
func (r ListProcessesResult) ModelText() string {
	var b strings.Builder
	b.WriteString(r.Summary + ".\n")
	prevCmd := ""
	for i, p := range r.Processes {
		if i == maxTextProcLines || b.Len() > maxTextProcBytes {
			fmt.Fprintf(&b, "… %d more process(es) in structured content: processes\n", len(r.Processes)-i)
			break
		}
		state := "alive"
		if !p.Alive {
			state = "exited"
			if p.Stale {
				state += ", stale socket"
			}
		}
		fmt.Fprintf(&b, "  pid %d rank %d (local %d, world %d", p.PID, p.Rank, p.LocalRank, p.WorldSize)
		if p.Role != "" {
			b.WriteString(", role " + jobtext.Token(p.Role, jobtext.Name))
		}
		fmt.Fprintf(&b, "): %s, agent %s, %d ring(s)", state, p.Kind, p.Rings)
		if p.Torch != "" {
			b.WriteString(", torch " + jobtext.Token(p.Torch, jobtext.Name))
		}
		if p.Eval {
			b.WriteString(", eval allowed")
		}
		if p.Ended != "" {
			b.WriteString("; ended: " + clip(p.Ended, 200))
		}
		if p.Command != "" {
			// The ranks of one launch share their command line: said once.
			if cmd := commandText(p); cmd == prevCmd {
				b.WriteString("; cmd: as above")
			} else {
				b.WriteString("; cmd: " + jobtext.Quote(cmd, 2*maxTextCommand))
				prevCmd = cmd
			}
		}
		b.WriteString("\n")
	}
	for i, o := range r.OtherDataDir {
		if i == maxTextOthers {
			fmt.Fprintf(&b, "  … %d more in structured content: other_data_dir\n", len(r.OtherDataDir)-i)
			break
		}
		fmt.Fprintf(&b, "  other data dir: pid %d writes to %s (left out unless named by pid)\n", o.PID, jobtext.QuoteTail(o.DataDir, jobtext.Path))
	}
	for i, u := range r.Untrusted {
		if i == maxTextOthers {
			fmt.Fprintf(&b, "  … %d more in structured content: untrusted\n", len(r.Untrusted)-i)
			break
		}
		fmt.Fprintf(&b, "  untrusted: pid %d uid %d alive %v: %s\n", u.PID, u.UID, u.Alive, clip(u.Reason, 160))
	}
	if r.Truncated {
		fmt.Fprintf(&b, "Cut: over %d entries per list; the first %d are listed.\n", maxProcesses, maxProcesses)
	}
	return b.String()
}

// ModelText is one line per key: key = value, settable or not, its doc.
func (r GetConfigResult) ModelText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d config key(s)", stacks.Who(r.PID, r.Rank, ""), len(r.Values))
	if len(r.Keys) > 0 {
		n := 0
		for _, k := range r.Keys {
			if k.Settable {
				n++
			}
		}
		fmt.Fprintf(&b, ", %d settable with set_config", n)
	}
	b.WriteString(".\n")
	if len(r.Keys) > 0 {
		for _, k := range r.Keys {
			set := ""
			if k.Settable {
				set = " [settable]"
			}
			fmt.Fprintf(&b, "  %s = %s%s", jobtext.Token(k.Key, jobtext.Name), jobtext.Quote(k.Value, 200), set)
			if k.Doc != "" {
				b.WriteString(" — " + jobtext.Quote(k.Doc, maxTextConfigDoc))
			}
			b.WriteString("\n")
		}
		return b.String()
	}
	for _, k := range sortedKeys(r.Values) {
		fmt.Fprintf(&b, "  %s = %s\n", jobtext.Token(k, jobtext.Name), jobtext.Quote(r.Values[k], 200))
	}
	return b.String()
}

// ModelText is the status, then the output as printed (cut past 16 KiB,
// said), then the traceback.
func (r EvalPythonResult) ModelText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "eval in %s: %s in %.0f ms", stacks.Who(r.PID, r.Rank, ""), r.Status, r.DurationMS)
	if r.Status == "timeout" {
		b.WriteString(" (the code keeps running in its thread)")
	}
	b.WriteString(".\n")
	out := r.Output
	if out == "" {
		b.WriteString("(no output)\n")
	} else {
		// What the process printed is its text: a quote a line.
		b.WriteString("Output (a line a quote):\n")
		switch left, cut := quoteLines(&b, out, "  ", maxTextOutput); {
		case left > 0:
			fmt.Fprintf(&b, "… output cut: the last %d of %d bytes not shown (structured content: output has it all; print less)\n", left, len(out))
		case cut:
			b.WriteString("… long lines cut (structured content: output has them whole; print less)\n")
		}
	}
	if len(r.Traceback) > 0 {
		b.WriteString("Traceback:\n")
		tb := r.Traceback
		if len(tb) > maxTextTraceback {
			fmt.Fprintf(&b, "  … %d earlier line(s) cut (structured content: traceback)\n", len(tb)-maxTextTraceback)
			tb = tb[len(tb)-maxTextTraceback:] // the innermost lines say what failed
		}
		quoteLines(&b, strings.Join(tb, ""), "  ", maxTextOutput)
	}
	return b.String()
}

// maxQuotedLine bounds one line of a multi-line job text.
const maxQuotedLine = 1 << 10

// quoteLines writes job text that has lines (a process's output, a
// traceback) a line a quote, each indented and bounded, until about n
// bytes of text; it returns how many bytes of s it left out after the
// last line shown, and whether a line shown was cut (its quote says how
// much).
func quoteLines(b *strings.Builder, s, indent string, n int) (left int, cut bool) {
	start := b.Len()
	for s != "" {
		room := n - (b.Len() - start)
		if room <= 0 {
			return len(s), cut
		}
		line, after, _ := strings.Cut(s, "\n")
		q := jobtext.Quote(line, min(maxQuotedLine, max(room, 16)))
		cut = cut || !strings.HasSuffix(q, jobtext.Close)
		b.WriteString(indent + q + "\n")
		s = after
	}
	return 0, cut
}
