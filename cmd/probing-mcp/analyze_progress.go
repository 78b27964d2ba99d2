package main

import (
	"fmt"
	"io"
	"os"
	"time"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/bytesize"
)

// analyzeLimits reads --max-memory, and checks PROBING_FR_* at start so
// that a malformed one is a usage error. The ceiling lowers the runtime's
// soft limit to just under it while the dumps are loaded and analysed.
func analyzeLimits(maxMemory string) (fr.Limits, error) {
	var lim fr.Limits
	if maxMemory != "" {
		n, ok := bytesize.Parse(maxMemory)
		if !ok {
			return lim, fmt.Errorf("--max-memory %q is not a positive size (e.g. 16GiB or 17179869184)", maxMemory)
		}
		lim.MaxMemory = n
	}
	if _, err := fr.ResolveLimits(lim); err != nil {
		return lim, err
	}
	return lim, nil
}

// progressPrinter shows a long analysis's progress on stderr: one line
// rewritten in place on a terminal, a line every few seconds otherwise
// (only when asked: a log file or a pipe gets nothing by default).
type progressPrinter struct {
	w      io.Writer
	on     bool
	tty    bool
	every  time.Duration
	start  time.Time
	last   time.Time
	phase  string
	pend   string // the newest line not yet written
	shown  bool   // a line is on the terminal
	lastPr fr.Progress
}

func newProgressPrinter(w io.Writer, asked, set bool) *progressPrinter {
	p := &progressPrinter{w: w, tty: isTerminal(w), start: time.Now(), every: 2 * time.Second}
	p.on = asked || (!set && p.tty)
	if p.tty {
		p.every = 100 * time.Millisecond
	}
	return p
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// report takes one Progress (from the load's or analysis's workers, one
// call at a time); it writes at most every p.every, and each phase's end.
func (p *progressPrinter) report(pr fr.Progress) {
	if !p.on {
		return
	}
	now := time.Now()
	p.lastPr = pr
	p.pend = progressLine(pr, now.Sub(p.start))
	if pr.Phase == p.phase && pr.Done < pr.Total && now.Sub(p.last) < p.every {
		return
	}
	p.phase, p.last = pr.Phase, now
	p.write()
}

func (p *progressPrinter) write() {
	if p.pend == "" {
		return
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", p.pend)
		p.shown = true
	} else {
		fmt.Fprintln(p.w, p.pend)
	}
	p.pend = ""
}

// phaseDone ends a phase: a terminal's line is cleared, so that what
// follows (the report, an error) starts on a clean line.
func (p *progressPrinter) phaseDone() {
	if !p.on {
		return
	}
	if p.tty && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
	p.pend = ""
}

func progressLine(pr fr.Progress, took time.Duration) string {
	secs := fmt.Sprintf("%.1f s", took.Seconds())
	switch pr.Phase {
	case "decode":
		return fmt.Sprintf("probing-mcp analyze: decoded %d/%d files (%s, %s entries), %s", pr.Done, pr.Total, mib(pr.Bytes), count(pr.Entries), secs)
	case "analyse":
		return fmt.Sprintf("probing-mcp analyze: analysed %d/%d process groups, %s", pr.Done, pr.Total, secs)
	case "replay":
		return "probing-mcp analyze: finishing the fr_trace replay, " + secs
	}
	return fmt.Sprintf("probing-mcp analyze: %s %d/%d, %s", pr.Phase, pr.Done, pr.Total, secs)
}

func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}

func count(n int64) string {
	if n >= 1e6 {
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return fmt.Sprint(n)
}
