package diagnosis

import (
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// Shared frames are never evidence. Every rank's main thread starts in
// the same frames: the launcher (torchrun's run.py, runpy), torchelastic's
// @record wrapper around the job's main, the agent's own wrappers, the
// job's main and training loop. They say nothing about which rank holds
// the job. By content (launcherFrame: the launchers and wrappers every
// torch job has, wherever torch is installed) a frame is never "inside
// torch.distributed" nor a culprit's line; by position (sharedFrames: the
// outermost frames common to every rank's main thread in this job) never
// a culprit's line. Position alone does not clear a collective: ranks all
// inside one barrier share its frame, and are inside it.

// launcherFiles are paths of the frames every rank of a launched job
// shares by construction.
var launcherFiles = []string{
	"/torch/distributed/elastic/", "/torch/distributed/run.py", "/torch/distributed/launch.py",
	"/torch/distributed/launcher/", "/runpy.py", "/probing_mcp_agent/",
}

// launcherFrame: the frame is a launcher's or a wrapper's, shared by every
// rank.
func launcherFrame(f stacks.Frame) bool {
	for _, p := range launcherFiles {
		if strings.Contains(f.File, p) {
			return true
		}
	}
	return false
}

// sharedFrames is how many outermost frames every rank's main thread has
// in common (file, function and line), leaving each at least its
// innermost frame; 0 with fewer than two stacks to compare.
func sharedFrames(in Input) int {
	var ts []*stacks.Thread
	for _, f := range in.Ranks {
		if f.Main != nil && len(f.Main.Frames) > 0 {
			ts = append(ts, f.Main)
		}
	}
	if len(ts) < 2 {
		return 0
	}
	limit := len(ts[0].Frames) - 1
	for _, t := range ts[1:] {
		limit = min(limit, len(t.Frames)-1)
	}
	n := 0
	for ; n < limit; n++ {
		a := ts[0].Frames[len(ts[0].Frames)-1-n]
		for _, t := range ts[1:] {
			b := t.Frames[len(t.Frames)-1-n]
			if a.File != b.File || a.Function != b.Function || a.Line != b.Line {
				return n
			}
		}
	}
	return n
}

// ownFrames are a main thread's frames below the shared ones (shared:
// sharedFrames), innermost first.
func ownFrames(t *stacks.Thread, shared int) []stacks.Frame {
	if shared <= 0 || shared >= len(t.Frames) {
		return t.Frames
	}
	return t.Frames[:len(t.Frames)-shared]
}

// frameWordsShared is frameWords for a main thread, its shared frames
// left out: the innermost frame of the job's own code below them, else its
// innermost frame.
func frameWordsShared(t *stacks.Thread, shared int) string {
	if w := userFrame(&stacks.Thread{Frames: ownFrames(t, shared)}); w != nil {
		return w.String()
	}
	return frameWords(&stacks.Thread{Frames: t.Frames[:min(1, len(t.Frames))], State: t.State})
}

// userFrame is the innermost frame outside the standard library, site
// packages, torch and our agent (wherever it is installed from): the line
// of the job's own code.
func userFrame(t *stacks.Thread) *Where {
	for _, f := range t.Frames {
		if f.File == "" || stacks.LibraryFile(f.File) || launcherFrame(f) {
			continue
		}
		return &Where{File: f.File, Line: f.Line, Function: f.Function}
	}
	return nil
}

// inCollective: the thread is inside a torch.distributed collective or
// P2P call (c10dCall). Not any torch/distributed frame: torchelastic's
// @record wraps the whole of a job's main function.
func inCollective(t *stacks.Thread) bool { return c10dCall(t) != "" }

func frameWords(t *stacks.Thread) string {
	if w := userFrame(t); w != nil {
		return w.String()
	}
	if len(t.Frames) > 0 {
		return t.Frames[0].Text()
	}
	return "no Python frame (state " + jobtext.Token(t.State, 16) + ")"
}
