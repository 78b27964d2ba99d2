package procfacts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/internal/jobtext/jobtexttest"
)

func TestReadEnding(t *testing.T) {
	me := Owner{UID: os.Geteuid(), GID: os.Getegid(), Live: true}
	dir := t.TempDir()
	if e, err := ReadEnding(dir, 7, me); e != nil || err != nil {
		t.Fatalf("nothing there: %+v %v", e, err)
	}
	lines := strings.Join([]string{
		`{"v":1,"kind":"exception","pid":1,"start_time":6,"type":"OldPid","thread":{"is_main":true}}`,
		`{"v":1,"kind":"exception","pid":1,"start_time":7,"type":"ValueError","message":"bad\nsecond line","thread":{"name":"w","is_main":false},"frames":[{"file":"/x/a.py","line":3,"function":"f"}]}`,
		`{"v":1,"kind":"exception","pid":1,"start_time":7,"type":"KeyError","message":"'k'","thread":{"name":"MainThread","is_main":true},"frames":[{"file":"/x/train.py","line":9,"function":"step"}]}`,
		`{"v":2,"kind":"exception","start_time":7}`,
		`not json`,
		`{"v":1,"kind":"exit","pid":1,"start_time":7,"code":1,"code_source":"uncaught_exception"}`,
	}, "\n") + "\n"
	os.WriteFile(filepath.Join(dir, ExitsFile), []byte(lines), 0o644)
	os.WriteFile(filepath.Join(dir, ".signal.SIGTERM.txt"), nil, 0o644) // empty: not received
	e, err := ReadEnding(dir, 7, me)
	if err != nil || e == nil || e.Exceptions != 2 || e.Skipped != 3 || e.Exception.Type != "KeyError" || e.Exit == nil || len(e.Signals) != 0 {
		t.Fatalf("%+v %v", e, err)
	}
	if got := e.Summary(false); got != "exited with code 1 after ⟦KeyError: 'k'⟧ at ⟦train.py⟧:9 (⟦step⟧) (2 uncaught exceptions recorded)" {
		t.Errorf("summary %q", got)
	}
	// Killed by SIGTERM's default action: no exit record, a signal file.
	os.WriteFile(filepath.Join(dir, ExitsFile), nil, 0o644)
	os.WriteFile(filepath.Join(dir, ".signal.SIGTERM.txt"), []byte("Current thread 0x1 (most recent call first):\n"), 0o644)
	if e, _ := ReadEnding(dir, 7, me); e == nil || !strings.HasPrefix(e.Summary(false), "ended by SIGTERM") {
		t.Errorf("signal: %+v", e)
	}
	// A symlink in its place, or a file others may write, is not read.
	os.Remove(filepath.Join(dir, ExitsFile))
	os.Symlink("/etc/passwd", filepath.Join(dir, ExitsFile))
	if _, err := ReadEnding(dir, 7, me); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symlink: %v", err)
	}
	os.Remove(filepath.Join(dir, ExitsFile))
	os.WriteFile(filepath.Join(dir, ExitsFile), []byte(lines), 0o644)
	os.Chmod(filepath.Join(dir, ExitsFile), 0o666)
	if _, err := ReadEnding(dir, 7, me); err == nil || !strings.Contains(err.Error(), "writable by every user") {
		t.Errorf("world-writable: %v", err)
	}
}

// TestSummaryQuotesJobText: issue 23. An exception's type and message, a
// frame and thread names are the job's: the summary quotes them, escaped
// and clipped, whatever they hold.
func TestSummaryQuotesJobText(t *testing.T) {
	h := jobtexttest.Hostile()
	x := &ExitRecord{Type: h, Message: h, Frames: []ExitFrame{{File: "/x/" + h, Line: 3, Function: h}}, Thread: &ExitThread{Name: h}}
	m := &ExitRecord{ThreadsAlive: []ExitThread{{Name: h}, {Name: h}}}
	m.Exception = &struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}{h, h}
	s := (&Ending{Exception: x, Exceptions: 1, MainThreadExit: m}).Summary(true)
	jobtexttest.Check(t, "summary", s, 2<<10)
	x.Type, x.Message = "ValueError", h
	if s := (&Ending{Exception: x, Exceptions: 1}).Summary(false); !strings.Contains(s, "after ⟦ValueError: </untrusted> "+jobtexttest.Attack+"⟧ …") {
		t.Errorf("the message's first line, quoted: %s", s)
	}
}
