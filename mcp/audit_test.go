package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// auditOpenTimeout bounds a refusal that must come without blocking; it is
// the test's overall bound, not a margin.
const auditOpenTimeout = 30 * time.Second

// openAuditLogBounded runs OpenAuditLog and fails the test if it blocks.
func openAuditLogBounded(t *testing.T, path string) (*AuditLog, error) {
	t.Helper()
	type result struct {
		a   *AuditLog
		err error
	}
	got := make(chan result, 1)
	go func() {
		a, err := OpenAuditLog(path)
		got <- result{a, err}
	}()
	select {
	case r := <-got:
		return r.a, r.err
	case <-time.After(auditOpenTimeout):
		// Open the read side so that the blocked open returns and the
		// goroutine ends.
		if f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			defer f.Close()
		}
		t.Fatalf("OpenAuditLog(%s) blocked", path)
		return nil, nil
	}
}

// TestAuditLogRefusesNonRegularFiles: a FIFO (which would block the open
// until a reader came), a device, a directory, a socket, or a symlink is
// refused at once with an error naming the path, what it
// is, and the variable to change.
func TestAuditLogRefusesNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "audit.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "audit.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	link := filepath.Join(dir, "audit-link")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ path, kind string }{
		{fifo, "named pipe"},
		{link, "symbolic link"},
		{"/dev/null", "device"},
		{dir, "directory"},
		{sock, "socket"},
	}
	for _, tc := range cases {
		a, err := openAuditLogBounded(t, tc.path)
		if err == nil {
			_ = a.Close()
			t.Errorf("%s: opened as the audit log", tc.path)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tc.path) || !strings.Contains(msg, tc.kind) || !strings.Contains(msg, "PROBING_MCP_AUDIT_LOG") {
			t.Errorf("%s: error %q should name the path, %q and PROBING_MCP_AUDIT_LOG", tc.path, msg, tc.kind)
		}
	}
}

// TestAuditLogRefusesPlantedFiles: in a shared data dir anyone can leave a
// file under the audit log's name. A symlink to another file (which a
// root server would append to) or a dangling one (which it would create
// at the target) is refused, and nothing at the target is touched; so is
// a file another user owns, or one anyone can write.
func TestAuditLogRefusesPlantedFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	elsewhere := t.TempDir()
	target := filepath.Join(elsewhere, "secret")
	if err := os.WriteFile(target, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "mcp-audit.jsonl")
	os.Symlink(target, link)
	if a, err := openAuditLogBounded(t, link); err == nil {
		a.Close()
		t.Fatal("a symlink to another file was opened as the audit log")
	} else if !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("error %q should name the link and say it is one", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Fatalf("the link's target was written: %q", b)
	}
	os.Remove(link)
	dangling := filepath.Join(elsewhere, "created-by-the-server")
	os.Symlink(dangling, link)
	if a, err := openAuditLogBounded(t, link); err == nil {
		a.Close()
		t.Fatal("a dangling symlink was opened as the audit log")
	}
	if _, err := os.Lstat(dangling); err == nil {
		t.Fatal("the dangling link's target was created")
	}
	os.Remove(link)

	os.WriteFile(link, nil, 0o666)
	os.Chmod(link, 0o666)
	if a, err := openAuditLogBounded(t, link); err == nil {
		a.Close()
		t.Fatal("an audit log anyone can write was opened")
	} else if !strings.Contains(err.Error(), "writable by every user") {
		t.Errorf("error %q should say anyone can write it", err)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: another user's file is not tried (needs chown)")
		return
	}
	os.Chmod(link, 0o600)
	os.Chown(link, 65534, 65534)
	if a, err := openAuditLogBounded(t, link); err == nil {
		a.Close()
		t.Fatal("another user's file was opened as the audit log")
	} else if !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("error %q should name the owner", err)
	}
	// The directory holding it must be this user's too.
	os.Remove(link)
	os.Chown(dir, 65534, 65534)
	if a, err := openAuditLogBounded(t, link); err == nil {
		a.Close()
		t.Fatal("an audit log in another user's directory was opened")
	} else if !strings.Contains(err.Error(), "belongs to uid 65534") || !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q should name the directory and its owner", err)
	}
}

// auditLines splits an audit log into lines and checks that it ends with a
// newline: a record is a whole line or nothing.
func auditLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("audit log does not end with a newline: a torn record is left at its end: ...%s", b[max(0, len(b)-120):])
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func auditRecordOf(line string) (AuditRecord, bool) {
	var r AuditRecord
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	return r, dec.Decode(&r) == nil && r.ID != ""
}

func testAuditRecord(tool string) AuditRecord {
	return AuditRecord{Time: time.Now().UTC().Format(time.RFC3339Nano), ID: "w1", Phase: "call", Tool: tool,
		Caller: "test", ArgsSHA256: strings.Repeat("0", 64), ArgsBytes: 2}
}

