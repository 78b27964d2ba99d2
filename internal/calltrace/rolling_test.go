package calltrace

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// segFile is one segment as read back.
type segFile struct {
	name  string
	seq   int64
	gz    bool
	size  int64 // bytes of JSONL (after gunzip)
	lines []string
}

// readSegments reads every segment of prefix, oldest first; gzipped ones
// must decompress whole and every line must be JSON.
func readSegments(t *testing.T, prefix string) []segFile {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(prefix))
	if err != nil {
		t.Fatal(err)
	}
	var out []segFile
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), filepath.Base(prefix)+".")
		if !ok || rest == "lock" {
			continue
		}
		num, ext, _ := strings.Cut(rest, ".")
		seq, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			t.Fatalf("stray file %s", e.Name())
		}
		p := filepath.Join(filepath.Dir(prefix), e.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", e.Name(), fi.Mode().Perm())
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := segFile{name: e.Name(), seq: seq}
		switch ext {
		case "jsonl.gz":
			s.gz = true
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s: %v", e.Name(), err)
			}
			if b, err = io.ReadAll(zr); err != nil {
				t.Fatalf("%s does not decompress whole: %v", e.Name(), err)
			}
		case "jsonl":
		default:
			t.Fatalf("stray file %s", e.Name())
		}
		s.size = int64(len(b))
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.Errorf("%s ends mid-line: %q", e.Name(), b[max(0, len(b)-40):])
		}
		for l := range strings.Lines(string(b)) {
			if !json.Valid([]byte(l)) {
				t.Errorf("%s: not a JSON line: %q", e.Name(), l)
			}
			s.lines = append(s.lines, strings.TrimSuffix(l, "\n"))
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// numbered is n JSON lines {"n":from}, {"n":from+1}, ..., padded to
// width bytes each (newline included) when width > 0.
func numbered(from, n, width int) [][]byte {
	var out [][]byte
	for i := from; i < from+n; i++ {
		l := fmt.Sprintf(`{"n":%d}`, i)
		if pad := width - len(l) - 1 - len(`,"p":""`); width > 0 && pad >= 0 {
			l = fmt.Sprintf(`{"n":%d,"p":"%s"}`, i, strings.Repeat("x", pad))
		}
		out = append(out, []byte(l+"\n"))
	}
	return out
}

func lineNum(t *testing.T, l string) int {
	t.Helper()
	var v struct{ N int }
	if err := json.Unmarshal([]byte(l), &v); err != nil {
		t.Fatalf("%q: %v", l, err)
	}
	return v.N
}

// checkRun: the segments, in order, hold the lines first..last, each once.
func checkRun(t *testing.T, segs []segFile, first, last int) {
	t.Helper()
	want := first
	for _, s := range segs {
		for _, l := range s.lines {
			if n := lineNum(t, l); n != want {
				t.Fatalf("%s: line %d, want %d (segments %v)", s.name, n, want, names(segs))
			}
			want++
		}
	}
	if want != last+1 {
		t.Fatalf("segments end at line %d, want %d (segments %v)", want-1, last, names(segs))
	}
}

func names(segs []segFile) []string {
	var n []string
	for _, s := range segs {
		n = append(n, fmt.Sprintf("%s(%d lines, %d B)", s.name, len(s.lines), s.size))
	}
	return n
}

func newRolling(t *testing.T, prefix string, rollBytes, rollLines int64, keep int) *rolling {
	t.Helper()
	r, err := openRolling(prefix, rollBytes, rollLines, keep, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.close() })
	return r
}

func mustWrite(t *testing.T, s sink, lines [][]byte) {
	t.Helper()
	if n, err := s.write(lines); err != nil || n != len(lines) {
		t.Fatalf("write: %d of %d, %v", n, len(lines), err)
	}
}

// A segment holds RollLines lines; finished ones are gzipped, the live
// one plain.
func TestRollingRollsAtTheLineThreshold(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "calls", "trace")
	r := newRolling(t, prefix, 1<<20, 3, 100)
	mustWrite(t, r, numbered(0, 4, 0)) // a batch that crosses a roll
	mustWrite(t, r, numbered(4, 1, 0)) // one line
	mustWrite(t, r, numbered(5, 4, 0)) // fills segments 2 and 3, rolls after 3
	mustWrite(t, r, numbered(9, 2, 0)) // starts segment 4
	segs := readSegments(t, prefix)
	if len(segs) != 4 {
		t.Fatalf("segments %v, want 3 gzipped of 3 lines and a live one of 2", names(segs))
	}
	for i, s := range segs {
		wantLines, wantGz := 3, true
		if i == 3 {
			wantLines, wantGz = 2, false
		}
		if len(s.lines) != wantLines || s.gz != wantGz || s.seq != int64(i+1) {
			t.Errorf("segment %d: %v, want %d lines, gzipped %v", i+1, names(segs[i:i+1]), wantLines, wantGz)
		}
	}
	checkRun(t, segs, 0, 10)
	if fi, err := os.Stat(filepath.Dir(prefix)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory made %v (%v), want 0700", fi.Mode().Perm(), err)
	}
}

