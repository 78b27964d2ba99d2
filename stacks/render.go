package stacks

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// WriteText renders the merge for a person at a terminal: the summary,
// then each group with its stack innermost first, then what was collapsed,
// omitted or could not be captured.
func (m Merged) WriteText(w io.Writer) error {
	p := &printer{w: w}
	who := ""
	if m.Ranks != "" {
		who = " (" + rankWords(m.Ranks) + ")"
	}
	p.f("Stacks of %d process(es)%s: %d thread(s), %d distinct stack(s)\n", m.Processes, who, m.Threads, m.Stacks)
	p.f("%s\n", m.Summary)
	for i, g := range m.Groups {
		tag := ""
		switch {
		case g.Outlier:
			tag = "ODD ONE OUT  "
		case g.Idle:
			tag = "idle  "
		}
		p.f("\n[%d] %s%s: %s (%d thread(s) in %d process(es))\n", i+1, tag, g.Role, g.Where, g.Count, g.Processes)
		if len(g.Names) > 0 {
			names := make([]string, len(g.Names))
			for i, n := range g.Names {
				names[i] = jobtext.Quote(n, jobtext.Name)
			}
			p.f("    names: %s\n", strings.Join(names, ", "))
		}
		if len(g.States) > 0 {
			var st []string
			for s, n := range g.States {
				st = append(st, fmt.Sprintf("%s×%d", s, n))
			}
			slices.Sort(st)
			wchan := ""
			if len(g.Members) > 0 && g.Members[0].WChan != "" {
				wchan = " (first: wchan " + jobtext.Quote(g.Members[0].WChan, jobtext.Name) + ")"
			}
			p.f("    states: %s%s\n", strings.Join(st, " "), wchan)
		}
		if len(g.Frames) == 0 {
			p.f("    <no Python frame>\n")
		}
		for _, f := range g.Frames {
			if f.File == "" {
				p.f("      %s\n", f.Function)
				continue
			}
			line := "?"
			if f.Line > 0 {
				line = fmt.Sprint(f.Line)
			}
			p.f("    %s  %s:%s\n", quoteFunc(f.Function), jobtext.QuoteTail(f.File, jobtext.Path), line)
		}
		if g.FramesTruncated {
			p.f("      ... (outermost frames cut by the capture)\n")
		}
	}
	if m.IdleThreads > 0 {
		p.f("\nIdle: %d thread(s) in %d stack(s) waiting in the standard library (threading, queue, selectors, …), not listed.\n", m.IdleThreads, m.IdleGroups)
	}
	if m.OmittedGroups > 0 {
		p.f("Omitted: %d more group(s), %d thread(s), over the group limit.\n", m.OmittedGroups, m.OmittedThreads)
	}
	if len(m.Failed) > 0 {
		p.f("\nCapture failed or partial:\n")
		for _, f := range m.Failed {
			who := fmt.Sprintf("pid %d", f.PID)
			if f.Rank >= 0 {
				who = fmt.Sprintf("rank %d (pid %d)", f.Rank, f.PID)
			}
			if f.Host != "" {
				who += " on " + jobtext.Quote(f.Host, jobtext.Name)
			}
			p.f("  %s, %s: %s\n", who, cmpOrDash(f.Source), jobtext.Quote(f.Err, jobtext.Line))
		}
		if m.FailedOmitted > 0 {
			p.f("  ... and %d more\n", m.FailedOmitted)
		}
	}
	return p.err
}

func cmpOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}
