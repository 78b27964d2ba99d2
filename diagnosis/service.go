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
	// Scope is this node (evidence.Node) or the whole job.
	Scope evidence.Scope
	State StateOptions
	// Gathered, when set, sees the bundle the verdict is drawn from
	// (the watcher keeps its stacks in the history).
	Gathered func(*evidence.Bundle)
}

// Run is the evidence service's one entry point for a verdict: it gathers
// the bundle of the scope, diagnoses it and adds the source line of each
// culprit frame. The MCP tool, the CLI, the skills and the evals all call
// it, so they all give the same answer. The error is the scope's refusal
// of a partial answer (PROBING_FANOUT_STRICT), never a missing source.
func Run(ctx context.Context, opt RunOptions) (Report, error) {
	b, cov, err := opt.Scope.Evidence(ctx, 0)
	if err != nil {
		return Report{}, err
	}
	if opt.Gathered != nil {
		opt.Gathered(b)
	}
	in := FromBundle(b, opt.State)
	rep := Diagnose(in)
	if wantsSamples(rep) {
		// A moving job whose collectives no ring records: its straggler
		// shows only as the rank that is elsewhere in every stack sample.
		if samples := opt.Scope.Samples(ctx, sampleRounds, sampleGap); samples != nil {
			for r, ts := range samples {
				if f := in.Ranks[r]; f != nil {
					f.Samples = ts
				}
			}
			rep = Diagnose(in)
		}
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
	if cov != nil {
		rep.DataQuality = append([]string{"scope: the whole job, " + cov.Text()}, rep.DataQuality...)
		if rep.State == StateUnknown {
			rep.Summary = fmt.Sprintf("No rank of a training job was found on the %d of %d node(s) that answered: nothing to diagnose (are the nodes' agents running with PROBING=1, and do the daemons share the job's PROBING_DATA_DIR?).", cov.Answered, cov.Asked)
		}
	}
	return rep, nil
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
