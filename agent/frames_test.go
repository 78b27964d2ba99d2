package agent

import (
	"testing"

	"github.com/probing-mcp/probing-mcp/stacks"
)

// TestAgentWrapperDropped: the agent's collective wrapper sits between
// every rank's own line and torch's collective; it is dropped there, and
// kept where the thread waits inside the wrapper's own work.
func TestAgentWrapperDropped(t *testing.T) {
	const agentPy = "/site/probing_mcp_agent/collectives.py"
	ts := []stacks.Thread{
		{IsMain: true, Frames: []stacks.Frame{
			{File: "/venv/torch/distributed/distributed_c10d.py", Function: "all_reduce", Line: 2050},
			{File: agentPy, Function: "wrapper", Line: 279},
			{File: "/job/train.py", Function: "step", Line: 12},
		}},
		{Name: "worker", Frames: []stacks.Frame{
			{File: "/usr/lib/python3.11/threading.py", Function: "acquire", Line: 100},
			{File: agentPy, Function: "wrapper", Line: 300},
			{File: "/job/train.py", Function: "sync", Line: 40},
		}},
	}
	dropAgentWrappers(ts)
	if got := ts[0].Frames; len(got) != 2 || got[1].Function != "step" {
		t.Errorf("wrapper kept in a collective: %+v", got)
	}
	if got := ts[1].Frames; len(got) != 3 || got[1].File != agentPy {
		t.Errorf("wrapper dropped where it is what waits: %+v", got)
	}
}
