package membership

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/cluster"
)

// TestLoadPlanted: a saved membership names where the coordinator sends
// the job's token, so one another user could have written is ignored with
// the reason: a symlink, a file anyone (or another group) can write, one in
// a directory others can write, or (as root) another user's file.
func TestLoadPlanted(t *testing.T) {
	data := t.TempDir()
	path := DefaultPath(data, "r1")
	if err := Save(path, []cluster.Node{{Host: "a", Addr: "127.0.0.1:9781"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Fatal(err)
	}
	refused := func(what, want string) {
		t.Helper()
		ns, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), "ignored") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v %v, want it ignored because %q", what, ns, err, want)
		}
	}
	os.Chmod(path, 0o666)
	refused("world-writable", "writable by every user")
	os.Chmod(path, 0o600)
	os.Chmod(filepath.Dir(path), 0o777)
	refused("in a world-writable directory", "writable by other users")
	os.Chmod(filepath.Dir(path), 0o700)

	planted := filepath.Join(t.TempDir(), "planted.json")
	os.WriteFile(planted, []byte(`[{"host":"evil","addr":"127.0.0.2:9781"}]`), 0o600)
	os.Remove(path)
	os.Symlink(planted, path)
	refused("symlink", "symbolic link")
	os.Remove(path)

	if os.Geteuid() != 0 {
		t.Log("not root: another user's file is not tried (needs chown)")
		return
	}
	os.WriteFile(path, []byte(`[{"host":"evil","addr":"127.0.0.2:9781"}]`), 0o600)
	os.Chmod(path, 0o620)
	os.Chown(path, 0, 12345)
	refused("writable by another group", "writable by group 12345")
	os.Chmod(path, 0o644)
	os.Chown(path, 65534, 65534)
	refused("another user's", "belongs to uid 65534")
	os.Chown(path, 0, 0)
	os.Chown(filepath.Dir(path), 65534, 65534)
	refused("in another user's directory", "belongs to uid 65534")
}
