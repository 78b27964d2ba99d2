package skills

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Problem is something wrong with one root, skill or file. Load reports it
// and carries on with the rest: one broken skill never hides the others.
type Problem struct {
	Root    Root
	SkillID string // "" for a root-level problem (the root, its catalog)
	File    string // the file concerned, "" for the root itself
	Line    int
	Msg     string
	Warning bool // the skill still loaded (e.g. SKILL.md missing)
}

func (p Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s root", p.Root.Label)
	if p.SkillID != "" {
		fmt.Fprintf(&b, ", skill %s", p.SkillID)
	}
	b.WriteString(": ")
	if p.File != "" {
		b.WriteString(p.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
	}
	if p.Warning {
		b.WriteString("warning: ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Catalog is every skill loaded from the roots, one per id, ordered:
// catalogued skills by (priority, id) as Probing sorts them (lower numbers
// first), then uncatalogued ones by id. Probing lists only catalogued ids;
// callers that want that filter on Skill.Catalogued.
type Catalog struct {
	Skills     []*Skill
	Categories []Category // merged by id across roots, later roots win
	byID       map[string]*Skill
}

// Get returns the skill with that id.
func (c *Catalog) Get(id string) (*Skill, bool) {
	s, ok := c.byID[id]
	return s, ok
}

// Load reads every root, lowest priority first. A later root's skill
// replaces an earlier one with the same id and records it in Shadows. A
// skill that fails to load in a later root leaves the earlier one in place
// (and a Problem saying so).
func Load(roots []Root) (*Catalog, []Problem) {
	cat := &Catalog{byID: map[string]*Skill{}}
	var problems []Problem
	entries := map[string]CatalogEntry{}
	for _, root := range roots {
		l := &rootLoader{root: root}
		l.load()
		problems = append(problems, l.problems...)
		if l.catalog != nil {
			for _, e := range l.catalog.Skills {
				entries[e.ID] = e
			}
			for _, c := range l.catalog.Categories {
				if i := slices.IndexFunc(cat.Categories, func(x Category) bool { return x.ID == c.ID }); i >= 0 {
					cat.Categories[i] = c
				} else {
					cat.Categories = append(cat.Categories, c)
				}
			}
		}
		for _, s := range l.skills {
			if old, ok := cat.byID[s.ID]; ok {
				s.Shadows = append(slices.Clone(old.Shadows), old.Root)
			}
			cat.byID[s.ID] = s
		}
	}
	for _, s := range cat.byID {
		if e, ok := entries[s.ID]; ok {
			s.Catalogued, s.Priority, s.Entry = true, e.Priority, e.Entry
			if e.Category != "" {
				s.Category = e.Category
			}
			if e.Description != "" {
				s.Description = e.Description
			}
		}
		cat.Skills = append(cat.Skills, s)
	}
	slices.SortFunc(cat.Skills, func(a, b *Skill) int {
		switch {
		case a.Catalogued != b.Catalogued:
			if a.Catalogued {
				return -1
			}
			return 1
		case a.Priority != b.Priority:
			return a.Priority - b.Priority
		}
		return strings.Compare(a.ID, b.ID)
	})
	return cat, problems
}

type rootLoader struct {
	root     Root
	fsys     fs.FS
	catalog  *CatalogFile
	skills   []*Skill
	problems []Problem
}

func (l *rootLoader) problem(id, file string, line int, format string, args ...any) {
	l.problems = append(l.problems, Problem{Root: l.root, SkillID: id, File: file, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// fromErr turns a parse error (possibly joined) into one Problem each.
func (l *rootLoader) fromErr(id, file string, err error) {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for _, e := range errs {
		var fe *Error
		if errors.As(e, &fe) {
			l.problems = append(l.problems, Problem{Root: l.root, SkillID: id, File: fe.File, Line: fe.Line, Msg: fe.Msg})
		} else {
			l.problem(id, file, 0, "%v", e)
		}
	}
}

// display is how a file is named in messages: a real path for disk roots.
func (l *rootLoader) display(name string) string {
	if l.root.FS != nil {
		return l.root.Label + ":" + name
	}
	return filepath.Join(l.root.Path, filepath.FromSlash(name))
}

func (l *rootLoader) load() {
	l.fsys = l.root.FS
	if l.fsys == nil {
		st, err := os.Stat(l.root.Path)
		switch {
		case err != nil:
			l.problem("", "", 0, "skill root %s: %v", l.root.Path, unwrapPath(err))
			return
		case !st.IsDir():
			l.problem("", "", 0, "skill root %s is not a directory", l.root.Path)
			return
		}
		l.fsys = os.DirFS(l.root.Path)
	}
	if data, ok := l.readFile("", "catalog.yaml", false); ok {
		c, err := ParseCatalog(l.display("catalog.yaml"), data)
		if err != nil {
			l.fromErr("", l.display("catalog.yaml"), err)
		} else {
			l.catalog = c
		}
	}
	listed := map[string]CatalogEntry{}
	if l.catalog != nil {
		for _, e := range l.catalog.Skills {
			listed[e.ID] = e
		}
	}
	ents, err := fs.ReadDir(l.fsys, ".")
	if err != nil {
		l.problem("", "", 0, "reading skill root %s: %v", l.root.Path, unwrapPath(err))
		return
	}
	for _, ent := range ents {
		name := ent.Name()
		if strings.HasPrefix(name, ".") || name == "semantic" {
			continue
		}
		// Stat follows a symlink; a loop fails here with ELOOP and
		// nothing recurses, so no depth can run away.
		st, err := fs.Stat(l.fsys, name)
		if err != nil {
			l.problem(name, l.display(name), 0, "skill directory: %v", unwrapPath(err))
			continue
		}
		if !st.IsDir() {
			_, catalogued := listed[name]
			if catalogued || (path.Ext(name) == "" && st.Mode().IsRegular()) {
				l.problem(name, l.display(name), 0, "skill directory is a file, not a directory")
			}
			continue
		}
		if s := l.loadSkill(name, listed[name]); s != nil {
			l.skills = append(l.skills, s)
		}
	}
}

// readFile reads a regular file within the size limit. Missing is not a
// problem (ok false); anything else wrong is.
func (l *rootLoader) readFile(id, name string, _ bool) ([]byte, bool) {
	st, err := fs.Stat(l.fsys, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		l.problem(id, l.display(name), 0, "%v", unwrapPath(err))
		return nil, false
	}
	if !st.Mode().IsRegular() {
		// Never open a FIFO or device: it could block forever.
		l.problem(id, l.display(name), 0, "not a regular file (%s)", st.Mode().Type())
		return nil, false
	}
	if st.Size() > MaxFileSize {
		l.problem(id, l.display(name), 0, "file is %d bytes, more than the %d-byte limit", st.Size(), MaxFileSize)
		return nil, false
	}
	f, err := l.fsys.Open(name)
	if err != nil {
		l.problem(id, l.display(name), 0, "%v", unwrapPath(err))
		return nil, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		l.problem(id, l.display(name), 0, "%v", unwrapPath(err))
		return nil, false
	}
	if len(data) > MaxFileSize {
		l.problem(id, l.display(name), 0, "file grew past the %d-byte limit while being read", MaxFileSize)
		return nil, false
	}
	return data, true
}

func (l *rootLoader) loadSkill(id string, entry CatalogEntry) *Skill {
	mdName := id + "/SKILL.md"
	stepsName := id + "/steps.yaml"
	// A catalog entry may point elsewhere in the root (§6.8).
	for _, p := range []string{entry.Path, entry.File} {
		if p != "" && fs.ValidPath(p) {
			if st, err := fs.Stat(l.fsys, p); err == nil && st.Mode().IsRegular() {
				stepsName = p
				break
			}
		}
	}
	nProblems := len(l.problems)
	md, hasMD := l.readFile(id, mdName, true)
	stepsData, hasSteps := l.readFile(id, stepsName, true)
	if len(l.problems) > nProblems {
		return nil
	}
	if !hasMD && !hasSteps {
		return nil // not a skill directory (docs, assets)
	}
	s := &Skill{ID: id, Root: l.root, Dir: l.display(id)}
	ok := true
	if hasMD {
		fm, body, err := ParseFrontMatter(l.display(mdName), md)
		if err != nil {
			l.fromErr(id, l.display(mdName), err)
			ok = false
		} else {
			s.Front, s.Guidance = fm, body
			if fm != nil && fm.Name != "" && fm.Name != id {
				l.problem(id, l.display(mdName), 0, "front matter name %q differs from the directory name %q", fm.Name, id)
				ok = false
			}
		}
	} else {
		l.problems = append(l.problems, Problem{Root: l.root, SkillID: id, File: l.display(mdName), Msg: "no SKILL.md: agents get no guidance for this skill", Warning: true})
	}
	if hasSteps {
		sf, err := ParseSteps(l.display(stepsName), stepsData)
		if err != nil {
			l.fromErr(id, l.display(stepsName), err)
			ok = false
		} else if sf.Metadata.ID != id {
			l.problem(id, l.display(stepsName), 0, "metadata.id %q differs from the skill id %q", sf.Metadata.ID, id)
			ok = false
		} else {
			s.Steps = sf
		}
	}
	if !ok {
		return nil
	}
	fillSummary(s)
	return s
}

// fillSummary derives the listing fields from steps.yaml, then SKILL.md.
func fillSummary(s *Skill) {
	var kw []string
	addKW := func(words ...[]string) {
		for _, ws := range words {
			for _, w := range ws {
				w = strings.ToLower(strings.TrimSpace(w))
				if w != "" && !slices.Contains(kw, w) {
					kw = append(kw, w)
				}
			}
		}
	}
	if sf := s.Steps; sf != nil {
		s.Title, s.Category = sf.Metadata.Title, sf.Metadata.Category
		s.Description, _, _ = strings.Cut(sf.Metadata.Docs, "\n")
		addKW(sf.Metadata.Tags, sf.Metadata.Triggers.Zh, sf.Metadata.Triggers.En)
	}
	if fm := s.Front; fm != nil {
		if s.Category == "" {
			s.Category = fm.Category
		}
		if s.Description == "" {
			s.Description = fm.Description
		}
		addKW(fm.Tags, fm.Keywords.Zh, fm.Keywords.En)
	}
	if s.Title == "" {
		s.Title = s.ID
	}
	s.Keywords = kw
}

// unwrapPath drops the PathError wrapper, whose path is relative to the
// root's fs.FS and would only confuse next to the full path we print.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
