package skills

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func TestInstallIntoAgentDirs(t *testing.T) {
	fsys := fstest.MapFS{
		"hang/SKILL.md":   {Data: []byte("---\nname: hang\ndescription: d\n---\nGuidance.\n")},
		"hang/steps.yaml": {Data: []byte("apiVersion: probing.dev/v1\nkind: Skill\nmetadata:\n  id: hang\n  title: Hang\nspec:\n  steps: []\n")},
	}
	cat, problems := Load([]Root{{Label: "bundled", Path: "test", FS: fsys}})
	if len(problems) > 0 || len(cat.Skills) != 1 {
		t.Fatalf("%v %v", cat, problems)
	}
	proj := t.TempDir()
	os.MkdirAll(filepath.Join(proj, ".claude"), 0o755)
	sub := filepath.Join(proj, "src", "pkg")
	os.MkdirAll(sub, 0o755)
	home := t.TempDir()
	did, err := Install(cat.Skills, InstallOptions{Agents: []string{"claude", "codex"}, Cwd: sub, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	if len(did) != 2 {
		t.Fatalf("%v", did)
	}
	if b, err := os.ReadFile(filepath.Join(proj, ".claude", "skills", "hang", "SKILL.md")); err != nil || !strings.Contains(string(b), "Guidance.") {
		t.Fatalf("claude copy: %s %v", b, err)
	}
	// codex has no marker here: the nearest .git, else the cwd.
	if _, err := os.Stat(filepath.Join(sub, ".agents", "skills", "hang", "steps.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(cat.Skills, InstallOptions{Agents: []string{"cursor"}, User: true, Home: home}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(home, ".cursor", "skills", "hang", "SKILL.md")); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(cat.Skills, InstallOptions{Agents: []string{"vim"}, Home: home}); err == nil || !strings.Contains(err.Error(), "claude, codex, cursor") {
		t.Fatalf("unknown agent: %v", err)
	}
}
