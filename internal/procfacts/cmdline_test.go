package procfacts

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestCmdlineAt(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want []string
	}{
		{"", nil},
		{"\x00", []string{""}},
		{"python\x00train.py\x00", []string{"python", "train.py"}},
		{"a\x00\x00", []string{"a", ""}},
		{"rewritten title", []string{"rewritten title"}},
	} {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "7", "cmdline"), []byte(c.raw), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := CmdlineAt(root, 7)
		if err != nil || !slices.Equal(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("%q: %q, %v; want %q", c.raw, got, err, c.want)
		}
	}
	if _, err := CmdlineAt(t.TempDir(), 7); !os.IsNotExist(err) {
		t.Errorf("missing: %v", err)
	}
}
