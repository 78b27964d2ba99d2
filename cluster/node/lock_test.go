package node_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/cluster/node"
)

// TestLockOfAnotherUser: a node.lock another user made is an error naming
// it and its owner, never ErrRunning (which the daemon answers by exiting
// 0 with nothing running).
func TestLockOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make another user's lock file (chown)")
	}
	p := filepath.Join(t.TempDir(), "probing-mcp", "node.lock")
	os.Mkdir(filepath.Dir(p), 0o700)
	os.WriteFile(p, nil, 0o600)
	os.Chown(p, 65534, 65534)
	if _, err := node.Lock(p); err == nil || errors.Is(err, node.ErrRunning) || !strings.Contains(err.Error(), "belongs to uid 65534") || !strings.Contains(err.Error(), p) {
		t.Fatalf("another user's lock: %v, want an error naming it and its owner", err)
	}
}
