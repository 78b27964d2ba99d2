package flightrecorder

import (
	"fmt"
	"io"
	"strings"

	"github.com/probing-mcp/probing-mcp/diag/rankset"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// WriteText renders the report for a human at a terminal: the verdict
// first, then one paragraph per process group, worst first. verbose adds
// healthy groups' details and fr_trace's transcript when the report has it.
func (r *Report) WriteText(w io.Writer, verbose bool) error {
	p := &printer{w: w}
	rs := r.Ranks
	timing := "timing off"
	if rs.TimingOn {
		timing = "timing on"
	}
	p.f("Flight Recorder analysis: %d dump(s), ranks %s, version %s, %s, %s\n", len(rs.Dumped), rs.DumpedText, rs.Versions, rs.Formats, timing)
	if len(rs.MissingDump) > 0 {
		p.f("No dump from rank(s) %s\n", rankset.Format(rs.MissingDump))
	}
	p.f("\n%s\n", r.Summary)
	healthy := 0
	for _, pr := range r.ProcessGroups {
		if pr.Finding.Kind == KindHealthy && !verbose {
			healthy++
			continue
		}
		p.group(pr)
	}
	if healthy > 0 {
		p.f("\n%d more process group(s) OK (all collectives matched; --verbose lists them).\n", healthy)
	}
	if ft := r.FRTrace; ft.Aborted != "" {
		p.f("\nfr_trace would stop: %s", jobtext.Quote(ft.Aborted, jobtext.Line))
		if ft.UsedAllowIncomplete {
			p.f(" (with --allow-incomplete-ranks it goes on; its verdicts are shown per group)")
		}
		p.f("\n")
	}
	if verbose && len(r.FRTrace.Transcript) > 0 {
		p.f("\nfr_trace transcript:\n")
		for _, l := range r.FRTrace.Transcript {
			p.f("  %s\n", jobtext.Quote(l, 1<<10)) // fr_trace's output, the dump's text in it
		}
	}
	dq := r.DataQuality
	if len(dq.Files) > 0 || len(dq.Warnings) > 0 {
		p.f("\nData quality:\n")
		for _, fp := range dq.Files {
			p.f("  %s\n", fp.Text())
		}
		for i, wn := range dq.Warnings {
			if i == 10 && !verbose {
				p.f("  ... %d more warnings (--verbose)\n", len(dq.Warnings)-10)
				break
			}
			p.f("  %s\n", wn)
		}
	}
	return p.err
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

func (p *printer) group(pr PGReport) {
	p.f("\n%s  ranks %s  %s", PGLabel(pr.PGName, pr.PGDesc), pr.MembersText, pr.Verdict)
	if pr.Verdict != VerdictOK && pr.CollectiveSeqID >= 0 {
		p.f(" at #%d %s", pr.CollectiveSeqID, jobtext.Quote(pr.ProfilingName, jobtext.Name))
	}
	p.f("  [%s, confidence %s]\n", pr.Finding.Kind, pr.Finding.Confidence)
	p.f("  %s\n", pr.Finding.Line)
	if len(pr.CulpritRanks) > 0 {
		p.f("  culprit rank(s): %s\n", rankset.Format(pr.CulpritRanks))
	}
	for _, f := range pr.Secondary {
		p.f("  also %s: %s\n", f.Kind, f.Line)
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
				p.f(": %s", jobtext.Quote(n.Header, jobtext.Line))
			}
			p.f("\n")
		} else {
			p.f("  fr_trace says %s", n.Verdict)
			if len(n.CulpritRanks) > 0 {
				p.f(" (culprits %s)", rankset.Format(n.CulpritRanks))
			}
			p.f(": %s\n", jobtext.Quote(n.Why, jobtext.Line)) // fr_trace's words, with the dump's text
		}
	}
	for _, e := range pr.Finding.Evidence {
		if !strings.HasPrefix(e, "Not all ranks") && !strings.HasPrefix(e, "Collective sequence") {
			p.f("  note: %s\n", jobtext.Quote(e, jobtext.Line)) // fr_trace's words, with the dump's text
		}
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
