package agent

import (
	"testing"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
)

// TestDropAgentFRFrames: the agent's collective wrapper is removed from
// every entry's recorded stack (shared stacks included), the job's and
// torch's frames are kept in order, and a stack without it is untouched.
func TestDropAgentFRFrames(t *testing.T) {
	shared := []fr.Frame{
		{Name: "all_reduce", Filename: "/site-packages/torch/distributed/distributed_c10d.py", Line: 4174},
		{Name: "wrapper", Filename: "/site/probing_mcp_agent/collectives.py", Line: 319},
		{Name: "train_step", Filename: "/job/train.py", Line: 30},
	}
	plain := []fr.Frame{{Name: "wrapper", Filename: "/job/train.py", Line: 3}}
	d := &fr.Dump{Entries: []fr.Entry{{Shared: &fr.Shared{Frames: shared}}, {Shared: &fr.Shared{Frames: shared}}, {Shared: &fr.Shared{Frames: plain}}, {Shared: &fr.Shared{}}}}
	DropAgentFRFrames(d)
	for i := 0; i < 2; i++ {
		f := d.Entries[i].Frames
		if len(f) != 2 || f[0].Name != "all_reduce" || f[1].Name != "train_step" {
			t.Errorf("entry %d: %v", i, f)
		}
	}
	if len(shared) != 3 || shared[1].Name != "wrapper" {
		t.Errorf("the shared stack was changed in place: %v", shared)
	}
	if f := d.Entries[2].Frames; len(f) != 1 || f[0].Name != "wrapper" {
		t.Errorf("a job's own wrapper was dropped: %v", f)
	}
}
