package skills

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Agent targets for `skill install` (contract §6.10): where each coding
// agent reads skills from, in a project and for the user.
var agentDirs = map[string]struct{ project, user, marker string }{
	"claude": {".claude/skills", ".claude/skills", ".claude"},
	"cursor": {".cursor/skills", ".cursor/skills", ".cursor"},
	"codex":  {".agents/skills", ".agents/skills", ".agents"},
}

// InstallOptions choose where skills are copied.
type InstallOptions struct {
	Agents []string // claude, cursor, codex
	User   bool     // into the home directory instead of the project
	Cwd    string   // where the project is searched from
	Home   string
}

// Install copies each skill's directory files (SKILL.md, steps.yaml) into
// every chosen agent's skills dir, replacing older copies, and returns one
// line per skill and target.
func Install(cat []*Skill, opt InstallOptions) ([]string, error) {
	if len(opt.Agents) == 0 {
		return nil, fmt.Errorf("no agent given: pass --agent claude, cursor or codex")
	}
	var did []string
	for _, name := range opt.Agents {
		d, ok := agentDirs[name]
		if !ok {
			known := make([]string, 0, len(agentDirs))
			for k := range agentDirs {
				known = append(known, k)
			}
			sort.Strings(known)
			return did, fmt.Errorf("unknown agent %q: want %s", name, strings.Join(known, ", "))
		}
		base := filepath.Join(opt.Home, d.user)
		if !opt.User {
			base = filepath.Join(projectRoot(opt.Cwd, d.marker), d.project)
		}
		for _, s := range cat {
			dir := filepath.Join(base, s.ID)
			if err := os.RemoveAll(dir); err != nil {
				return did, err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return did, err
			}
			n := 0
			for _, f := range []string{"SKILL.md", "steps.yaml"} {
				b, err := ReadFile(s, f)
				if err != nil {
					continue
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return did, err
				}
				n++
			}
			if n == 0 {
				return did, fmt.Errorf("skill %s has no SKILL.md or steps.yaml to copy", s.ID)
			}
			did = append(did, fmt.Sprintf("%s: %s → %s", name, s.ID, dir))
		}
	}
	return did, nil
}

// projectRoot is the nearest directory (walking up from cwd) holding the
// agent's marker, else the nearest holding .git, else cwd.
func projectRoot(cwd, marker string) string {
	for _, m := range []string{marker, ".git"} {
		for d := cwd; ; d = filepath.Dir(d) {
			if st, err := os.Stat(filepath.Join(d, m)); err == nil && st.IsDir() {
				return d
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return cwd
}
