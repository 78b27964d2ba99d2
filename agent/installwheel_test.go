package agent

import (
	"io/fs"
	"strings"
	"syscall"
	"testing"
)

// A read-only mount cannot be made here without privileges the tests do
// not take: the errno it gives is classified directly (the permission
// case runs for real in cmd/probing-mcp's agent install test).
func TestWriteErrNamesTheFix(t *testing.T) {
	ro := writeErr("/site", &fs.PathError{Op: "open", Path: "/site/x", Err: syscall.EROFS})
	for _, want := range []string{"/site is on a read-only filesystem", "--user", "python3 -m venv"} {
		if !strings.Contains(ro.Error(), want) {
			t.Errorf("EROFS: %q lacks %q", ro, want)
		}
	}
	perm := writeErr(t.TempDir(), &fs.PathError{Op: "open", Path: "/site/x", Err: syscall.EACCES})
	for _, want := range []string{"cannot write to", "belongs to uid", "--user", "virtualenv you own"} {
		if !strings.Contains(perm.Error(), want) {
			t.Errorf("EACCES: %q lacks %q", perm, want)
		}
	}
	if other := writeErr("/site", syscall.ENOSPC); !strings.Contains(other.Error(), "writing into /site") {
		t.Errorf("ENOSPC: %q", other)
	}
}
