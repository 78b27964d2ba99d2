package tools

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FilePolicy decides which paths tools may read. A model chooses the paths,
// so a path is first checked as written (before anything on disk is looked
// at), then resolved one component at a time, each step checked again: the
// file system is never touched outside the roots, so a refusal reads the
// same whether or not the path exists, and a symlink cannot lead out.
type FilePolicy struct {
	// Roots are the places tools may read.
	Roots []FileRoot
	// Skipped are default candidates that were left out, and why; the
	// server logs them at start.
	Skipped []FileRoot
	// FromEnv says the roots came from PROBING_ALLOWED_FILE_DIRS.
	FromEnv bool
	// Owners are the users whose files in a Shared root count
	// (sharedfiles.go).
	Owners []dumpOwner
}

// FileRoot is one allowed place.
type FileRoot struct {
	// Path is absolute and clean, as configured.
	Path string
	// Real is Path with symlinks resolved, or Path while it does not exist.
	Real string
	// Prefix marks a file-name prefix such as /tmp/nccl_trace_rank_ rather
	// than a directory: the paths that start with it are allowed, and
	// nothing else in its directory.
	Prefix bool
	// Why it is (or is not) a root, for the start-up log.
	Why string
	// Shared: it lies in a directory every user can write (/tmp), so its
	// files count only when their user is one of the policy's Owners.
	Shared bool
}

// String is the root as logged and as named in errors; a prefix ends in *.
func (r FileRoot) String() string {
	if r.Prefix {
		return r.Path + "*"
	}
	return r.Path
}

// contains reports whether the absolute clean path p lies in the root.
func (r FileRoot) contains(p string) bool {
	for _, form := range []string{r.Path, r.Real} {
		if r.Prefix && strings.HasPrefix(p, form) || !r.Prefix && within(p, form) {
			return true
		}
	}
	return false
}

// leadsTo reports whether p is the root's directory or above it: a path a
// resolution must pass through to reach the root.
func (r FileRoot) leadsTo(p string) bool {
	for _, form := range []string{r.Path, r.Real} {
		if r.Prefix {
			form = filepath.Dir(form)
		}
		if within(form, p) {
			return true
		}
	}
	return false
}

// within reports whether the absolute clean path p is dir or below it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

func newFileRoot(path string, prefix bool, why string) FileRoot {
	r := FileRoot{Path: path, Real: path, Prefix: prefix, Why: why}
	if prefix {
		if d, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
			r.Real = filepath.Join(d, filepath.Base(path))
		}
	} else if real, err := filepath.EvalSymlinks(path); err == nil {
		r.Real = real
	}
	return r
}

// errOutside is the one answer for any path outside the roots, found so
// lexically or on the way through a symlink.
var errOutside = errors.New("outside the allowed directories")

// maxSymlinks bounds a resolution, as the kernel's ELOOP limit does.
const maxSymlinks = 40

// Check returns the resolved absolute path, or a UserError that names the
// allowed roots and how to change them.
func (p FilePolicy) Check(path string) (string, error) {
	if strings.TrimSpace(path) == "" {
		return "", userErrorf("empty path: pass a dump file or a directory of dumps")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", userErrorf("path %s: %v", path, err)
	}
	real, err := p.resolve(abs)
	switch {
	case errors.Is(err, errOutside):
		return "", p.outsideError(path, abs)
	case errors.Is(err, os.ErrNotExist):
		// Only ever said of a path inside a root.
		return "", userErrorf("path %s does not exist; pass an existing dump file or directory", path)
	case err != nil:
		return "", userErrorf("path %s: %v", path, err)
	}
	if err := p.checkShared(abs, real); err != nil {
		return "", userErrorf("path %s not read: %v", path, err)
	}
	return real, nil
}

func (p FilePolicy) outsideError(path, abs string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "path %s is outside the allowed directories (%s); pass a path under one of them", path, p.rootList())
	for _, r := range p.Roots {
		if r.Prefix && abs == filepath.Dir(r.Path) {
			fmt.Fprintf(&b, ". Only the files named %s are allowed there (%s is shared): pass them, e.g. %s0 %s1",
				r, abs, r.Path, r.Path)
			break
		}
	}
	if p.FromEnv {
		b.WriteString(", or add the directory to PROBING_ALLOWED_FILE_DIRS")
	} else {
		b.WriteString(", or set PROBING_ALLOWED_FILE_DIRS to the directories that hold the dumps (colon-separated)")
	}
	return userErrorf("%s", b.String())
}

func (p FilePolicy) rootList() string {
	if len(p.Roots) == 0 {
		return "none"
	}
	names := make([]string, len(p.Roots))
	for i, r := range p.Roots {
		names[i] = r.String()
	}
	return strings.Join(names, ", ")
}

// resolve is filepath.EvalSymlinks confined to the roots: every path it
// would look at is checked first, so nothing outside the roots (or on the
// way to them) is ever stat'ed. abs must be absolute.
func (p FilePolicy) resolve(abs string) (string, error) {
	abs = filepath.Clean(abs)
	if !p.contains(abs) {
		return "", errOutside
	}
	dest, rest, links := "/", abs[1:], 0
	for rest != "" {
		var comp string
		comp, rest, _ = strings.Cut(rest, "/")
		switch comp {
		case "", ".":
			continue
		case "..":
			dest = filepath.Dir(dest) // dest is resolved, so its parent is too
			continue
		}
		next := filepath.Join(dest, comp)
		if !p.contains(next) && !p.leadsTo(next) {
			return "", errOutside
		}
		fi, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			dest = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", fmt.Errorf("more than %d symlinks", maxSymlinks)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			dest = "/"
		}
		rest = target + "/" + rest
	}
	if !p.contains(dest) {
		return "", errOutside // a symlink inside led to a directory above a root
	}
	return dest, nil
}

func (p FilePolicy) contains(abs string) bool {
	for _, r := range p.Roots {
		if r.contains(abs) {
			return true
		}
	}
	return false
}

func (p FilePolicy) leadsTo(abs string) bool {
	for _, r := range p.Roots {
		if r.leadsTo(abs) {
			return true
		}
	}
	return false
}

// checkResolved vets a file found while walking an allowed directory,
// which may be a symlink that points elsewhere. Where it would lead is not
// said: that is outside.
func (p FilePolicy) checkResolved(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	real, err := p.resolve(abs)
	if err != nil {
		if errors.Is(err, errOutside) {
			return errors.New("leads outside the allowed directories")
		}
		return err
	}
	return p.checkShared(abs, real)
}
