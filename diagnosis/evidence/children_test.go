package evidence

import (
	"testing"

	"github.com/probing-mcp/probing-mcp/stacks"
)

func TestChildWait(t *testing.T) {
	th := func(frames ...stacks.Frame) *stacks.Thread { return &stacks.Thread{Frames: frames} }
	queue := stacks.Frame{File: "/usr/lib/python3.11/multiprocessing/queues.py", Function: "get"}
	loader := stacks.Frame{File: "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", Function: "_try_get_data"}
	for _, c := range []struct {
		t    *stacks.Thread
		want string
	}{
		{nil, ""},
		{th(stacks.Frame{File: "/job/train.py", Function: "main"}), ""},
		{th(queue, loader), "DataLoader worker"}, // the outer frame decides
		{th(queue), "worker process"},
		{th(stacks.Frame{File: "/usr/lib/python3.11/subprocess.py", Function: "_wait"}), "child process"},
		// The single-process iterator reads in the rank itself.
		{th(stacks.Frame{File: loader.File, Function: "_next_data"}), ""},
	} {
		if got := ChildWait(c.t); got != c.want {
			t.Errorf("ChildWait(%v) = %q, want %q", c.t, got, c.want)
		}
	}
}
