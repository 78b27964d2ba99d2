package procfacts

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// ExitsFile is where our agent records why its process ended
// (agent/PROTOCOL.md): uncaught exceptions, the main thread's end while
// other threads live on, and the exit, one JSON object a line.
const ExitsFile = ".exceptions.jsonl"

// MaxExitsBytes bounds what ReadEnding reads (the agent stops at 4 MiB).
const MaxExitsBytes = 4<<20 + 256<<10

// ExitFrame is one frame of a recorded traceback, innermost first.
type ExitFrame struct {
	File     string `json:"file"`
	Line     int    `json:"line"`
	Function string `json:"function"`
}

// ExitThread is the thread a record is about.
type ExitThread struct {
	Name     string `json:"name"`
	NativeID int    `json:"native_id"`
	Daemon   bool   `json:"daemon"`
	IsMain   bool   `json:"is_main"`
}

// ExitRecord is one line of the file; which fields are set depends on Kind
// ("exception", "main_thread_exit", "exit").
type ExitRecord struct {
	V         int    `json:"v"`
	Kind      string `json:"kind"`
	TimeNS    int64  `json:"time_ns"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	// exception
	Hook    string      `json:"hook,omitempty"`
	Thread  *ExitThread `json:"thread,omitempty"`
	Type    string      `json:"type,omitempty"`
	Message string      `json:"message,omitempty"`
	Frames  []ExitFrame `json:"frames,omitempty"`
	// main_thread_exit
	Outcome   string `json:"outcome,omitempty"`
	Exception *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"exception,omitempty"`
	ThreadsAlive      []ExitThread `json:"threads_alive,omitempty"`
	ThreadsAliveTotal int          `json:"threads_alive_total,omitempty"`
	// exit
	Code            *int     `json:"code,omitempty"`
	CodeSource      string   `json:"code_source,omitempty"`
	Signal          *int     `json:"signal,omitempty"`
	SignalsReceived []string `json:"signals_received,omitempty"`
}

// Ending is what a process left about how it ended.
type Ending struct {
	// Exception is the last uncaught exception of the main thread, else of
	// any thread; Exceptions counts them all.
	Exception  *ExitRecord `json:"exception,omitempty"`
	Exceptions int         `json:"exceptions"`
	// MainThreadExit: the main thread ended while other threads kept the
	// process alive.
	MainThreadExit *ExitRecord `json:"main_thread_exit,omitempty"`
	// Exit is the interpreter's exit; none when the process was killed,
	// ended by a signal's default action, crashed or called os._exit.
	Exit *ExitRecord `json:"exit,omitempty"`
	// Signals names the .signal.<NAME>.txt files that are not empty: the
	// process received that signal.
	Signals []string `json:"signals,omitempty"`
	// SignalDump is the faulthandler dump of the first of those signals
	// (every thread's stack as the signal came), at most maxSignalDump
	// bytes: where a rank was when its launcher stopped it.
	SignalDump []byte `json:"-"`
	// Skipped counts lines that did not decode or belong to an earlier
	// process with the same pid.
	Skipped int `json:"skipped,omitempty"`
}

// ReadEnding reads a pid directory's ending records for the process that
// started at start (0: any), bounded, from regular files only. The caller
// has decided that the directory may be believed (CheckFile), and passes
// the owner the files must belong to. It returns nil when the directory
// holds nothing about an ending.
func ReadEnding(dir string, start uint64, owner Owner) (*Ending, error) {
	e := &Ending{}
	found := false
	f, fi, err := OpenRegular(filepath.Join(dir, ExitsFile))
	switch {
	case err == nil:
		defer f.Close()
		if err := CheckFile(fi, owner); err != nil {
			return nil, fmt.Errorf("%s: %v", ExitsFile, err)
		}
		found = true
		sc := bufio.NewScanner(&limited{f: f, n: MaxExitsBytes})
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			var r ExitRecord
			if json.Unmarshal(sc.Bytes(), &r) != nil || r.V != 1 || (start != 0 && r.StartTime != start) {
				e.Skipped++
				continue
			}
			switch r.Kind {
			case "exception":
				e.Exceptions++
				if e.Exception == nil || r.Thread == nil || r.Thread.IsMain || e.Exception.Thread == nil || !e.Exception.Thread.IsMain {
					rr := r
					e.Exception = &rr
				}
			case "main_thread_exit":
				rr := r
				e.MainThreadExit = &rr
			case "exit":
				rr := r
				e.Exit = &rr
			default:
				e.Skipped++
			}
		}
	case !os.IsNotExist(err):
		return nil, err
	}
	for _, sig := range []string{"SIGTERM", "SIGINT"} {
		name := filepath.Join(dir, ".signal."+sig+".txt")
		if fi, err := os.Lstat(name); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 && CheckFile(fi, owner) == nil {
			e.Signals = append(e.Signals, sig)
			found = true
			if e.SignalDump == nil {
				e.SignalDump = readSignalDump(name, owner)
			}
		}
	}
	if !found {
		return nil, nil
	}
	return e, nil
}

