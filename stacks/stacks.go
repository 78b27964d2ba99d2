// Package stacks reads the Python stacks of a job's processes, from
// wherever they can be had, and merges them into a short account of where
// each rank is. Sources:
//
//   - the in-process agent's /apis/stacks reply (ParseAgentJSON), which
//     needs the agent to answer, so the GIL to be free now and then;
//   - faulthandler's all-thread dump (ParseFaulthandler,
//     ParseFaulthandlerLast), which CPython writes from a signal handler
//     without the GIL, so it works on a process that holds the GIL
//     forever;
//   - /proc (internal/procfacts), which gives no Python frames but thread
//     states and kernel wait channels even for a process in D state.
//
// Merge groups identical stacks across processes, puts the odd ones out
// first and collapses idle background threads: a 1024-rank job's stacks
// become a few groups an LLM or a person can read.
package stacks

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Where a Process's stacks came from.
const (
	SourceAgent        = "agent"
	SourceFaulthandler = "faulthandler"
	SourceProc         = "proc"
)

// Frame is one Python frame.
type Frame struct {
	File     string `json:"file"`
	Line     int    `json:"line"` // 0 when unknown (faulthandler's "line ???")
	Function string `json:"function"`
}

// String is "function (file:line)".
func (f Frame) String() string { return fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line) }

// Thread is one thread of a process at the time of capture.
type Thread struct {
	// ID is Python's thread identifier (threading.get_ident(), the
	// pthread_t): the hex number in faulthandler's headers.
	ID uint64 `json:"id"`
	// NativeID is the kernel's thread id (the /proc/<pid>/task/<tid> name),
	// 0 when the source does not know it.
	NativeID int    `json:"native_id,omitempty"`
	Name     string `json:"name,omitempty"`
	Daemon   bool   `json:"daemon,omitempty"`
	IsMain   bool   `json:"is_main,omitempty"`
	// Frames are innermost first, as faulthandler and the agent write them.
	Frames []Frame `json:"frames"`
	// FramesTruncated: the source cut the stack (faulthandler keeps 100
	// frames, the agent max_frames); the outermost frames are missing.
	FramesTruncated bool `json:"frames_truncated,omitempty"`
	// State and WChan come from /proc when known: R, S, D, Z, T, … and the
	// kernel function the thread sleeps in.
	State string `json:"state,omitempty"`
	WChan string `json:"wchan,omitempty"`
	// LockWait: the agent saw the innermost frame entering this lock (nil:
	// not entering one, or not known). LocksHeld are the locks the thread
	// holds through the with statements its frames are inside (locks taken
	// with acquire() outside a with are not among them). Neither is in
	// this type's JSON, which is get_stacks' output and has a size budget:
	// the evidence bundle carries them (evidence.ThreadLocks).
	LockWait  *LockWait  `json:"-"`
	LocksHeld []HeldLock `json:"-"`
}

// HeldLock is one lock a thread holds.
type HeldLock struct {
	Lock   string `json:"lock"`
	Kind   string `json:"kind"`
	LockID uint64 `json:"lock_id"`
}

// LockWait is the lock a thread is entering, as the agent read it from
// the frame's bytecode and names.
type LockWait struct {
	// Lock is the expression the code names it by ("self.lock").
	Lock string `json:"lock"`
	// Kind is "lock" (threading.Lock) or "rlock" (threading.RLock, or a
	// Condition's).
	Kind string `json:"kind"`
	// LockID tells the same lock object apart across threads.
	LockID uint64 `json:"lock_id"`
	Locked bool   `json:"locked"`
	// Owner is an RLock's holder (a Thread.ID); 0 when unknown (a plain
	// Lock does not record who holds it).
	Owner uint64 `json:"owner,omitempty"`
}

// Process is one process's capture.
type Process struct {
	PID int `json:"pid"`
	// Rank is the global rank, -1 when unknown.
	Rank       int       `json:"rank"`
	Host       string    `json:"host,omitempty"`
	Source     string    `json:"source"`
	CapturedAt time.Time `json:"captured_at"`
	Threads    []Thread  `json:"threads"`
	// Err says why the capture failed or is partial (the agent timed out,
	// the process exited); Threads may still hold what was read.
	Err string `json:"error,omitempty"`
	// AgentErr is the kind of the agent's failure to answer ("timeout":
	// it did not answer in time, as when a thread holds the GIL; "dead",
	// "refused", …), "" when it answered or was not asked.
	AgentErr string `json:"-"`
	// OSThreads are the kernel threads from /proc read right when the
	// agent failed, before any faulthandler signal (which wakes a thread
	// out of its C call): who ran when the agent could not answer. Not in
	// the JSON (get_stacks' output).
	OSThreads []Thread `json:"-"`
}

// The /apis/stacks reply (agent/PROTOCOL.md).
type wireStacks struct {
	PID          *int            `json:"pid"`
	CapturedAtNs int64           `json:"captured_at_ns"`
	Threads      *[]wireThread   `json:"threads"`
	Error        json.RawMessage `json:"error"`
}

type wireThread struct {
	ID              uint64      `json:"id"`
	NativeID        int         `json:"native_id"`
	Name            string      `json:"name"`
	Daemon          bool        `json:"daemon"`
	IsMain          bool        `json:"is_main"`
	Frames          []wireFrame `json:"frames"`
	FramesTruncated bool        `json:"frames_truncated"`
	LockWait        *LockWait   `json:"lock_wait"`
	LocksHeld       []HeldLock  `json:"locks_held"`
}

type wireFrame struct {
	File     string `json:"file"`
	Line     *int   `json:"line"`
	Function string `json:"function"`
}

// ParseAgentJSON reads the agent's /apis/stacks reply. Rank and Host are
// not in it (they are in the identity): Rank is -1 and Host empty for the
// caller to fill. An error envelope ({"error": …}) is returned as an error.
func ParseAgentJSON(b []byte) (*Process, error) {
	var w wireStacks
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("agent stacks reply (%d bytes): %w", len(b), err)
	}
	if len(w.Error) > 0 && string(w.Error) != "null" {
		return nil, fmt.Errorf("agent stacks reply is an error: %s", truncate(string(w.Error), 300))
	}
	if w.PID == nil || w.Threads == nil {
		return nil, errors.New(`agent stacks reply: no "pid" or "threads" field; is this /apis/stacks?`)
	}
	p := &Process{PID: *w.PID, Rank: -1, Source: SourceAgent, Threads: make([]Thread, 0, len(*w.Threads))}
	if w.CapturedAtNs > 0 {
		p.CapturedAt = time.Unix(0, w.CapturedAtNs).UTC()
	}
	for _, wt := range *w.Threads {
		t := Thread{ID: wt.ID, NativeID: wt.NativeID, Name: wt.Name, Daemon: wt.Daemon, IsMain: wt.IsMain,
			FramesTruncated: wt.FramesTruncated, Frames: make([]Frame, 0, len(wt.Frames)), LockWait: wt.LockWait, LocksHeld: wt.LocksHeld}
		for _, f := range wt.Frames {
			fr := Frame{File: f.File, Function: f.Function}
			if f.Line != nil && *f.Line > 0 {
				fr.Line = *f.Line
			}
			t.Frames = append(t.Frames, fr)
		}
		p.Threads = append(p.Threads, t)
	}
	return p, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
