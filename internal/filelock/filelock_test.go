package filelock

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestTake(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.lock")
	f, err := Take(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q", b)
	}
	if _, err := Take(path); !errors.Is(err, ErrHeld) {
		t.Fatalf("second Take: %v, want ErrHeld", err)
	}
	f.Close()
	g, err := Take(path)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	g.Close()
	link := filepath.Join(t.TempDir(), "link.lock")
	os.Symlink(path, link)
	if _, err := Take(link); err == nil || errors.Is(err, ErrHeld) {
		t.Fatalf("a symlinked lock must be refused: %v", err)
	}
}
