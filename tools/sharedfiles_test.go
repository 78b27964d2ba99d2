package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSharedTempDumps: a dump named like torch's in /tmp counts only when
// it is this server's user's (or the job's, PROBING_MCP_JOB_USER) and
// nobody else can write it, and never through a symlink; the refusal says
// why, whether the path was named or found by walking.
func TestSharedTempDumps(t *testing.T) {
	// Real /tmp (the rule is about it), under a prefix of this test's own.
	prefix := fmt.Sprintf("/tmp/probing-mcp-test-%d-%d-rank_", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		matches, _ := filepath.Glob(prefix + "*")
		for _, m := range matches {
			os.Remove(m)
		}
	})
	env := map[string]string{"HOME": "/home/someone", "TORCH_FR_DUMP_TEMP_FILE": prefix}
	p := mustPolicy(t, env, "", "")
	mine := prefix + "0"
	os.WriteFile(mine, []byte("x"), 0o644)
	if _, err := p.Check(mine); err != nil {
		t.Fatalf("this user's dump: %v", err)
	}
	if err := p.checkResolved(mine); err != nil {
		t.Fatalf("this user's dump, walked: %v", err)
	}
	open := prefix + "1"
	os.WriteFile(open, []byte("x"), 0o644)
	os.Chmod(open, 0o666)
	if _, err := p.Check(open); err == nil || !strings.Contains(err.Error(), "writable by every user") || !strings.Contains(err.Error(), open) {
		t.Errorf("world-writable dump: %v", err)
	}
	link := prefix + "2"
	os.Symlink(mine, link)
	if _, err := p.Check(link); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symlinked dump: %v", err)
	}
	if err := p.checkResolved(link); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symlinked dump, walked: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: another user's dump is not tried (needs chown)")
		return
	}
	theirs := prefix + "3"
	os.WriteFile(theirs, []byte("x"), 0o644)
	os.Chown(theirs, 65534, 65534)
	if _, err := p.Check(theirs); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") || !strings.Contains(err.Error(), "PROBING_MCP_JOB_USER") {
		t.Errorf("another user's dump: %v, want it refused naming its owner and the fix", err)
	}
	if err := p.checkResolved(theirs); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("another user's dump, walked: %v", err)
	}
	// Named as the job's user, that user's dumps count.
	env["PROBING_MCP_JOB_USER"] = "65534"
	if _, err := mustPolicy(t, env, "", "").Check(theirs); err != nil {
		t.Errorf("the job user's dump: %v", err)
	}
}