// limited reads at most n bytes, then reports the end.
type limited struct {
	f *os.File
	n int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("over %d bytes", MaxExitsBytes)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.f.Read(p)
	l.n -= int64(n)
	return n, err
}

// Summary says in one line how the process ended, for a process that is
// gone (alive: false) or lives on (the main thread's end).
func (e *Ending) Summary(alive bool) string {
	if e == nil {
		return ""
	}
	var parts []string
	switch {
	case e.Exit != nil:
		s := "exited"
		switch {
		case e.Exit.Signal != nil:
			s = fmt.Sprintf("ended by signal %d", *e.Exit.Signal)
		case e.Exit.Code != nil:
			s = fmt.Sprintf("exited with code %d", *e.Exit.Code)
		}
		parts = append(parts, s)
	case len(e.Signals) > 0 && !alive:
		parts = append(parts, "ended by "+e.Signals[len(e.Signals)-1]+" (no exit record: the signal's default action ended it)")
	case !alive:
		parts = append(parts, "ended without an exit record (killed with SIGKILL, the OOM killer, a crash or os._exit)")
	}
	if x := e.Exception; x != nil {
		s := "after " + ExceptionText(x.Type, x.Message)
		if len(x.Frames) > 0 {
			f := x.Frames[0]
			s += fmt.Sprintf(" at %s:%d (%s)", jobtext.QuoteTail(path.Base(f.File), jobtext.Name), f.Line, jobtext.Quote(f.Function, jobtext.Func))
		}
		if x.Thread != nil && !x.Thread.IsMain {
			s += " in thread " + jobtext.Quote(x.Thread.Name, jobtext.Name)
		}
		if e.Exceptions > 1 {
			s += fmt.Sprintf(" (%d uncaught exceptions recorded)", e.Exceptions)
		}
		parts = append(parts, s)
	}
	if m := e.MainThreadExit; m != nil {
		var names []string
		for _, t := range m.ThreadsAlive {
			names = append(names, t.Name)
		}
		how := "returned"
		if m.Exception != nil {
			how = "died of " + ExceptionText(m.Exception.Type, m.Exception.Message)
		} else if m.Outcome == "sys.exit" {
			how = "called sys.exit"
		}
		parts = append(parts, fmt.Sprintf("its main thread %s while %d non-daemon thread(s) kept the process alive (%s)",
			how, max(m.ThreadsAliveTotal, len(names)), jobtext.Quote(strings.Join(names, ", "), 120)))
	}
	return strings.Join(parts, " ")
}

// ExceptionText is an exception as a line shows it: "Type: message" (its
// first line, " …" after the quote when more followed), quoted and
// clipped: the job wrote both, and may have written anything (jobtext).
func ExceptionText(typ, msg string) string {
	msg = strings.TrimSpace(msg)
	more := ""
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg, more = msg[:i], " …"
	}
	if msg != "" {
		typ += ": " + msg
	}
	return jobtext.Quote(typ, jobtext.Message) + more
}

// maxSignalDump bounds a signal's stack dump (faulthandler writes at most
// 100 frames a thread; the file is appended to, the last dump is the one).
const maxSignalDump = 1 << 20

// readSignalDump reads a signal's dump file, trusted as the ending records
// are (the owner's regular file, no symlink); the last maxSignalDump
// bytes. nil when it cannot be read.
func readSignalDump(name string, owner Owner) []byte {
	f, fi, err := OpenRegular(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	if CheckFile(fi, owner) != nil {
		return nil
	}
	if off := fi.Size() - maxSignalDump; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return nil
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSignalDump))
	if err != nil {
		return nil
	}
	return b
}
