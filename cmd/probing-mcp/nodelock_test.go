package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNodeLockOfAnotherUser: a node.lock another user planted in the data
// dir makes `probing-mcp node` fail with the file, its owner and the fix,
// never exit 0 with nothing running.
func TestNodeLockOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make another user's lock file (chown)")
	}
	data := t.TempDir()
	t.Setenv("PROBING_DATA_DIR", data)
	t.Setenv("PROBING_AUTH_TOKEN", "")
	lock := filepath.Join(data, "probing-mcp", "node.lock")
	os.Mkdir(filepath.Dir(lock), 0o700)
	os.WriteFile(lock, nil, 0o600)
	os.Chown(lock, 65534, 65534)
	code, _, errOut := runCLI("node", "--http", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errOut, lock) || !strings.Contains(errOut, "belongs to uid 65534") || !strings.Contains(errOut, "rm ") {
		t.Fatalf("exit %d %q: want a failure naming the lock file, its owner and the fix", code, errOut)
	}
}
