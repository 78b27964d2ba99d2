package history

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestOpenRefusesPlantedFiles: a symlink named like history.db (dangling,
// or pointing at another file) is refused at once with the path and the
// fix; nothing at its target is created or written, and the refusal is
// bounded (no recursion on the dangling link: once a stack overflow).
func TestOpenRefusesPlantedFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "probing-mcp")
	os.Mkdir(dir, 0o700)
	elsewhere := t.TempDir()
	path := filepath.Join(dir, "history.db")

	dangling := filepath.Join(elsewhere, "created")
	os.Symlink(dangling, path)
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	if s, err := Open(path, Options{}); err == nil {
		s.Close()
		t.Fatal("a dangling symlink was opened as the history")
	} else if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("error %q should name the path and say it is a symlink", err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusing took %v", d)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("refusing allocated %d bytes", grew)
	}
	if _, err := os.Lstat(dangling); err == nil {
		t.Fatal("the dangling link's target was created")
	}
	os.Remove(path)

	target := filepath.Join(elsewhere, "secret")
	os.WriteFile(target, []byte("keep"), 0o600)
	os.Symlink(target, path)
	if s, err := Open(path, Options{}); err == nil {
		s.Close()
		t.Fatal("a symlink to another file was opened as the history")
	}
	if s, err := Open(path, Options{ReadOnly: true}); err == nil {
		s.Close()
		t.Fatal("a symlink was opened read-only as the history")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("the link's target changed: %q", b)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 1 {
		t.Fatalf("files were created next to the target: %v", ents)
	}
	os.Remove(path)

	// The directory must be this user's and nobody else's to write:
	// SQLite opens its -wal and -shm files by name.
	os.Chmod(dir, 0o777)
	if s, err := Open(path, Options{}); err == nil {
		s.Close()
		t.Fatal("a history in a directory anyone can write was opened")
	} else if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "writable by other users") {
		t.Errorf("error %q should name the directory and why", err)
	}
	os.Chmod(dir, 0o700)
	if os.Geteuid() != 0 {
		t.Log("not root: another user's history and directory are not tried (needs chown)")
		return
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	os.Chown(path, 65534, 65534)
	if s, err := Open(path, Options{}); err == nil {
		s.Close()
		t.Fatal("another user's history.db was opened")
	} else if !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("error %q should name the owner", err)
	}
	os.Remove(path)
	os.Chown(dir, 65534, 65534)
	if s, err := Open(path, Options{}); err == nil {
		s.Close()
		t.Fatal("a history in another user's directory was opened")
	} else if !strings.Contains(err.Error(), "belongs to uid 65534") || !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q should name the directory and its owner", err)
	}
}
