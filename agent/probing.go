package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// The original Probing agent (0.2.4, contract §2.8) serves one thread's
// mixed stack per request: GET /apis/pythonext/callstack[?tid=<tid>], a
// JSON list of externally tagged frames, innermost first, {"PyFrame":
// {file, func, lineno, locals}} and {"CFrame": {ip, file, func, lineno}}
// interleaved; no tid is the main thread. GET /apis/overview lists the
// threads ({"pid", "main_thread", "threads": [tid, …], …}). Its Tokio
// workers ("server runtime") serve each request; a callstack request
// needs the GIL and waits for it, holding its worker, so a process that
// holds the GIL soon answers nothing: the main thread is asked first and
// the others only if it answered. testdata/probing-0.2.4 holds replies.

// probingMaxThreads bounds the threads asked for, one request each.
const probingMaxThreads = 64

// The threads are asked one at a time: 0.2.4 captures through one global
// slot, and a request that finds it taken fails (500 "Failed to lock call
// stack sender slot"), so concurrent requests only fail each other.

// probingBusyRetries is how often a request that found the slot taken
// (another client's capture) is tried again, within the deadline.
const probingBusyRetries = 3

// probingThreadName is the name Probing's own Tokio workers carry.
const probingThreadName = "server runtime"

// maxNativeName bounds a native frame's (mangled) name.
const maxNativeName = 200

type probingFrame struct {
	File   string `json:"file"`
	Func   string `json:"func"`
	Lineno int    `json:"lineno"`
}

// parseProbingCallstack reads one callstack reply into a thread: Python
// frames first (innermost first, so that the innermost user frame is what
// summaries and merges see), then the native frames, "[native] " named,
// without Probing's own: the signal handler that captured the stack and
// its eval-frame hook (probingOwnFrame). own says that frames of Probing
// were dropped past the handler's: with no Python frame, the thread is
// one of Probing's own.
func parseProbingCallstack(b []byte, maxFrames int) (t stacks.Thread, own bool, err error) {
	var frames []map[string]json.RawMessage
	if err := json.Unmarshal(b, &frames); err != nil {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return t, false, fmt.Errorf("the Probing agent says: %s", e.Error)
		}
		return t, false, fmt.Errorf("callstack reply is not a frame list: %v", err)
	}
	t = stacks.Thread{Frames: []stacks.Frame{}}
	var native []stacks.Frame
	handler := true // still in the signal handler's frames, innermost
	for _, f := range frames {
		if raw, ok := f["PyFrame"]; ok {
			handler = false
			var py probingFrame
			if json.Unmarshal(raw, &py) == nil {
				t.Frames = append(t.Frames, stacks.Frame{File: py.File, Line: py.Lineno, Function: py.Func})
			}
			continue
		}
		raw, ok := f["CFrame"]
		if !ok {
			continue
		}
		var c probingFrame
		if json.Unmarshal(raw, &c) != nil {
			continue
		}
		if handler && probingHandlerFrame(c.Func) {
			continue
		}
		handler = false
		if probingOwnFrame(c.Func) {
			own = true
			continue
		}
		name := c.Func
		if len(name) > maxNativeName {
			name = name[:maxNativeName] + "…"
		}
		native = append(native, stacks.Frame{File: c.File, Line: c.Lineno, Function: "[native] " + name})
	}
	python := len(t.Frames) > 0
	t.Frames = append(t.Frames, native...)
	if maxFrames > 0 && len(t.Frames) > maxFrames {
		t.Frames, t.FramesTruncated = t.Frames[:maxFrames], true
	}
	return t, own && !python, nil
}

// probingHandlerFrame: a frame of the signal handler through which
// Probing captured the stack, innermost on every thread: its own
// stack_tracer, the backtrace crate walking the stack, signal-hook's
// dispatcher and libc's signal trampoline. Known by crate, not position.
func probingHandlerFrame(sym string) bool {
	if sym == "__restore_rt" || sym == "__GI___restore_rt" {
		return true
	}
	return rustCrate(sym, func(c string) bool {
		return isProbingCrate(c) || c == "backtrace" || c == "signal_hook_registry" || c == "signal_hook"
	})
}

// probingOwnFrame: a native frame of Probing's own crates anywhere in a
// stack (its eval-frame hook sits between every two Python frames).
func probingOwnFrame(sym string) bool { return rustCrate(sym, isProbingCrate) }

func isProbingCrate(c string) bool { return c == "probing" || strings.HasPrefix(c, "probing_") }