// A segment holds at most RollBytes bytes: the next line would not have
// fitted. A line longer than RollBytes goes alone.
func TestRollingRollsAtTheByteThreshold(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "trace")
	const limit = 1000
	r := newRolling(t, prefix, limit, 0, 1000)
	n := 0
	for _, w := range []int{100, 90, 333, 170, 60, 250, 100, 999, 2500, 40} {
		mustWrite(t, r, numbered(n, 7, w))
		n += 7
	}
	segs := readSegments(t, prefix)
	checkRun(t, segs, 0, n-1)
	for i, s := range segs {
		if s.size > limit && len(s.lines) != 1 {
			t.Errorf("%s: %d bytes in %d lines, over the %d threshold", s.name, s.size, len(s.lines), limit)
		}
		if i+1 < len(segs) {
			next := int64(len(segs[i+1].lines[0]) + 1)
			if s.size+next <= limit {
				t.Errorf("%s rolled at %d bytes although the next line (%d bytes) fitted", s.name, s.size, next)
			}
			if !s.gz {
				t.Errorf("%s is finished but not gzipped", s.name)
			}
		}
	}
	if len(segs) < 10 {
		t.Errorf("only %d segments for %d lines: %v", len(segs), n, names(segs))
	}
}

// At most Segments segments stay, the live one included: the newest.
func TestRollingKeepsTheSegmentCap(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "trace")
	r := newRolling(t, prefix, 1<<20, 2, 3)
	for i := range 20 {
		mustWrite(t, r, numbered(i, 1, 0))
		if segs := readSegments(t, prefix); len(segs) > 3 {
			t.Fatalf("after line %d: %d segments, cap 3: %v", i, len(segs), names(segs))
		}
	}
	segs := readSegments(t, prefix)
	// Line 19 rolled segment 10 full: 9 and 10 stay, the live 11 is not
	// made until a line comes.
	if len(segs) != 2 || segs[0].seq != 9 || segs[1].seq != 10 {
		t.Fatalf("segments %v, want 9 and 10", names(segs))
	}
	checkRun(t, segs, 16, 19)
	mustWrite(t, r, numbered(20, 1, 0))
	segs = readSegments(t, prefix)
	if len(segs) != 3 {
		t.Fatalf("segments %v, want 3", names(segs))
	}
	checkRun(t, segs, 16, 20)

	// A cap of 1 keeps the live segment alone.
	prefix1 := filepath.Join(t.TempDir(), "one")
	r1 := newRolling(t, prefix1, 1<<20, 2, 1)
	mustWrite(t, r1, numbered(0, 5, 0))
	segs = readSegments(t, prefix1)
	if len(segs) != 1 || segs[0].gz {
		t.Fatalf("cap 1: %v, want the live segment alone", names(segs))
	}
	checkRun(t, segs, 4, 4)
}

// What a killed process leaves: a torn last line in the live segment, a
// finished segment still plain (killed before its gzip), a gzip's
// temporary file, a gzipped one whose plain copy was not yet removed.
// The next writer leaves every segment whole and readable.
func TestRollingRecoversWhatAKilledWriterLeft(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "trace")
	r := newRolling(t, prefix, 1<<20, 2, 100)
	mustWrite(t, r, numbered(0, 5, 0)) // 1.gz 2.gz, live 3 with one line
	_ = r.close()

	// Segment 3 finished plain, a broken tmp for it; segment 2 both
	// gzipped and plain; live segment 4 torn.
	seg := func(seq int64, ext string) string { return fmt.Sprintf("%s.%06d%s", prefix, seq, ext) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(seg(2, extPlain), []byte("{\"n\":2}\n{\"n\":3}\n"), 0o600))
	must(os.WriteFile(seg(3, extTmp), []byte("garbage"), 0o600))
	must(os.WriteFile(seg(4, extPlain), []byte("{\"n\":5}\n{\"n\":6,\"tor"), 0o600))
	lock, err := os.OpenFile(prefix+".lock", os.O_WRONLY, 0)
	must(err)
	_, err = lock.WriteAt(fmt.Appendf(nil, "%020d\n", 4), 0)
	must(err)
	must(lock.Close())
	// Segment 3 holds line 4; its plain file is the live one this writer left.
	r2 := newRolling(t, prefix, 1<<20, 2, 100)
	mustWrite(t, r2, numbered(6, 1, 0))
	segs := readSegments(t, prefix)
	for i, s := range segs[:len(segs)-1] {
		if !s.gz || s.seq != int64(i+1) {
			t.Errorf("finished segment %s is not gzipped (or out of order): %v", s.name, names(segs))
		}
	}
	checkRun(t, segs, 0, 6)
	if _, err := os.Stat(seg(3, extTmp)); err == nil {
		t.Error("the temporary gzip of segment 3 is left")
	}
}

// Two servers on one prefix (two opens: flock excludes them as it does two
// processes) write every line once and roll each segment once.
func TestRollingSharedPrefix(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "trace")
	a := newRolling(t, prefix, 1<<20, 10, 1000)
	b := newRolling(t, prefix, 1<<20, 10, 1000)
	var wg sync.WaitGroup
	for w, s := range []sink{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				if _, err := s.write([][]byte{fmt.Appendf(nil, "{\"w\":%d,\"n\":%d}\n", w, i)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	segs := readSegments(t, prefix)
	seen := map[string]bool{}
	for i, s := range segs {
		if len(s.lines) != 10 {
			t.Errorf("segment %d holds %d lines, want 10 (%v)", i, len(s.lines), names(segs))
		}
		for _, l := range s.lines {
			if seen[l] {
				t.Errorf("line %s written twice", l)
			}
			seen[l] = true
		}
	}
	if len(seen) != 200 {
		t.Errorf("%d distinct lines, want 200", len(seen))
	}
}

// The directory removed under a running writer is made again.
func TestRollingDirectoryVanishes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	prefix := filepath.Join(dir, "trace")
	r := newRolling(t, prefix, 1<<20, 0, 10)
	mustWrite(t, r, numbered(0, 2, 0))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, r, numbered(2, 2, 0))
	segs := readSegments(t, prefix)
	checkRun(t, segs, 2, 3)
}
