package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFilePolicy(t *testing.T) {
	root := t.TempDir()
	inside := filepath.Join(root, "dumps")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	p := NewFilePolicy(inside+":"+filepath.Join(root, "later"), "/wd", "/data")
	if !p.FromEnv || len(p.Dirs) != 2 {
		t.Fatalf("%+v", p)
	}
	if _, err := p.Check(inside); err != nil {
		t.Errorf("allowed dir refused: %v", err)
	}
	if _, err := p.Check(root); err == nil || !strings.Contains(err.Error(), "outside PROBING_ALLOWED_FILE_DIRS") {
		t.Errorf("parent allowed: %v", err)
	}
	// A sibling sharing the prefix is not inside.
	sib := inside + "-other"
	_ = os.Mkdir(sib, 0o755)
	if _, err := p.Check(sib); err == nil {
		t.Error("prefix sibling allowed")
	}
	if _, err := p.Check(filepath.Join(inside, "..", "..")); err == nil {
		t.Error("dot-dot escape allowed")
	}
	def := NewFilePolicy("", root, "/nonexistent/data")
	if def.FromEnv || len(def.Dirs) != 2 {
		t.Errorf("default policy %+v", def)
	}
	if _, err := def.Check("/etc"); err == nil || !strings.Contains(err.Error(), "working directory and the data directory") {
		t.Errorf("default policy error: %v", err)
	}
}
