package diagnosis

import (
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// WaitPicture is what a verdict was drawn from, kept beside the Report
// (never in its JSON) for a picture of it (package picture): the wait-for
// graph when one was followed, each rank's line, main stack and recorded
// collectives. The picture reads these, so that it shows what the verdict
// weighed rather than a second reading of the evidence.
type WaitPicture struct {
	// Model and Graph are nil when the job moves (no graph was followed).
	Model *Model
	Graph *Graph
	// Doing is each rank's line, as the per-rank listing says it.
	Doing map[int]string
	// Main is each rank's main-thread stack, innermost frame first.
	Main  map[int][]stacks.Frame
	Comm  []evidence.CommRow
	World int
	// FR is the Flight Recorder analysis the verdict read, if any.
	FR *fr.Report
}

// Picture is what the verdict was drawn from; nil for a report that was
// not made by Diagnose here (one read back from JSON).
func (r *Report) Picture() *WaitPicture { return r.pic }

// IsP2P reports a point-to-point channel's group name and its ends.
func IsP2P(g string) (src, dst int, ok bool) { return p2pChannel(g) }

// withPicture keeps what the picture needs of in on rep.
func withPicture(rep *Report, in Input) {
	p := rep.pic
	if p == nil {
		p = &WaitPicture{}
	}
	p.Doing, p.Comm, p.World, p.FR = rep.doing, in.Comm, in.World, in.FR
	p.Main = make(map[int][]stacks.Frame, len(in.Ranks))
	for r, f := range in.Ranks {
		if f != nil && f.Main != nil {
			p.Main[r] = f.Main.Frames
		}
	}
	rep.pic = p
}
