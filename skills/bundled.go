package skills

import (
	"embed"
	"io/fs"
)

// bundledFS holds the skills shipped in the binary (the lowest root, §6.8):
// bundled/<id>/{SKILL.md,steps.yaml} and bundled/catalog.yaml, written for
// this server's local tables and tools.
//
//go:embed bundled
var bundledFS embed.FS

// Bundled returns the bundled skills rooted at the bundled directory, so
// that each skill is <id>/SKILL.md and <id>/steps.yaml and the catalog is
// catalog.yaml: pass it as RootOptions.Bundled.
func Bundled() fs.FS {
	sub, err := fs.Sub(bundledFS, "bundled")
	if err != nil {
		panic(err) // "bundled" is a valid, embedded path: cannot happen
	}
	return sub
}
