package flightrecorder

import (
	"fmt"
	"io"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// WriteText renders the report for a human at a terminal: the verdict
// first, then one paragraph per process group, worst first. verbose adds
// healthy groups' details and fr_trace's transcript when the report has it.
//
// The text is bounded whatever the report holds (see Bounded): at most
// maxTextGroups groups (maxShownGroups verbose), a few notes and problems
// each (all of them up to the bounds verbose), clipped lines, and
// maxTextBytes in all; every cut says so.
func (r *Report) WriteText(w io.Writer, verbose bool) error {
	p := &printer{w: w, left: maxTextBytes}
	nGroups, nNotes, lineBytes := maxTextGroups, maxTextNotes, maxTextLine
	if verbose {
		nGroups, nNotes, lineBytes = maxShownGroups, maxShownLines, maxShownText
	}
	rs := r.Ranks
	timing := "timing off"
	if rs.TimingOn {
		timing = "timing on"
	}
	p.f("Flight Recorder analysis: %d dump(s), ranks %s, version %s, %s, %s\n", len(rs.Dumped), rs.DumpedText, rs.Versions, rs.Formats, timing)
	if len(rs.MissingDump) > 0 {
		p.f("No dump from rank(s) %s\n", rankText(rs.MissingDump))
	}
	p.f("\n%s\n", clipText(r.Summary, maxShownText))
	healthy, shown, more := 0, 0, 0
	for _, pr := range r.ProcessGroups {
		switch {
		case pr.Finding.Kind == KindHealthy && !verbose:
			healthy++
		case shown == nGroups:
			more++
		default:
			shown++
			p.group(pr, nNotes, lineBytes)
		}
	}
	if more > 0 {
		p.f("\n… %d more process group(s) not shown: the worst %d are (--pg or --ranks narrows the analysis).\n", more, shown)
	}
	if healthy > 0 {
		p.f("\n%d more process group(s) OK (all collectives matched; --verbose lists them).\n", healthy)
	}
	if ft := r.FRTrace; ft.Aborted != "" {
		p.f("\nfr_trace would stop: %s", jobtext.Quote(ft.Aborted, jobtext.Line))
		if ft.UsedAllowIncomplete && ft.Skipped == "" {
			p.f(" (with --allow-incomplete-ranks it goes on; its verdicts are shown per group)")
		}
		p.f("\n")
	}
	if s := r.FRTrace.Skipped; s != "" {
		p.f("\n%s\n", s)
	}
	if verbose && len(r.FRTrace.Transcript) > 0 {
		p.f("\nfr_trace transcript:\n")
		for i, l := range r.FRTrace.Transcript {
			if i == maxShownLines {
				p.f("  … %d more lines\n", len(r.FRTrace.Transcript)-i)
				break
			}
			p.f("  %s\n", jobtext.Quote(l, min(lineBytes, 1<<10))) // fr_trace's output, the dump's text in it
		}
	}
	dq := r.DataQuality
	if len(dq.Files) > 0 || len(dq.Warnings) > 0 {
		p.f("\nData quality:\n")
		for i, fp := range dq.Files {
			if i == nNotes {
				p.f("  … %d more file problems%s\n", len(dq.Files)-i, orVerbose(verbose))
				break
			}
			p.f("  %s\n", jobtext.Cut(fp.Text(), lineBytes)) // the path quoted
		}
		for i, wn := range dq.Warnings {
			if i == nNotes {
				p.f("  … %d more warnings%s\n", len(dq.Warnings)-i, orVerbose(verbose))
				break
			}
			p.f("  %s\n", jobtext.Cut(wn, lineBytes)) // names in it quoted where composed
		}
	}
	return p.err
}

// Bounds of the text (WriteText); verbose text has Bounded's.
const (
	maxTextGroups = 100
	maxTextNotes  = 10
	maxTextLine   = 1024
	maxTextBytes  = 16 << 20
)

func orVerbose(verbose bool) string {
	if verbose {
		return ""
	}
	return " (--verbose)"
}

// printer writes until an error or maxTextBytes, then says it stopped.
type printer struct {
	w    io.Writer
	err  error
	left int
}

func (p *printer) f(format string, args ...any) {
	if p.err != nil || p.left < 0 {
		return
	}
	s := fmt.Sprintf(format, args...)
	if len(s) > p.left {
		s = clipText(s, p.left) + fmt.Sprintf("\n… the text stops here: it passed %d bytes (--json, --pg or --ranks say the rest)\n", maxTextBytes)
		p.left = -1
	} else {
		p.left -= len(s)
	}
	_, p.err = io.WriteString(p.w, s)
}

func (p *printer) group(pr PGReport, nNotes, lineBytes int) {
	p.f("\n%s  ranks %s  %s", PGLabel(pr.PGName, pr.PGDesc), pr.MembersText, pr.Verdict)
	if pr.Verdict != VerdictOK && pr.CollectiveSeqID >= 0 {
		p.f(" at #%d %s", pr.CollectiveSeqID, jobtext.Quote(pr.ProfilingName, jobtext.Name))
	}
	p.f("  [%s, confidence %s]\n", pr.Finding.Kind, pr.Finding.Confidence)
	p.f("  %s\n", clipText(pr.Finding.Line, lineBytes))
	if len(pr.CulpritRanks) > 0 {
		p.f("  culprit rank(s): %s\n", rankText(pr.CulpritRanks))
	}
	for _, f := range pr.Secondary {
		p.f("  also %s: %s\n", f.Kind, clipText(f.Line, lineBytes))
	}
	if a := pr.Arrival; a != nil {
		p.f("  arrivals: %s\n", a.Line)
	}
	if len(pr.LaggingRanks) > 0 {
		p.f("  lagging ranks (worst first):\n")
		for _, l := range pr.LaggingRanks {
			p.f("    rank %-5d enqueued #%d  completed #%d  %s\n", l.Rank, l.LastEnqueued, l.LastCompleted, l.Note)
		}
		if pr.LagTruncated {
			p.f("    ...\n")
		}
	}
	if len(pr.CulpritFrames) > 0 {
		if pr.Verdict == VerdictMissingRanks {
			p.f("  culprit's last recorded op (stack):\n")
		} else {
			p.f("  culprit stack:\n")
		}
		writeFrames(p, pr.CulpritFrames, 8)
	}
	if len(pr.PeerFrames) > 0 && pr.Verdict != VerdictOK {
		p.f("  peers' stack:\n")
		writeFrames(p, pr.PeerFrames, 8)
	}
	if n := pr.FRTrace; n != nil {
		if n.Agrees {
			p.f("  fr_trace agrees")
			if n.Header != "" {
				p.f(": %s", jobtext.Quote(n.Header, min(lineBytes, jobtext.Line)))
			}
			p.f("\n")
		} else {
			p.f("  fr_trace says %s", n.Verdict)
			if len(n.CulpritRanks) > 0 {
				p.f(" (culprits %s)", rankText(n.CulpritRanks))
			}
			p.f(": %s\n", jobtext.Quote(n.Why, min(lineBytes, jobtext.Line))) // fr_trace's words, with the dump's text
		}
	}
	notes := 0
	for _, e := range pr.Finding.Evidence {
		if !strings.HasPrefix(e, "Not all ranks") && !strings.HasPrefix(e, "Collective sequence") {
			if notes++; notes > nNotes {
				continue
			}
			p.f("  note: %s\n", jobtext.Quote(e, min(lineBytes, jobtext.Line))) // fr_trace's words, with the dump's text
		}
	}
	if notes > nNotes {
		p.f("  … %d more notes (--json)\n", notes-nNotes)
	}
}

// writeFrames prints up to n frames, innermost first, as StackToShow
// picks them.
func writeFrames(p *printer, frames []Frame, n int) {
	frames, native := StackToShow(frames)
	if native > 0 {
		p.f("    (%d native frames not shown: the JSON report has them)\n", native)
	}
	for i, f := range frames {
		if i == n {
			p.f("    ... %d more frames\n", len(frames)-n)
			return
		}
		p.f("    %s\n", f.Text())
	}
}

// StackToShow picks the frames of a recorded stack worth reading first. A
// C++ stack (TORCH_NCCL_TRACE_CPP_STACK=1) starts with a dozen or more of
// torch's own native frames; its Python frames, where the job called the
// collective, are shown, and the native ones only counted. A stack of one
// kind is shown whole.
func StackToShow(frames []Frame) (shown []Frame, nativeOmitted int) {
	var py []Frame
	for _, f := range frames {
		if strings.HasSuffix(f.Filename, ".py") {
			py = append(py, f)
		}
	}
	if len(py) == 0 || len(py) == len(frames) {
		return frames, 0
	}
	return py, len(frames) - len(py)
}
