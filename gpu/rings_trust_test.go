package gpu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOpenRingsRefusesPlantedDir: the sampler's pid directory in the
// shared data dir must be its own; one another user made first (or one
// anyone can write, or a link) is refused, and nothing is written in it.
func TestOpenRingsRefusesPlantedDir(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, strconv.Itoa(os.Getpid()))
	elsewhere := t.TempDir()
	os.Symlink(elsewhere, dir)
	if _, err := OpenRings(data, "h"); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("linked pid dir: %v", err)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("written through the link: %v", ents)
	}
	os.Remove(dir)
	os.Mkdir(dir, 0o777)
	os.Chmod(dir, 0o777)
	if _, err := OpenRings(data, "h"); err == nil || !strings.Contains(err.Error(), "writable by other users") {
		t.Errorf("world-writable pid dir: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Log("not root: another user's pid dir is not tried (needs chown)")
		return
	}
	os.Chmod(dir, 0o755)
	os.Chown(dir, 65534, 65534)
	if _, err := OpenRings(data, "h"); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("another user's pid dir: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("written in another user's dir: %v", ents)
	}
}
