package docgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSectionReplace(t *testing.T) {
	doc := "a\n<!-- x:begin -->\nold\n<!-- x:end -->\nb\n"
	got, err := Section(doc, "x")
	if err != nil || got != "old\n" {
		t.Fatalf("Section = %q, %v", got, err)
	}
	out, err := Replace(doc, "x", "new\nrows\n")
	if err != nil || out != "a\n<!-- x:begin -->\nnew\nrows\n<!-- x:end -->\nb\n" {
		t.Fatalf("Replace = %q, %v", out, err)
	}
	if _, err := Section(doc, "y"); err == nil {
		t.Fatal("a missing section is not an error")
	}
}

func TestSync(t *testing.T) {
	p := filepath.Join(t.TempDir(), "README.md")
	os.WriteFile(p, []byte("<!-- x:begin -->\n| a |\n<!-- x:end -->\n"), 0o644)
	err := Sync(p, "x", "| b |\n", false, "go test -update")
	if err == nil || !strings.Contains(err.Error(), "- | a |") || !strings.Contains(err.Error(), "+ | b |") ||
		!strings.Contains(err.Error(), "run: go test -update") {
		t.Fatalf("Sync without update: %v", err)
	}
	if err := Sync(p, "x", "| b |\n", true, ""); err != nil {
		t.Fatal(err)
	}
	if err := Sync(p, "x", "| b |\n", false, ""); err != nil {
		t.Fatalf("after update: %v", err)
	}
}