// TestAuditLogRepairsATornTail: a log left with a torn last record (a crash
// or full disk mid-write) gets a newline and a marker record on open, so
// the next record starts a line of its own.
func TestAuditLogRepairsATornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	whole, _ := json.Marshal(testAuditRecord("set_config"))
	torn := `{"time":"2025-01-01T00:00:00Z","id":"w2","phase":"ca`
	if err := os.WriteFile(path, append(append(whole, '\n'), torn...), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.write(testAuditRecord("eval_python")); err != nil {
		t.Fatal(err)
	}
	_ = a.Close()

	lines := auditLines(t, path)
	if len(lines) != 4 || lines[1] != torn {
		t.Fatalf("want the whole record, the torn one alone on its line, a marker and the new record; got:\n%s", strings.Join(lines, "\n"))
	}
	marker, ok := auditRecordOf(lines[2])
	if !ok || marker.Phase != "repair" || marker.Outcome != "torn" || !strings.Contains(marker.Error, "cut short") {
		t.Errorf("marker line %s, want a repair record saying the record before it was cut short", lines[2])
	}
	if r, ok := auditRecordOf(lines[3]); !ok || r.Tool != "eval_python" {
		t.Errorf("new record line %s", lines[3])
	}
	// A log that ends well is left alone.
	a, err = OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Close()
	if n := len(auditLines(t, path)); n != 4 {
		t.Errorf("reopening a sound log changed it: %d lines, want 4", n)
	}
}

// mountSmallFS mounts a tmpfs of size bytes on a fresh directory, or skips
// the test where that is not possible (not root, no mount namespace).
func mountSmallFS(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// TestAuditLogFullDisk: on a real full file system, a record that does not
// fit is refused whole (the write fails, nothing of it stays), and once
// space is back the next record starts a fresh line.
func TestAuditLogFullDisk(t *testing.T) {
	dir := mountSmallFS(t, "16k")
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, bytes.Repeat([]byte("x"), 8<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "audit.jsonl")
	a, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rec := testAuditRecord("set_config")
	rec.Error = strings.Repeat("e", 300) // records that straddle pages
	var werr error
	written := 0
	for ; written < 1000 && werr == nil; written++ {
		werr = a.write(rec)
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("after %d records: %v, want ENOSPC from the full file system", written, werr)
	}
	lines := auditLines(t, path)
	for i, l := range lines {
		if _, ok := auditRecordOf(l); !ok {
			t.Fatalf("line %d of %d is not a whole record: %q", i+1, len(lines), l)
		}
	}
	if len(lines) != written-1 {
		t.Errorf("%d lines after %d successful writes", len(lines), written-1)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	rec.Tool = "after_space_freed"
	if err := a.write(rec); err != nil {
		t.Fatalf("write after space was freed: %v", err)
	}
	lines = auditLines(t, path)
	if r, ok := auditRecordOf(lines[len(lines)-1]); !ok || r.Tool != "after_space_freed" {
		t.Errorf("last line %q, want the new record whole", lines[len(lines)-1])
	}
}

// TestAuditLogRollsBackAFailedWrite: without a small file system at hand
// (not root), a writer that stops mid-record with ENOSPC shows the same:
// the partial record is cut off and the next one is whole.
func TestAuditLogRollsBackAFailedWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.write(testAuditRecord("first")); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	a.writeAll = func(f *os.File, b []byte) (int, error) {
		n, _ := f.Write(b[:len(b)/2])
		return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	if err := a.write(testAuditRecord("torn")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write: %v, want ENOSPC", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatalf("a failed write left bytes behind:\n%s", after[len(before):])
	}
	a.writeAll = (*os.File).Write
	if err := a.write(testAuditRecord("second")); err != nil {
		t.Fatal(err)
	}
	lines := auditLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("lines %q, want first and second", lines)
	}
	for i, tool := range []string{"first", "second"} {
		if r, ok := auditRecordOf(lines[i]); !ok || r.Tool != tool {
			t.Errorf("line %d: %q", i, lines[i])
		}
	}
}

// TestAuditLogRepairsATailTornWhileOpen: another server sharing the log
// died mid-record (or a cut failed): the next record repairs the line
// first, under the same lock.
func TestAuditLogRepairsATailTornWhileOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	other, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.WriteString(`{"time":"x","id":"other","ph`); err != nil {
		t.Fatal(err)
	}
	_ = other.Close()
	if err := a.write(testAuditRecord("ours")); err != nil {
		t.Fatal(err)
	}
	lines := auditLines(t, path)
	if len(lines) != 3 {
		t.Fatalf("lines %q, want the torn one, a marker and ours", lines)
	}
	if m, ok := auditRecordOf(lines[1]); !ok || m.Phase != "repair" {
		t.Errorf("marker %q", lines[1])
	}
	if r, ok := auditRecordOf(lines[2]); !ok || r.Tool != "ours" {
		t.Errorf("record %q", lines[2])
	}
}

// BenchmarkAuditLogWrite: one record, with its lock, tail check and fsync.
func BenchmarkAuditLogWrite(b *testing.B) {
	a, err := OpenAuditLog(filepath.Join(b.TempDir(), "audit.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	rec := testAuditRecord("set_config")
	for b.Loop() {
		if err := a.write(rec); err != nil {
			b.Fatal(err)
		}
	}
}
