package skills

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

func stepsFor(id, title string) string {
	return "apiVersion: probing.dev/v1\nkind: Skill\nmetadata: {id: " + id + ", title: " + title + ", category: c}\nspec:\n  steps:\n    - {id: s, title: S, sql: SELECT 1}\n"
}

func mdFor(id string) string {
	return "---\nname: " + id + "\ndescription: about " + id + "\n---\n# " + id + "\n"
}

func writeSkill(t *testing.T, root, id, title string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(root, id), 0o755))
	must(t, os.WriteFile(filepath.Join(root, id, "SKILL.md"), []byte(mdFor(id)), 0o644))
	must(t, os.WriteFile(filepath.Join(root, id, "steps.yaml"), []byte(stepsFor(id, title)), 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fiveLayers builds home, a repo with a working directory inside, and an env
// dir, each holding "shared" and one skill of its own.
func fiveLayers(t *testing.T) RootOptions {
	base := t.TempDir()
	home := filepath.Join(base, "home")
	repo := filepath.Join(home, "src", "repo")
	cwd := filepath.Join(repo, "sub", "dir")
	env := filepath.Join(base, "env")
	must(t, os.MkdirAll(cwd, 0o755))
	must(t, os.WriteFile(filepath.Join(repo, "go.mod"), []byte("module x\n"), 0o644))
	must(t, os.Mkdir(filepath.Join(repo, ".git"), 0o755))
	for label, dir := range map[string]string{
		LabelRepo:    filepath.Join(repo, "skills"),
		LabelUser:    filepath.Join(home, ".probing", "skills"),
		LabelProject: filepath.Join(repo, "sub", ".probing", "skills"),
		LabelEnv:     env,
	} {
		writeSkill(t, dir, "shared", label)
		writeSkill(t, dir, "only_"+label, label)
	}
	bundled := fstest.MapFS{
		"shared/SKILL.md":         {Data: []byte(mdFor("shared"))},
		"shared/steps.yaml":       {Data: []byte(stepsFor("shared", "bundled"))},
		"only_bundled/SKILL.md":   {Data: []byte(mdFor("only_bundled"))},
		"only_bundled/steps.yaml": {Data: []byte(stepsFor("only_bundled", "bundled"))},
		"catalog.yaml":            {Data: []byte("apiVersion: probing.dev/v1\nkind: Catalog\ncategories: {c: {label: C}}\nskills:\n  - {id: only_env, priority: 1}\n  - {id: shared, priority: 0, entry: true}\n")},
		"semantic/intents.yaml":   {Data: []byte("x: 1\n")},
	}
	return RootOptions{Bundled: bundled, Cwd: cwd, Home: home, EnvDir: env}
}

func TestRootsAndShadowing(t *testing.T) {
	opt := fiveLayers(t)
	roots := Roots(opt)
	var labels []string
	for _, r := range roots {
		labels = append(labels, r.Label)
	}
	if strings.Join(labels, ",") != "bundled,repo,user,project,env" {
		t.Fatalf("roots %v", roots)
	}
	cat, problems := Load(roots)
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	var ids []string
	for _, s := range cat.Skills {
		ids = append(ids, s.ID)
	}
	// Catalogued first by (priority, id), then the rest by id.
	if got := strings.Join(ids, ","); got != "shared,only_env,only_bundled,only_project,only_repo,only_user" {
		t.Errorf("order %s", got)
	}
	s, _ := cat.Get("shared")
	var shadows []string
	for _, r := range s.Shadows {
		shadows = append(shadows, r.Label)
	}
	if s.Root.Label != LabelEnv || s.Title != "env" || strings.Join(shadows, ",") != "bundled,repo,user,project" || !s.Entry || s.Description != "about shared" {
		t.Errorf("shared: root %s title %s shadows %v entry %v desc %q", s.Root.Label, s.Title, shadows, s.Entry, s.Description)
	}
	if s, _ := cat.Get("only_repo"); s.Root.Label != LabelRepo || len(s.Shadows) != 0 || s.Guidance != "# only_repo\n" {
		t.Errorf("only_repo %+v", s)
	}
	// Without the env layer the project copy wins.
	opt.EnvDir = ""
	cat, _ = Load(Roots(opt))
	if s, _ := cat.Get("shared"); s.Root.Label != LabelProject {
		t.Errorf("without env: %s", s.Root.Label)
	}
}

func TestRepoDetection(t *testing.T) {
	base := t.TempDir()
	// A skills dir in a directory with no project marker is not a root.
	writeSkill(t, filepath.Join(base, "loose", "skills"), "a", "A")
	if r := Roots(RootOptions{Cwd: filepath.Join(base, "loose"), Home: base}); len(r) != 0 {
		t.Errorf("loose skills dir picked: %v", r)
	}
	// A project whose skills/ holds no skill (a Go package) is not a root.
	proj := filepath.Join(base, "proj")
	must(t, os.MkdirAll(filepath.Join(proj, "skills", "testdata"), 0o755))
	must(t, os.WriteFile(filepath.Join(proj, "go.mod"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(proj, "skills", "doc.go"), nil, 0o644))
	if r := Roots(RootOptions{Cwd: proj, Home: base}); len(r) != 0 {
		t.Errorf("package dir picked: %v", r)
	}
	// The walk stops at a .git boundary: an enclosing checkout is not ours.
	outer := filepath.Join(base, "outer")
	inner := filepath.Join(outer, "inner")
	must(t, os.MkdirAll(filepath.Join(inner, ".git"), 0o755))
	must(t, os.WriteFile(filepath.Join(outer, "pyproject.toml"), nil, 0o644))
	must(t, os.MkdirAll(filepath.Join(outer, "skills"), 0o755))
	must(t, os.WriteFile(filepath.Join(outer, "skills", "catalog.yaml"), []byte("apiVersion: probing.dev/v1\nkind: Catalog\n"), 0o644))
	if r := Roots(RootOptions{Cwd: inner, Home: base}); len(r) != 0 {
		t.Errorf("crossed .git: %v", r)
	}
	if r := Roots(RootOptions{Cwd: outer, Home: base}); len(r) != 1 || r[0].Label != LabelRepo {
		t.Errorf("catalog repo: %v", r)
	}
	// ~ in PROBING_SKILLS_DIR; a missing env dir is still listed and reported.
	r := Roots(RootOptions{Home: base, EnvDir: "~/nope"})
	if len(r) != 1 || r[0].Path != filepath.Join(base, "nope") {
		t.Fatalf("env: %v", r)
	}
	if _, p := Load(r); len(p) != 1 || !strings.Contains(p[0].Error(), "env root: skill root "+filepath.Join(base, "nope")+": no such file or directory") {
		t.Errorf("missing env: %v", p)
	}
}

func TestBadInput(t *testing.T) {
	root := t.TempDir()
	writeSkill(t, root, "good", "Good")
	// A skill directory that is a file (named in the catalog, or bare).
	must(t, os.WriteFile(filepath.Join(root, "catalog.yaml"), []byte("apiVersion: probing.dev/v1\nkind: Catalog\nskills:\n  - {id: filed, priority: 1}\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "filed"), []byte("x"), 0o644))
	must(t, os.WriteFile(filepath.Join(root, "README.md"), []byte("x"), 0o644)) // ignored
	// A symlink loop.
	must(t, os.Symlink(filepath.Join(root, "loop"), filepath.Join(root, "loop")))
	// A 10 MB SKILL.md.
	must(t, os.Mkdir(filepath.Join(root, "huge"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "huge", "SKILL.md"), make([]byte, 10<<20), 0o644))
	// A YAML bomb.
	must(t, os.Mkdir(filepath.Join(root, "bomb"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "bomb", "steps.yaml"), []byte(billionLaughs()), 0o644))
	// An injectable template and an unknown placeholder.
	must(t, os.Mkdir(filepath.Join(root, "inject"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "inject", "steps.yaml"), []byte("apiVersion: probing.dev/v1\nkind: Skill\nmetadata: {id: inject, title: I}\nspec:\n  parameters:\n    - {name: who, type: string, default: x}\n  steps:\n    - id: a\n      title: A\n      sql: SELECT * FROM t WHERE who = {who} AND n < {limit}\n"), 0o644))
	// metadata.id not matching the directory; a FIFO as steps.yaml.
	writeSkill(t, root, "renamed", "R")
	must(t, os.WriteFile(filepath.Join(root, "renamed", "steps.yaml"), []byte(stepsFor("other", "R")), 0o644))
	must(t, os.Mkdir(filepath.Join(root, "fifo"), 0o755))
	must(t, mkfifo(filepath.Join(root, "fifo", "steps.yaml")))
	// Only steps.yaml: loads, with a warning.
	must(t, os.Mkdir(filepath.Join(root, "nomd"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "nomd", "steps.yaml"), []byte(stepsFor("nomd", "N")), 0o644))

	cat, problems := Load([]Root{{Label: LabelEnv, Path: root}})
	var ids []string
	for _, s := range cat.Skills {
		ids = append(ids, s.ID)
	}
	if strings.Join(ids, ",") != "good,nomd" {
		t.Errorf("loaded %v", ids)
	}
	var all []string
	for _, p := range problems {
		all = append(all, p.Error())
	}
	text := strings.Join(all, "\n")
	for _, want := range []string{
		"env root, skill filed: " + filepath.Join(root, "filed") + ": skill directory is a file, not a directory",
		"env root, skill loop: " + filepath.Join(root, "loop") + ": skill directory: too many levels of symbolic links",
		"env root, skill huge: " + filepath.Join(root, "huge", "SKILL.md") + ": file is 10485760 bytes, more than the 1048576-byte limit",
		"env root, skill bomb: " + filepath.Join(root, "bomb", "steps.yaml") + ":2: more than 1000 alias expansions",
		"env root, skill inject: " + filepath.Join(root, "inject", "steps.yaml") + `:10: step "a": string parameter {who} is in bare SQL`,
		"env root, skill inject: " + filepath.Join(root, "inject", "steps.yaml") + `:10: step "a": unknown placeholder {limit} in sql (parameters: who)`,
		"env root, skill renamed: " + filepath.Join(root, "renamed", "steps.yaml") + `: metadata.id "other" differs from the skill id "renamed"`,
		"env root, skill fifo: " + filepath.Join(root, "fifo", "steps.yaml") + ": not a regular file",
		"env root, skill nomd: " + filepath.Join(root, "nomd", "SKILL.md") + ": warning: no SKILL.md",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing problem %q in\n%s", want, text)
		}
	}
	if strings.Contains(text, "README") {
		t.Errorf("README reported:\n%s", text)
	}
}

// A broken override keeps the lower root's copy.
func TestBrokenOverrideKeepsLower(t *testing.T) {
	low, high := t.TempDir(), t.TempDir()
	writeSkill(t, low, "x", "Low")
	writeSkill(t, high, "x", "High")
	must(t, os.WriteFile(filepath.Join(high, "x", "steps.yaml"), []byte("apiVersion: probing.dev/v1\nkind: Skill\nmetadata: {id: x, title: H}\nspec: {stepz: []}\n"), 0o644))
	cat, problems := Load([]Root{{Label: LabelUser, Path: low}, {Label: LabelProject, Path: high}})
	s, _ := cat.Get("x")
	if s.Title != "Low" || len(problems) != 1 || !strings.Contains(problems[0].Error(), `steps.yaml:4: unknown field "stepz" in spec (known: parameters, requires, steps, variables, interpretation, summary_template, next_steps)`) {
		t.Errorf("%s %v", s.Title, problems)
	}
}
