package diagnosis

import (
	"context"
	"fmt"

	"github.com/probing-mcp/probing-mcp/evidence"
	"github.com/probing-mcp/probing-mcp/procfacts"
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
	rep := Diagnose(FromBundle(b, opt.State))
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
			rep.DataQuality = append(rep.DataQuality, fmt.Sprintf("source line of %s not shown: %v", h.Where, err))
			continue
		}
		h.Where.Source = src
	}
	return rep
}
