package diagnosis

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
)

// RunOptions say where the evidence is and how to judge a stall.
type RunOptions struct {
	Evidence evidence.Options
	State    StateOptions
	// Gather, when set, gathers the bundle instead of evidence.Gather
	// over Evidence (the coordinator: every node's, merged).
	Gather func(context.Context) *evidence.Bundle
}

// Run is the evidence service's one entry point for a verdict: it gathers
// the bundle for the scope (this node), diagnoses it and adds the source
// line of each culprit frame. The MCP tool, the CLI, the skills and the
// evals all call it, so they all give the same answer.
func Run(ctx context.Context, opt RunOptions) Report {
	var b *evidence.Bundle
	if opt.Gather != nil {
		b = opt.Gather(ctx)
	} else {
		b = evidence.Gather(ctx, opt.Evidence)
	}
	in := FromBundle(b, opt.State)
	rep := Diagnose(in)
	if opt.Gather == nil && wantsSamples(rep) {
		// A moving job whose collectives no ring records: its straggler
		// shows only as the rank that is elsewhere in every stack sample.
		for r, ts := range evidence.MainSamples(ctx, opt.Evidence, sampleRounds, sampleGap) {
			if f := in.Ranks[r]; f != nil {
				f.Samples = ts
			}
		}
		rep = Diagnose(in)
	}
	for i := range rep.Hypotheses {
		h := &rep.Hypotheses[i]
		if h.Where == nil || len(h.culprits) == 0 {
			continue
		}
		e := b.Ranks[h.culprits[0]]
		if e == nil || e.Node != "" { // another node's file: not read from here
			continue
		}
		owner := procfacts.Owner{UID: e.UID, GID: -1}
		if e.Alive {
			if o, err := procfacts.ProcessOwner(e.PID); err == nil {
				owner = o
			}
		}
		src, err := sourceLine(h.Where.File, h.Where.Line, owner)
		if err != nil {
			rep.DataQuality = append(rep.DataQuality, fmt.Sprintf("source line of %s not shown: %s", h.Where, pathless(err, h.Where.File)))
			continue
		}
		h.Where.Source = src
	}
	return rep
}

// More stack samples for a moving job whose collectives no ring records:
// three, 200 ms apart (a DDP step is tens of ms: a straggler is elsewhere
// in each, a healthy rank only by chance).
const (
	sampleRounds = 3
	sampleGap    = 200 * time.Millisecond
)

// wantsSamples: the verdict is a moving job's and says that no collective
// is in the rings, or that one stack sample hints at a straggler.
func wantsSamples(rep Report) bool {
	if rep.State != StateHealthy && rep.State != StateProgressing {
		return false
	}
	for _, h := range rep.Hypotheses {
		if h.Category == CatStraggler {
			return true
		}
		for _, e := range h.Evidence {
			if e.Text == noRecentLine {
				return true
			}
		}
	}
	return false
}

// pathless is err's text with the job's path (said quoted beside it) left
// out: an os error repeats the path raw.
func pathless(err error, path string) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return jobtext.Clean(strings.ReplaceAll(err.Error(), path, "the file"))
}