// rustCrate reports whether a Rust symbol names an item of a crate that
// match accepts (or a crate's item in its generic arguments). Mangled
// symbols (v0 "_R…", legacy "_ZN…") hold identifiers as <length><name>;
// demangled ones write "crate::item". A C symbol names no crate.
func rustCrate(sym string, match func(string) bool) bool {
	if strings.HasPrefix(sym, "_R") || strings.HasPrefix(sym, "_ZN") {
		for i := 0; i < len(sym); i++ {
			if sym[i] < '1' || sym[i] > '9' || (i > 0 && sym[i-1] >= '0' && sym[i-1] <= '9') {
				continue
			}
			j, n := i, 0
			for j < len(sym) && sym[j] >= '0' && sym[j] <= '9' && n < 1<<16 {
				n = n*10 + int(sym[j]-'0')
				j++
			}
			if j+n <= len(sym) && match(sym[j:j+n]) {
				return true
			}
		}
		return false
	}
	for rest := sym; ; {
		i := strings.Index(rest, "::")
		if i < 0 {
			return false
		}
		k := i
		for k > 0 && (rest[k-1] == '_' || rest[k-1] >= 'a' && rest[k-1] <= 'z' || rest[k-1] >= 'A' && rest[k-1] <= 'Z' || rest[k-1] >= '0' && rest[k-1] <= '9') {
			k--
		}
		if match(rest[k:i]) {
			return true
		}
		rest = rest[i+2:]
	}
}

// errProbingThread marks a thread of Probing's own, left out.
var errProbingThread = errors.New("a thread of the Probing agent's own")

// probingOverview is what /apis/overview says of the threads.
type probingOverview struct {
	PID        int   `json:"pid"`
	MainThread int   `json:"main_thread"`
	Threads    []int `json:"threads"`
}

// probingStacks captures every thread of a process that runs the original
// Probing agent: the main thread within opt.AgentTimeout (if it does not
// answer, nothing else is asked: the process holds the GIL or is wedged),
// then the others, at most probingMaxThreads, one at a time,
// all within one deadline (twice AgentTimeout from the start). A thread
// not captured is kept without frames, for its /proc state (addProc), and
// the error says how many and why.
func probingStacks(ctx context.Context, c *Client, a *Agent, opt StackOptions) (*stacks.Process, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*opt.AgentTimeout)
	defer cancel()
	mctx, mcancel := context.WithTimeout(ctx, opt.AgentTimeout)
	defer mcancel()
	names := map[int]string{}
	if pr, err := procfacts.ReadProcess(a.PID); err == nil {
		for _, t := range pr.Threads {
			names[t.TID] = t.Comm
		}
	}
	var ov probingOverview
	b, err := c.Do(mctx, http.MethodGet, "/apis/overview", nil, "")
	if err == nil {
		if jerr := json.Unmarshal(b, &ov); jerr != nil {
			err = &Error{PID: a.PID, Kind: "malformed", Msg: fmt.Sprintf("the Probing agent's /apis/overview is not its JSON: %v", jerr)}
		}
	}
	if err != nil {
		return nil, err
	}
	main := ov.MainThread
	if main <= 0 {
		main = a.PID
	}
	one := func(ctx context.Context, tid int) (stacks.Thread, error) {
		var b []byte
		var err error
		for try := 0; ; try++ {
			b, err = c.Do(ctx, http.MethodGet, "/apis/pythonext/callstack?tid="+strconv.Itoa(tid), nil, "")
			ae, ok := errors.AsType[*Error](err)
			if err == nil || !ok || ae.Status != 500 || !strings.Contains(ae.Msg, "sender slot") || try == probingBusyRetries {
				break
			}
			select {
			case <-ctx.Done():
				return stacks.Thread{}, err
			case <-time.After(50 * time.Millisecond):
			}
		}
		if err != nil {
			return stacks.Thread{}, err
		}
		t, own, err := parseProbingCallstack(b, opt.MaxFrames)
		if err != nil {
			return stacks.Thread{}, &Error{PID: a.PID, Kind: "malformed", Msg: fmt.Sprintf("thread %d: %v", tid, err)}
		}
		t.NativeID, t.Name, t.IsMain = tid, names[tid], tid == main
		if own && !t.IsMain {
			// One of Probing's own threads (no Python frame, its frames):
			// dropped like our agent's threads.
			return stacks.Thread{}, errProbingThread
		}
		if t.Name == "" && t.IsMain {
			t.Name = "MainThread"
		}
		return t, nil
	}
	mt, err := one(mctx, main)
	if err != nil {
		return nil, err
	}
	p := &stacks.Process{PID: a.PID, Source: "probing", Threads: []stacks.Thread{mt}}
	var rest []int
	seen := map[int]bool{main: true}
	for _, tid := range ov.Threads {
		if tid <= 0 || seen[tid] || names[tid] == probingThreadName {
			continue
		}
		seen[tid] = true
		rest = append(rest, tid)
	}
	var problems []string
	if len(rest) > probingMaxThreads-1 {
		problems = append(problems, fmt.Sprintf("%d threads; the stacks of the first %d were asked for, the rest have /proc states only", len(rest)+1, probingMaxThreads))
		rest = rest[:probingMaxThreads-1]
	}
	// One at a time, each within what is left of the deadline.
	got := make([]*stacks.Thread, len(rest))
	errs := make([]error, len(rest))
	for i, tid := range rest {
		if ctx.Err() != nil {
			errs[i] = fmt.Errorf("not asked before the deadline (%s)", 2*opt.AgentTimeout)
			continue
		}
		t, err := one(ctx, tid)
		if err != nil {
			errs[i] = err
			continue
		}
		got[i] = &t
	}
	failed := 0
	var firstErr error
	for i, t := range got {
		if t != nil {
			p.Threads = append(p.Threads, *t)
			continue
		}
		if errs[i] == errProbingThread {
			continue
		}
		if !procfacts.Alive(a.PID, 0) || !threadAlive(a.PID, rest[i]) {
			continue // it ended since the overview
		}
		failed++
		if firstErr == nil {
			firstErr = errs[i]
		}
		// Kept without frames: addProc gives it its /proc state.
		p.Threads = append(p.Threads, stacks.Thread{NativeID: rest[i], Name: names[rest[i]], Frames: []stacks.Frame{}})
	}
	if failed > 0 {
		problems = append(problems, fmt.Sprintf("%d of %d threads' stacks not read (first: %v); they have /proc states only", failed, len(rest)+1, firstErr))
	}
	if len(problems) > 0 {
		p.Err = strings.Join(problems, "; ")
	}
	return p, nil
}

