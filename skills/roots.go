package skills

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Root labels, lowest priority first (§6.8; Probing's entry-point roots
// have no Go equivalent).
const (
	LabelBundled = "bundled"
	LabelRepo    = "repo"
	LabelUser    = "user"
	LabelProject = "project"
	LabelEnv     = "env"
)

// EnvSkillsDir names the highest-priority root.
const EnvSkillsDir = "PROBING_SKILLS_DIR"

// RootOptions are the inputs of Roots, injected so tests never see the real
// home, working directory or environment.
type RootOptions struct {
	Bundled fs.FS  // the skills embedded in the binary; nil for none
	Cwd     string // where the walks up start
	Home    string // for ~/.probing/skills and "~" in EnvDir
	EnvDir  string // the value of PROBING_SKILLS_DIR, "" when unset
}

// DefaultRootOptions fills RootOptions from the process.
func DefaultRootOptions(bundled fs.FS) RootOptions {
	cwd, _ := os.Getwd()
	home, _ := os.UserHomeDir()
	return RootOptions{Bundled: bundled, Cwd: cwd, Home: home, EnvDir: os.Getenv(EnvSkillsDir)}
}

// Roots lists the skill roots, lowest priority first:
//
//  1. bundled: opt.Bundled;
//  2. repo: <repo>/skills, see findRepoSkills;
//  3. user: <home>/.probing/skills, when it is a directory;
//  4. project: the nearest .probing/skills walking up from Cwd;
//  5. env: PROBING_SKILLS_DIR, one directory ("~/" expanded). It is listed
//     even when missing, so that Load reports the mistake. It is not a
//     colon-separated list: Probing takes one path, and a list would make a
//     directory name holding ":" ambiguous.
//
// A directory reached twice (the project walk finding ~/.probing/skills, a
// symlink) is listed once, at its first, lower, position: listing it twice
// would make its skills shadow themselves.
func Roots(opt RootOptions) []Root {
	var roots []Root
	seen := map[string]bool{}
	add := func(label, path string) {
		key := path
		if r, err := filepath.EvalSymlinks(path); err == nil {
			key = r
		}
		if seen[key] {
			return
		}
		seen[key] = true
		roots = append(roots, Root{Label: label, Path: path})
	}
	if opt.Bundled != nil {
		roots = append(roots, Root{Label: LabelBundled, Path: "(embedded)", FS: opt.Bundled})
	}
	if opt.Cwd != "" {
		if dir := findRepoSkills(opt.Cwd, opt.Home); dir != "" {
			add(LabelRepo, dir)
		}
	}
	if opt.Home != "" {
		if p := filepath.Join(opt.Home, ".probing", "skills"); isDir(p) {
			add(LabelUser, p)
		}
	}
	if opt.Cwd != "" {
		for dir := filepath.Clean(opt.Cwd); ; dir = filepath.Dir(dir) {
			if p := filepath.Join(dir, ".probing", "skills"); isDir(p) {
				add(LabelProject, p)
				break
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
	}
	if opt.EnvDir != "" {
		p := opt.EnvDir
		if opt.Home != "" && (p == "~" || strings.HasPrefix(p, "~/")) {
			p = filepath.Join(opt.Home, p[1:])
		}
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		add(LabelEnv, p)
	}
	return roots
}

// findRepoSkills walks up from cwd to the repository holding it and returns
// its skills/ directory when that looks like a skill root. A random
// "skills" folder must not become a root, so a directory D qualifies only
// when
//   - D is a project root: it holds .git, go.mod or pyproject.toml (Probing
//     asks for pyproject.toml; a Go checkout has go.mod), and
//   - D/skills holds catalog.yaml or at least one <id>/SKILL.md.
//
// The walk stops at the first directory holding .git (the repository
// boundary: an enclosing checkout is another project), at the home
// directory, and at the file-system root.
func findRepoSkills(cwd, home string) string {
	home = filepath.Clean(home)
	for dir := filepath.Clean(cwd); ; dir = filepath.Dir(dir) {
		marker := exists(filepath.Join(dir, ".git")) || exists(filepath.Join(dir, "go.mod")) || exists(filepath.Join(dir, "pyproject.toml"))
		if s := filepath.Join(dir, "skills"); marker && isDir(s) && looksLikeSkillRoot(s) {
			return s
		}
		if exists(filepath.Join(dir, ".git")) || dir == home || dir == filepath.Dir(dir) {
			return ""
		}
	}
}

func looksLikeSkillRoot(dir string) bool {
	if isFile(filepath.Join(dir, "catalog.yaml")) {
		return true
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*", "SKILL.md"))
	return len(m) > 0
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func isDir(p string) bool { st, err := os.Stat(p); return err == nil && st.IsDir() }

func isFile(p string) bool { st, err := os.Stat(p); return err == nil && st.Mode().IsRegular() }
