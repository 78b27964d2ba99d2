package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// checkPaths refuses a PATH that does not exist with the fix: a relative
// path is read from the working directory, and the README's testdata/...
// paths are the repository's, so run from another directory they are not
// there.
func checkPaths(cmd string, paths []string, stderr io.Writer) int {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil || !os.IsNotExist(err) {
			continue
		}
		msg := fmt.Sprintf("probing-mcp %s: %s: no such file or directory", cmd, p)
		if !filepath.IsAbs(p) {
			cwd, _ := os.Getwd()
			msg += fmt.Sprintf(" (relative paths are read from the working directory, %s)", cwd)
			if first, _, _ := strings.Cut(filepath.ToSlash(filepath.Clean(p)), "/"); first == "testdata" {
				msg += fmt.Sprintf("; %s is in the probing-mcp repository: run from the repository's root, or pass its absolute path (e.g. /path/to/probing-mcp/%s)", p, filepath.ToSlash(filepath.Clean(p)))
			}
		}
		fmt.Fprintln(stderr, msg)
		return 1
	}
	return 0
}
