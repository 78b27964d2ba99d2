package diagnosis

import (
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/stacks"
)

// TestSharedFramesRealDDP reads the main threads of a real 4-rank DDP job
// under torchrun (testdata/bundles/ddp_manifest_lock.json): every rank's
// stack runs through the same launcher frames (torchrun_job.py, the job's
// main, torchelastic's @record wrapper, train_epoch:194). None of them is
// evidence: they are the shared prefix, never a culprit's line, and a
// launcher frame named like a collective is not "inside torch.distributed".
func TestSharedFramesRealDDP(t *testing.T) {
	in := FromBundle(realBundle(t, "ddp_manifest_lock"), StateOptions{})
	if n := sharedFrames(in); n != 7 {
		t.Fatalf("shared frames %d, want 7 (<module> … train_epoch:194)", n)
	}
	// A rank whose own frames below the shared ones are all a library's
	// (as if blocked in a C call under train_epoch): its line is none of
	// the shared ones, whatever userFrame alone would say.
	one := in.Ranks[1]
	lib := stacks.Frame{File: "/work/torchvenv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", Line: 1, Function: "__next__"}
	one.Main = &stacks.Thread{IsMain: true, Frames: append([]stacks.Frame{lib}, one.Main.Frames[1:]...)}
	in.shared = sharedFrames(in)
	h := finish(Hypothesis{Category: CatCPUStall, culprits: []int{1}}, in)
	if h.Where != nil {
		t.Errorf("a shared frame as the culprit's line: %s", h.Where)
	}
	if w := frameWordsShared(one.Main, in.shared); !strings.Contains(w, "__next__") {
		t.Errorf("its frame: %s", w)
	}
	// By content: torchelastic's @record wrapper, and a launcher's own
	// barrier (elastic's store barrier at exit), are no collective.
	rec := in.Ranks[2].Main
	if inCollective(rec) {
		t.Errorf("the @record wrapper read as a collective: %v", rec.Frames)
	}
	exit := &stacks.Thread{IsMain: true, Frames: append([]stacks.Frame{{File: "/usr/lib/python3/dist-packages/torch/distributed/elastic/utils/store.py", Line: 160, Function: "barrier"}}, rec.Frames...)}
	if inCollective(exit) {
		t.Error("elastic's store barrier read as a collective")
	}
	if !inCollective(in.Ranks[0].Main) {
		t.Error("rank 0's dist.barrier() not read as a collective")
	}
}
