package stacks

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrNoDump: the text holds no (complete) faulthandler dump.
var ErrNoDump = errors.New("no faulthandler dump")

// faulthandlerMaxFrames is CPython's MAX_FRAME_DEPTH: faulthandler writes
// at most this many frames per thread.
const faulthandlerMaxFrames = 100

// ParseFaulthandler reads CPython's faulthandler output (3.9–3.14): blocks
// of
//
//	Thread 0x00007f… (most recent call first):
//	  File "/x/train.py", line 12 in step
//
// ("Current thread 0x…" for the thread that took the signal, "Stack (most
// recent call first):" when all_threads was off), with the markers
// "<no Python frame>", "<tstate is freed>" and "  ..." (more than 100
// frames). Lines around the dumps ("Fatal Python error: …", "Extension
// modules: …", 3.14's C stack) are skipped. A text that holds several
// dumps yields every dump's threads in file order; for the appended
// .stacks.txt use ParseFaulthandlerLast.
//
// faulthandler gives no thread names before 3.14 and never says which
// thread is the main one: IsMain is inferred (see markMain).
func ParseFaulthandler(text []byte) ([]Thread, error) {
	var out []Thread
	for _, d := range splitDumps(text, true) {
		out = append(out, d.threads...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("faulthandler output (%d bytes): no header like \"Thread 0x… (most recent call first):\": %w", len(text), ErrNoDump)
	}
	return out, nil
}

// ParseFaulthandlerLast returns the threads of the newest complete dump in
// text that starts at or after offset since. The agent's .stacks.txt is
// opened for append and faulthandler adds one dump per signal, so the
// caller notes the file's size, sends the signal, and passes that size
// here: an older dump can then never be taken for the new one. since < 0,
// or past the end (the file was truncated or replaced), reads the whole
// text.
//
// Dumps are told apart by how faulthandler writes them: the threads of
// one dump are separated by exactly one blank line, and nothing else;
// successive dumps follow each other with no blank line (measured with
// CPython 3.9–3.13, testdata/). So a header that follows a blank line
// after a thread block continues the dump, and any other header starts a
// new one. A dump is complete when its last line ends with a newline and
// its last thread has a line under its header; faulthandler writes from
// a signal handler while the reader may be reading, so the caller should
// also wait until the file stops growing. ErrNoDump is returned (wrapped)
// when no complete dump is there yet.
func ParseFaulthandlerLast(text []byte, since int64) ([]Thread, error) {
	if since < 0 || since > int64(len(text)) {
		since = 0
	}
	region := text[since:]
	if since > 0 && text[since-1] != '\n' {
		// Not a line start: the offset is not a size the file had between
		// two dumps. Skip the rest of that line.
		if i := bytes.IndexByte(region, '\n'); i >= 0 {
			region = region[i+1:]
		} else {
			region = nil
		}
	}
	dumps := splitDumps(region, false)
	for i := len(dumps) - 1; i >= 0; i-- {
		if dumps[i].complete {
			return dumps[i].threads, nil
		}
	}
	return nil, fmt.Errorf("faulthandler output: no complete dump after offset %d (%d bytes there, %d partial dump(s)): %w", since, len(region), len(dumps), ErrNoDump)
}

type dump struct {
	threads  []Thread
	complete bool
	// cappedThreads: faulthandler stopped at its 100-thread limit ("..."
	// on a line of its own); the main thread, listed last, is missing.
	cappedThreads bool
	lastHasLines  bool
}

// splitDumps runs the state machine described at ParseFaulthandlerLast.
// lastLineComplete says whether a last line without a newline is whole
// (a finished text) or may still be being written (a live file).
func splitDumps(text []byte, lastLineComplete bool) []dump {
	const (
		outside    = iota // not in a dump
		inThread          // after a header or a thread's line
		afterBlank        // a blank line after a thread block
	)
	var dumps []dump
	state := outside
	cur := func() *dump { return &dumps[len(dumps)-1] }
	thread := func() *Thread { d := cur(); return &d.threads[len(d.threads)-1] }
	var partial []byte
	for len(text) > 0 {
		var line []byte
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			line, text = text, nil
			if !lastLineComplete {
				partial = line
				break
			}
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		s := string(line)
		if h, ok := parseHeader(s); ok {
			if state != afterBlank {
				dumps = append(dumps, dump{})
			}
			d := cur()
			d.threads = append(d.threads, h)
			d.lastHasLines = false
			state = inThread
			continue
		}
		trimmed := strings.TrimSpace(s)
		switch {
		case trimmed == "":
			if state == inThread {
				state = afterBlank
			}
		case state == afterBlank && s == "...":
			// The 100-thread limit: the dump ends here.
			cur().cappedThreads = true
		case state != inThread:
			state = outside
		case strings.HasPrefix(s, "  File "):
			if f, ok := parseFrameLine(s[len("  File "):]); ok {
				t := thread()
				t.Frames = append(t.Frames, f)
			}
			cur().lastHasLines = true
		case trimmed == "...":
			thread().FramesTruncated = true
			cur().lastHasLines = true
		case strings.HasPrefix(trimmed, "<") && strings.HasSuffix(trimmed, ">"):
			// <no Python frame>, <tstate is freed>, …: a thread with
			// nothing to show. 3.9 writes it unindented.
			cur().lastHasLines = true
		default:
			state = outside
		}
	}
	for i := range dumps {
		d := &dumps[i]
		d.complete = d.lastHasLines
		markMain(d)
	}
	if len(dumps) > 0 && !lastLineComplete {
		// The blank line before another thread of this dump is there, or
		// a line of this thread is being written (indented; a line that
		// is not can only start something else).
		if state == afterBlank || (state == inThread && len(partial) > 0 && (partial[0] == ' ' || partial[0] == '<')) {
			cur().complete = false
		}
	}
	return dumps
}

// parseHeader reads "Thread 0x7f… (most recent call first):", its
// "Current thread" form, 3.14's "Thread 0x… [name] (…):" and the
// single-thread "Stack (most recent call first):".
func parseHeader(s string) (Thread, bool) {
	const suffix = " (most recent call first):"
	if !strings.HasSuffix(s, suffix) {
		return Thread{}, false
	}
	s = s[:len(s)-len(suffix)]
	if s == "Stack" {
		return Thread{Frames: []Frame{}}, true
	}
	rest, ok := strings.CutPrefix(s, "Thread 0x")
	if !ok {
		if rest, ok = strings.CutPrefix(s, "Current thread 0x"); !ok {
			return Thread{}, false
		}
	}
	hex, name := rest, ""
	if i := strings.IndexByte(rest, ' '); i >= 0 {
		hex, name = rest[:i], rest[i+1:]
		if len(name) < 2 || name[0] != '[' || name[len(name)-1] != ']' {
			return Thread{}, false
		}
		name = unescapeASCII(name[1 : len(name)-1])
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		return Thread{}, false
	}
	return Thread{ID: id, Name: name, Frames: []Frame{}}, true
}

// parseFrameLine reads `"path", line N in func` (after "  File "). The
// path is everything up to the last `", line `: a file name may hold
// quotes, a function name cannot hold that sequence in practice.
func parseFrameLine(s string) (Frame, bool) {
	var f Frame
	if strings.HasPrefix(s, "???") {
		// co_filename is not a str: CPython writes ??? unquoted.
		f.File = "???"
		s = s[3:]
	} else {
		if !strings.HasPrefix(s, `"`) {
			return f, false
		}
		i := strings.LastIndex(s, `", line `)
		if i < 1 {
			return f, false
		}
		f.File = unescapeASCII(s[1:i])
		s = s[i+1:]
	}
	s, ok := strings.CutPrefix(s, ", line ")
	if !ok {
		return f, false
	}
	num, fn, ok := strings.Cut(s, " in ")
	if !ok {
		return f, false
	}
	if n, err := strconv.Atoi(num); err == nil && n >= 0 {
		f.Line = n
	} else if num != "???" {
		return f, false
	}
	f.Function = unescapeASCII(fn)
	return f, true
}

// unescapeASCII undoes faulthandler's dump_ascii, which writes characters
// outside printable ASCII as \xNN, \uNNNN and \UNNNNNNNN, so that a path
// reads the same as the agent's. A backslash not followed by a valid
// escape is kept.
func unescapeASCII(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			n := 0
			switch s[i+1] {
			case 'x':
				n = 2
			case 'u':
				n = 4
			case 'U':
				n = 8
			}
			if n > 0 && i+2+n <= len(s) {
				if v, err := strconv.ParseUint(s[i+2:i+2+n], 16, 32); err == nil && utf8.ValidRune(rune(v)) {
					b.WriteRune(rune(v))
					i += 1 + n
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// markMain infers IsMain, which faulthandler never says. The main thread's
// outermost frame is the script's <module>, or runpy's when run with -m;
// threads started by threading begin in _bootstrap. When no thread shows
// that (the main stack was cut at 100 frames), the last block is taken:
// CPython lists thread states newest first, so the main thread, the
// oldest, comes last, unless the 100-thread limit cut the list. Since
// 3.13 faulthandler no longer writes "..." after 100 frames (measured
// with 3.13.0), so a stack of exactly 100 frames counts as cut.
func markMain(d *dump) {
	found := false
	for i := range d.threads {
		t := &d.threads[i]
		if len(t.Frames) >= faulthandlerMaxFrames {
			t.FramesTruncated = true
		}
		if !t.FramesTruncated && len(t.Frames) > 0 && isMainEntry(t.Frames[len(t.Frames)-1]) {
			t.IsMain = true
			found = true
		}
	}
	if !found && !d.cappedThreads && len(d.threads) > 0 {
		if last := &d.threads[len(d.threads)-1]; last.FramesTruncated {
			last.IsMain = true
		}
	}
}

func isMainEntry(f Frame) bool {
	if f.Function == "<module>" {
		return true
	}
	return hasPathSuffix(f.File, "runpy.py") && (f.Function == "_run_module_as_main" || f.Function == "_run_code")
}

// hasPathSuffix: file is suffix or ends in "/"+suffix.
func hasPathSuffix(file, suffix string) bool {
	return file == suffix || strings.HasSuffix(file, "/"+suffix)
}
