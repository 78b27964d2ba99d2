package stacks

import "strings"

// idleWaits are the standard-library places where background threads park
// while they wait for work: the innermost Python frame of a thread that
// waits on a Condition, Event, Queue, selector, socket or pipe. The C
// call below them (lock acquire, select, accept) has no Python frame.
// Files match by path suffix, so any install prefix works.
var idleWaits = []struct {
	file  string
	funcs []string
}{
	// Condition.wait under Event.wait, Queue.get, Semaphore, Barrier;
	// _wait_for_tstate_lock under Thread.join.
	{"threading.py", []string{"wait", "wait_for", "_wait_for_tstate_lock"}},
	{"queue.py", []string{"get"}},
	// selectors under socketserver.serve_forever, asyncio, subprocess
	// communicate, multiprocessing.connection.wait.
	{"selectors.py", []string{"select"}},
	{"socket.py", []string{"accept"}},
	{"socketserver.py", []string{"serve_forever"}},
	{"multiprocessing/connection.py", []string{"wait", "poll", "_poll", "_recv", "_recv_bytes", "recv", "recv_bytes", "accept"}},
	{"multiprocessing/queues.py", []string{"get", "_feed"}},
	{"multiprocessing/synchronize.py", []string{"wait", "__enter__", "acquire"}},
	// The executor's worker blocks in the C SimpleQueue.get.
	{"concurrent/futures/thread.py", []string{"_worker"}},
	{"asyncio/base_events.py", []string{"run_forever", "_run_once"}},
	{"subprocess.py", []string{"_try_wait", "wait"}},
}

// IsIdle reports whether a stack (innermost first) ends in one of the
// standard library's blocking waits that background threads sit in:
// threading's wait, queue.get, selectors' select, socket accept,
// multiprocessing pipes and queues, the thread-pool worker, the asyncio
// loop. Merge collapses such threads, except main threads and odd ones
// out. A main thread in queue.get (a DataLoader waiting for a worker) is
// not idle in that sense: that is why Merge never collapses main threads.
// An empty stack is not idle: nothing says what it waits for.
func IsIdle(frames []Frame) bool {
	if len(frames) == 0 {
		return false
	}
	f := frames[0]
	for _, w := range idleWaits {
		if hasPathSuffix(f.File, w.file) {
			for _, fn := range w.funcs {
				if f.Function == fn {
					return true
				}
			}
		}
	}
	return false
}

// isStdlib: a file of the Python standard library (not site-packages),
// or a frozen module. Used to pick the frame that says where a thread is.
func isStdlib(file string) bool {
	if strings.HasPrefix(file, "<frozen ") {
		return true
	}
	if strings.Contains(file, "-packages/") {
		return false
	}
	return strings.Contains(file, "/lib/python") || strings.Contains(file, "/lib64/python")
}

// headFrame is the frame that says where a thread is: the innermost one
// outside the standard library (all_reduce in torch, next in a data
// loader, not threading's wait under them), or the innermost when all are
// standard library. ok is false for an empty stack.
func headFrame(frames []Frame) (Frame, bool) {
	for _, f := range frames {
		if f.File != "" && !isStdlib(f.File) {
			return f, true
		}
	}
	if len(frames) > 0 {
		return frames[0], true
	}
	return Frame{}, false
}
