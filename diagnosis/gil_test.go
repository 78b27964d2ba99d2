package diagnosis

import (
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/stacks"
)

// TestGILWaiterSampledRunningIsNotTheHolder: a main thread waiting for the
// GIL (in Thread.start, its worker holding the GIL in a C call) wakes
// every 5 ms to ask for it, so /proc can read it R while its wchan names
// the futex. It is not the holder: the worker in the job's own code is
// the likely one (under load, make test caught the main thread named).
func TestGILWaiterSampledRunningIsNotTheHolder(t *testing.T) {
	fr := func(file string, line int, fn string) stacks.Frame {
		return stacks.Frame{File: file, Line: line, Function: fn}
	}
	f := &RankFacts{Rank: 1, Alive: true, AgentErr: "timeout", StackSource: stacks.SourceFaulthandler,
		Threads: []stacks.Thread{
			{ID: 1, IsMain: true, Frames: []stacks.Frame{fr("/usr/lib/python3.11/threading.py", 320, "wait"), fr("/usr/lib/python3.11/threading.py", 964, "start"), fr("/job/threads_job.py", 205, "culprit_acts")}},
			{ID: 2, Frames: []stacks.Frame{fr("/job/threads_job.py", 120, "native_wait"), fr("/usr/lib/python3.11/threading.py", 1045, "run")}},
		},
		OSThreads: []stacks.Thread{
			{NativeID: 100, IsMain: true, State: "R", WChan: "futex_do_wait"},
			{NativeID: 101, State: "S", WChan: "hrtimer_nanosleep"},
			{NativeID: 102, State: "S", WChan: "futex_do_wait"},
		}}
	tf := gilHeld(f)
	if tf == nil || tf.Thread == nil || tf.Thread.ID != 2 || tf.Strong {
		t.Fatalf("%+v", tf)
	}
	var text []string
	for _, e := range tf.Evidence {
		text = append(text, e.Text)
	}
	if all := strings.Join(text, "\n"); !strings.Contains(all, "likely holder") || strings.Contains(all, "a native call that does not release the GIL") {
		t.Errorf("%s", all)
	}
	// Running with no futex in sight, but parked in Thread.join: the
	// dump's signal ran on it (CI caught it read R so, and blamed it at
	// high confidence). The worker is still the likely holder.
	f.OSThreads[0].WChan = "0"
	f.Threads[0].Frames = []stacks.Frame{fr("/usr/lib/python3.11/threading.py", 1119, "_wait_for_tstate_lock"), fr("/usr/lib/python3.11/threading.py", 1099, "join"), fr("/job/threads_job.py", 205, "culprit_acts")}
	if tf := gilHeld(f); tf == nil || tf.Thread == nil || tf.Thread.ID != 2 || tf.Strong {
		t.Fatalf("a main thread in join read running: %+v", tf)
	}
	// Running with no futex in sight, in the job's own code: the main
	// thread holds it.
	f.Threads[0].Frames = []stacks.Frame{fr("/job/threads_job.py", 120, "native_wait"), fr("/job/threads_job.py", 201, "culprit_acts")}
	if tf := gilHeld(f); tf == nil || !tf.Strong || !tf.Thread.IsMain {
		t.Fatalf("a running main thread: %+v", tf)
	}
}
