package diagnosis

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/internal/procfacts"
)

// TestSourceLineOnlyWhatTheJobCouldRead: the line is shown for a file the
// job's user can read, and refused for one only another user can read
// (the frame named it, the job could not have read it), for a relative
// path, a directory, and a line past the end.
func TestSourceLineOnlyWhatTheJobCouldRead(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "train.py")
	if err := os.WriteFile(f, []byte("import time\n\n    time.sleep(1)   \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	me := os.Geteuid()
	got, err := sourceLine(f, 3, procfacts.Owner{UID: me, GID: -1})
	if err != nil || got != "time.sleep(1)" {
		t.Fatalf("%q, %v", got, err)
	}
	other := procfacts.Owner{UID: me + 4242, GID: -1}
	if me == 0 {
		other.UID = 4242
	}
	if _, err := sourceLine(f, 3, other); err == nil || !strings.Contains(err.Error(), "not readable by the job's user") {
		t.Errorf("0600 file of another user: %v", err)
	}
	if err := os.Chmod(f, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := sourceLine(f, 1, other); err != nil || got != "import time" {
		t.Errorf("world-readable: %q, %v", got, err)
	}
	for _, c := range []struct {
		file string
		line int
		want string
	}{{"train.py", 1, "not an absolute path"}, {dir, 1, "not a regular file"}, {f, 9, "fewer than 9 lines"}, {f, 0, "out of range"}} {
		if _, err := sourceLine(c.file, c.line, procfacts.Owner{UID: me, GID: -1}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:%d: %v, want %q", c.file, c.line, err, c.want)
		}
	}
}
