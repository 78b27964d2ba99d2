package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FilePolicy decides which paths tools may read. A model chooses the paths,
// so they are checked after symlinks are resolved: a link inside an allowed
// directory must not lead out of it.
type FilePolicy struct {
	// Dirs are the allowed roots, absolute and resolved.
	Dirs []string
	// FromEnv says the roots came from PROBING_ALLOWED_FILE_DIRS (for the
	// error message).
	FromEnv bool
}

// NewFilePolicy resolves the allowed roots: PROBING_ALLOWED_FILE_DIRS
// (colon-separated) when set, otherwise the working directory and the data
// directory. Roots that do not exist are kept as given, so that a data dir
// created later still counts.
func NewFilePolicy(allowedEnv, workDir, dataDir string) FilePolicy {
	var roots []string
	p := FilePolicy{}
	if strings.TrimSpace(allowedEnv) != "" {
		p.FromEnv = true
		for _, d := range strings.Split(allowedEnv, ":") {
			if d = strings.TrimSpace(d); d != "" {
				roots = append(roots, d)
			}
		}
	} else {
		roots = []string{workDir, dataDir}
	}
	for _, r := range roots {
		if r == "" {
			continue
		}
		abs, err := filepath.Abs(r)
		if err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			abs = real
		}
		p.Dirs = append(p.Dirs, filepath.Clean(abs))
	}
	return p
}

// Check returns the resolved absolute path, or a UserError that names the
// allowed roots.
func (p FilePolicy) Check(path string) (string, error) {
	if strings.TrimSpace(path) == "" {
		return "", userErrorf("empty path: pass a dump file or a directory of dumps")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", userErrorf("path %s: %v", path, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if os.IsNotExist(err) {
			return "", userErrorf("path %s does not exist; pass an existing dump file or directory (allowed roots: %s)", path, strings.Join(p.Dirs, ", "))
		}
		return "", userErrorf("path %s: %v", path, err)
	}
	if !p.Allowed(real) {
		return "", userErrorf("path %s is outside %s (%s); pass a path under one of them", path, p.source(), strings.Join(p.Dirs, ", "))
	}
	return real, nil
}

// Allowed reports whether a resolved absolute path lies under a root.
func (p FilePolicy) Allowed(real string) bool {
	for _, d := range p.Dirs {
		if real == d || strings.HasPrefix(real, d+string(filepath.Separator)) || d == string(filepath.Separator) {
			return true
		}
	}
	return false
}

func (p FilePolicy) source() string {
	if p.FromEnv {
		return "PROBING_ALLOWED_FILE_DIRS"
	}
	return "the allowed directories (the working directory and the data directory; set PROBING_ALLOWED_FILE_DIRS to change them)"
}

// checkResolved is Allowed for a file found while walking an allowed
// directory, which may be a symlink that points elsewhere.
func (p FilePolicy) checkResolved(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	if !p.Allowed(real) {
		return fmt.Errorf("resolves to %s, outside the allowed directories", real)
	}
	return nil
}