// threadAlive: the thread still exists.
func threadAlive(pid, tid int) bool {
	_, err := procfacts.TaskStatAt(procfacts.Proc, pid, tid)
	return err == nil || !procfacts.Gone(err)
}

// probingTimeoutReason is what a caller is told when the original agent
// did not answer in time: it has no GIL-free fallback (no faulthandler
// signal it registered), so /proc is what there is, said plainly.
func probingTimeoutReason(timeout time.Duration, osThreads []stacks.Thread) string {
	return fmt.Sprintf("the Probing agent did not answer within %s; the process holds the GIL or is wedged "+
		"(its callstack endpoint needs the GIL, and it registers no GIL-free dump); /proc shows %s",
		timeout, procWords(osThreads))
}

// procWords sums up kernel thread states: the main thread's, then how
// many others run and how many wait, on what.
func procWords(ts []stacks.Thread) string {
	if len(ts) == 0 {
		return "nothing (the process could not be read)"
	}
	var main string
	running, futex, other := 0, 0, 0
	for _, t := range ts {
		if t.IsMain {
			main = fmt.Sprintf("the main thread in state %s%s", t.State, wchanText(t.WChan))
			continue
		}
		switch {
		case t.State == "R":
			running++
		case strings.Contains(t.WChan, "futex"):
			futex++
		default:
			other++
		}
	}
	if main == "" {
		main = "no main thread"
	}
	return fmt.Sprintf("%s; of %d other thread(s), %d running, %d waiting on a futex (the GIL, among others), %d in other waits",
		main, len(ts)-1, running, futex, other)
}

func wchanText(w string) string {
	if w == "" {
		return " (no kernel wait: running a loop or a C call that holds the GIL)"
	}
	return " (waiting in " + w + ")"
}

// Probing keeps two kinds of config (0.2.4, what it answers): a runtime
// store that GET /config/<key> reads, where the listeners record what
// they bound ("server.address" = "0.0.0.0:41234"; the key has no
// "probing." prefix), and DataFusion settings, listed in
// information_schema.df_settings with "probing." names
// ("probing.server.timeout"), whose "probing.server.address" stays the
// requested "0.0.0.0:0". A key is looked up as it is written and in the
// other spelling, the store first (its values are the live ones).

