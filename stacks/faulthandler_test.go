package stacks

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var versions = []string{"3.9", "3.10", "3.11", "3.12", "3.13"}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// funcs is a stack's function names, innermost first.
func funcs(fr []Frame) string {
	var s []string
	for _, f := range fr {
		s = append(s, f.Function)
	}
	return strings.Join(s, " ")
}

func mainThread(t *testing.T, threads []Thread) *Thread {
	t.Helper()
	var found *Thread
	for i := range threads {
		if threads[i].IsMain {
			if found != nil {
				t.Fatalf("two main threads: %x and %x", found.ID, threads[i].ID)
			}
			found = &threads[i]
		}
	}
	if found == nil {
		t.Fatal("no main thread")
	}
	return found
}

// secondDump is where the second signal's dump starts in a fixture: the
// second header of the main thread's kind glued to the previous line.
func secondDump(t *testing.T, b []byte) int {
	t.Helper()
	first := bytes.Index(b, []byte("Current thread 0x"))
	i := bytes.Index(b[first:], []byte("\nThread 0x"))
	if first < 0 || i < 0 {
		t.Fatal("fixture has no second dump")
	}
	return first + i + 1
}

func TestFaulthandlerFixtures(t *testing.T) {
	for _, v := range versions {
		t.Run(v, func(t *testing.T) {
			b := fixture(t, "faulthandler_py"+v+".txt")
			all, err := ParseFaulthandler(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != 12 {
				t.Fatalf("ParseFaulthandler: %d threads, want 2 dumps of 6", len(all))
			}
			last, err := ParseFaulthandlerLast(b, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(last) != 6 {
				t.Fatalf("last dump: %d threads, want 6", len(last))
			}
			m := mainThread(t, last)
			if got := funcs(m.Frames); got != "dump barrier train_step <module>" {
				t.Errorf("main thread of the last dump: %q", got)
			}
			if f := m.Frames[1]; !strings.HasSuffix(f.File, "/gen_faulthandler.py") || f.Line != 92 {
				t.Errorf("frame %+v", f)
			}
			if m.ID == 0 || m.FramesTruncated {
				t.Errorf("main %+v", m)
			}
			if got := funcs(mainThread(t, all[:6]).Frames); got != "dump all_reduce train_step <module>" {
				t.Errorf("main thread of the first dump: %q", got)
			}
			var deep, empty, idle int
			for _, th := range last {
				switch {
				case th.FramesTruncated:
					deep++
					if len(th.Frames) != 100 || th.Frames[len(th.Frames)-1].Function != "recurse" || th.IsMain {
						t.Errorf("deep thread: %d frames, outermost %v, main %v", len(th.Frames), th.Frames[len(th.Frames)-1], th.IsMain)
					}
				case len(th.Frames) == 0:
					empty++
					if th.ID != m.ID { // PyThreadState_New took the creating thread's id
						t.Errorf("frameless thread id %x, main %x", th.ID, m.ID)
					}
				case IsIdle(th.Frames):
					idle++
				}
			}
			if deep != 1 || empty != 1 || idle != 3 {
				t.Errorf("deep %d, frameless %d, idle %d; want 1, 1, 3", deep, empty, idle)
			}

			// The caller's offset: the size before the second signal.
			off := secondDump(t, b)
			again, err := ParseFaulthandlerLast(b, int64(off))
			if err != nil || funcs(mainThread(t, again).Frames) != "dump barrier train_step <module>" {
				t.Errorf("since the second dump: %v", err)
			}
			// Only the first dump was there when the offset was taken.
			first, err := ParseFaulthandlerLast(b[:off], 0)
			if err != nil || funcs(mainThread(t, first).Frames) != "dump all_reduce train_step <module>" {
				t.Errorf("first dump alone: %v", err)
			}
			if _, err := ParseFaulthandlerLast(b, int64(len(b))); !errors.Is(err, ErrNoDump) {
				t.Errorf("nothing new since the end: %v", err)
			}
			// An offset past the end: the file was replaced, all of it is new.
			if th, err := ParseFaulthandlerLast(b, int64(len(b))+10); err != nil || len(th) != 6 {
				t.Errorf("offset past the end: %d threads, %v", len(th), err)
			}
		})
	}
}

// TestFaulthandlerLastWhileWriting reads the file at every length the
// writer could have left it at: the newest complete dump is the first
// until the second is, and a half-written line or a thread separator
// never passes for a finished dump.
func TestFaulthandlerLastWhileWriting(t *testing.T) {
	b := fixture(t, "faulthandler_py3.12.txt")
	off := secondDump(t, b)
	// The second dump's first thread ends at sep; the blank line after
	// it announces another thread.
	sep := off + bytes.Index(b[off:], []byte("\n\n"))
	for n := off; n <= len(b); n++ {
		th, err := ParseFaulthandlerLast(b[:n], 0)
		if err != nil {
			t.Fatalf("at %d bytes: %v", n, err)
		}
		hasMain := false
		for _, x := range th {
			hasMain = hasMain || x.IsMain
			for _, f := range x.Frames {
				if f.Function == "" || f.Line == 0 {
					t.Fatalf("at %d bytes: half-read frame %+v", n, f)
				}
			}
		}
		if (n <= sep || n == sep+2) && (!hasMain || funcs(mainThread(t, th).Frames) != "dump all_reduce train_step <module>") {
			t.Fatalf("at %d bytes (second dump's first thread not finished): want the first dump", n)
		}
		if n == len(b) && funcs(mainThread(t, th).Frames) != "dump barrier train_step <module>" {
			t.Fatal("whole file: want the second dump")
		}
		// In between, a dump cut at a thread boundary passes for complete:
		// the documented reason to wait until the file stops growing.
	}
	// Reading from the second dump's start, nothing is complete until its
	// first thread is.
	if _, err := ParseFaulthandlerLast(b[:off+20], int64(off)); !errors.Is(err, ErrNoDump) {
		t.Errorf("a header alone: %v", err)
	}
	// An offset inside a line skips to the next line.
	if th, err := ParseFaulthandlerLast(b, int64(off-3)); err != nil || len(th) != 6 {
		t.Errorf("mid-line offset: %d threads, %v", len(th), err)
	}
}

func TestFaulthandlerCrash(t *testing.T) {
	th, err := ParseFaulthandler(fixture(t, "faulthandler_crash_py3.12.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(th) != 2 || funcs(mainThread(t, th).Frames) != "forward step <module>" {
		t.Fatalf("%+v", th)
	}
	if e, ok := entryFrame(&th[0]); !ok || e.Function != "run" {
		t.Errorf("watchdog thread entry %v %v", e, ok)
	}
}

func TestFaulthandlerFormats(t *testing.T) {
	text := strings.Join([]string{
		"Fatal Python error: Aborted",
		"",
		`Thread 0x00007f00000000aa [pt_autograd_0] (most recent call first):`, // 3.14 names
		`  File "/x/caf\xe9/\u4e2d.py", line ??? in f\xe9`,
		`  File ???, line 3 in ???`,
		`  File "/x/"quoted", line 2".py", line 7 in g`,
		`  File "/x/a.py", line 0 in <genexpr>`,
		`  File "/x/a.py", line 12 in <module>`,
		"",
		`Current thread 0x00000000000000bb (most recent call first):`,
		`  <tstate is freed>`,
		"",
		"...",
		"",
		"Extension modules: numpy.core._multiarray_umath (total: 1)",
		`Stack (most recent call first):`,
		`  File "/y/b.py", line 3 in h`,
	}, "\r\n")
	th, err := ParseFaulthandler([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(th) != 3 {
		t.Fatalf("%d threads: %+v", len(th), th)
	}
	a := th[0]
	if a.ID != 0x7f00000000aa || a.Name != "pt_autograd_0" || !a.IsMain || len(a.Frames) != 5 {
		t.Errorf("thread a: %+v", a)
	}
	want := []Frame{{"/x/café/中.py", 0, "fé"}, {"???", 3, "???"}, {`/x/"quoted", line 2".py`, 7, "g"}, {"/x/a.py", 0, "<genexpr>"}}
	for i, w := range want {
		if a.Frames[i] != w {
			t.Errorf("frame %d: %+v, want %+v", i, a.Frames[i], w)
		}
	}
	if th[1].ID != 0xbb || len(th[1].Frames) != 0 || th[1].IsMain {
		t.Errorf("thread b: %+v", th[1])
	}
	if th[2].ID != 0 || funcs(th[2].Frames) != "h" {
		t.Errorf("single-thread stack: %+v", th[2])
	}
	if _, err := ParseFaulthandler([]byte("Traceback (most recent call last):\n  File \"x\", line 1, in <module>\n")); !errors.Is(err, ErrNoDump) {
		t.Errorf("a Python traceback is not a dump: %v", err)
	}
	if got := unescapeASCII(`a\qb\x4`); got != `a\qb\x4` {
		t.Errorf("bad escapes kept: %q", got)
	}
}

// FuzzParseFaulthandler: no panic, the two parsers agree on what a dump
// is, and whatever parses can be merged and rendered.
//
//	go test ./stacks -run '^$' -fuzz FuzzParseFaulthandler -fuzztime 60s
func FuzzParseFaulthandler(f *testing.F) {
	for _, v := range versions {
		b := fixture(f, "faulthandler_py"+v+".txt")
		f.Add(b[:min(len(b), 3000)], int64(0))
		f.Add(b[len(b)-min(len(b), 1500):], int64(100))
	}
	f.Add(fixture(f, "faulthandler_crash_py3.12.txt"), int64(0))
	f.Add([]byte("Thread 0x1 [a] (most recent call first):\n<no Python frame>\n\n...\nStack (most recent call first):\n  File \"\\U0001F600\", line 1 in x\n  ...\n"), int64(3))
	f.Fuzz(func(t *testing.T, data []byte, since int64) {
		all, err := ParseFaulthandler(data)
		if err == nil && len(all) == 0 {
			t.Fatal("no error and no thread")
		}
		last, err := ParseFaulthandlerLast(data, since)
		if err != nil {
			if !errors.Is(err, ErrNoDump) {
				t.Fatalf("error not ErrNoDump: %v", err)
			}
			return
		}
		if len(last) == 0 {
			t.Fatal("a dump without threads")
		}
		if since <= 0 && len(last) > len(all) {
			t.Fatalf("last dump has %d threads, the whole text %d", len(last), len(all))
		}
		for _, th := range last {
			for _, fr := range th.Frames {
				if fr.Line < 0 {
					t.Fatalf("negative line %+v", fr)
				}
			}
		}
		m := Merge([]Process{{PID: 1, Rank: 0, Threads: last}, {PID: 2, Rank: 1, Threads: all}}, MergeOptions{MaxFrames: 5, IncludeIdle: true})
		if m.Threads != len(last)+len(all) || m.Summary == "" {
			t.Fatalf("merge: %+v", m)
		}
		if m.Text(TextOptions{}) == "" {
			t.Fatal("no text")
		}
	})
}
