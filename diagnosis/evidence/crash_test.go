package evidence

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
)

// TestReadCrash: a dead rank's crash file (faulthandler's last words on a
// fatal signal) gives what killed it and the main thread's stack; one
// that anybody could have written is refused.
func TestReadCrash(t *testing.T) {
	b, err := os.ReadFile("../../stacks/testdata/faulthandler_crash_py3.12.txt")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "faulthandler.txt")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	a := &agent.Agent{PID: 4242, UID: os.Geteuid(), Identity: &procfacts.Identity{Rank: 3, CrashFile: p}}
	c, err := readCrash(a)
	if err != nil || c == nil || c.What != "Segmentation fault" || c.Main == nil || c.Main.Frames[0].Function != "forward" {
		t.Fatalf("%+v %v", c, err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := readCrash(a); err == nil || !strings.Contains(err.Error(), "writable by every user") {
		t.Errorf("a world-writable crash file: %v", err)
	}
	a.Identity.CrashFile = filepath.Join(t.TempDir(), "none.txt")
	if c, err := readCrash(a); c != nil || err != nil {
		t.Errorf("no crash file: %+v %v", c, err)
	}
}