// probingStoreKeys are the runtime store's keys a listing reads (the store
// has no listing of its own).
var probingStoreKeys = []string{"server.address"}

// probingConfig reads one key (key given) or every key of the original
// agent. Secrets are redacted.
func probingConfig(ctx context.Context, c *Client, key string) (map[string]string, error) {
	if key != "" {
		short, _ := strings.CutPrefix(key, "probing.")
		for _, k := range uniq(key, short) {
			v, ok, err := probingStoreGet(ctx, c, k)
			if err != nil {
				return nil, err
			}
			if ok {
				return map[string]string{k: redact(k, v)}, nil
			}
		}
	}
	all, err := probingSettings(ctx, c)
	if err != nil {
		return nil, err
	}
	if key != "" {
		for _, k := range uniq(key, "probing."+strings.TrimPrefix(key, "probing.")) {
			if v, ok := all[k]; ok {
				return map[string]string{k: v}, nil
			}
		}
		names := make([]string, 0, len(all)+len(probingStoreKeys))
		names = append(names, probingStoreKeys...)
		for n := range all {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, &Error{PID: c.PID, Kind: "http", Status: 404, Msg: fmt.Sprintf("the Probing agent has no config key %s (it has: %s)", key, strings.Join(names, ", "))}
	}
	for _, k := range probingStoreKeys {
		v, ok, err := probingStoreGet(ctx, c, k)
		if err != nil {
			return nil, err
		}
		if ok {
			all[k] = redact(k, v)
			delete(all, "probing."+k) // the setting's stale twin
		}
	}
	return all, nil
}

// probingStoreGet reads one key of the runtime store; ok is false when
// the agent has no such key (0.2.4 answers 500 "... not found").
func probingStoreGet(ctx context.Context, c *Client, key string) (string, bool, error) {
	b, err := c.Do(ctx, http.MethodGet, "/config/"+url.PathEscape(key), nil, "")
	if err != nil {
		if ae, ok := errors.AsType[*Error](err); ok && ae.Kind == "http" && (ae.Status == 404 || ae.Status == 500 && strings.Contains(ae.Msg, "not found")) {
			return "", false, nil
		}
		return "", false, err
	}
	return strings.TrimSpace(string(b)), true, nil
}

func uniq(a, b string) []string {
	if a == b {
		return []string{a}
	}
	return []string{a, b}
}

func redact(name, v string) string {
	if strings.Contains(name, "token") || strings.Contains(name, "secret") || strings.Contains(name, "password") {
		return "<redacted>"
	}
	return v
}

// probingSettings reads the probing.* DataFusion settings through the
// SQL endpoint: information_schema.df_settings, in Probing's query
// envelope and DataFrame encoding (contract §2.4).
func probingSettings(ctx context.Context, c *Client) (map[string]string, error) {
	body, _ := json.Marshal(map[string]any{
		"version": map[string]int{"major": 0, "minor": 1, "patch": 0}, "message_id": nil, "timestamp": 0,
		"payload": map[string]any{"expr": "SELECT name, value FROM information_schema.df_settings WHERE name LIKE 'probing.%'", "opts": nil},
	})
	b, err := c.Do(ctx, "POST", "/query", body, "application/json")
	if err != nil {
		return nil, err
	}
	var msg struct {
		Payload struct {
			DataFrame *struct {
				Names []string                     `json:"names"`
				Cols  []map[string]json.RawMessage `json:"cols"`
			} `json:"DataFrame"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(b, &msg); err != nil || msg.Payload.DataFrame == nil || len(msg.Payload.DataFrame.Cols) != 2 {
		return nil, &Error{PID: c.PID, Kind: "malformed", Msg: fmt.Sprintf("the Probing agent's /query reply is not a two-column DataFrame: %.200q", b)}
	}
	var names, values []string
	if err := json.Unmarshal(msg.Payload.DataFrame.Cols[0]["SeqText"], &names); err != nil {
		return nil, &Error{PID: c.PID, Kind: "malformed", Msg: "config names are not text"}
	}
	if err := json.Unmarshal(msg.Payload.DataFrame.Cols[1]["SeqText"], &values); err != nil || len(values) != len(names) {
		return nil, &Error{PID: c.PID, Kind: "malformed", Msg: "config values are not text of the names' length"}
	}
	out := map[string]string{}
	for i, n := range names {
		out[n] = redact(n, values[i])
	}
	return out, nil
}
