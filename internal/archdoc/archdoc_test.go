// Package archdoc holds the check that docs/ARCHITECTURE.md's package
// table tells the truth about the imports: its "Depends on" column is
// compared with what `go list` says each package imports.
package archdoc

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/probing-mcp/probing-mcp"

var update = flag.Bool("update", false, "rewrite docs/ARCHITECTURE.md's Depends on column from go list")

type goPkg struct {
	ImportPath, Dir                    string
	GoFiles                            []string
	Imports, TestImports, XTestImports []string
}

// row is one line of the package table: its name, a directory of the
// module.
type row struct{ name string }

func readTable(t *testing.T, path string) []row {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []row
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimSpace(l), "|"), "|")
		rows = append(rows, row{name: strings.Trim(strings.TrimSpace(cells[1]), "`")})
	}
	return rows
}

// pathLike is what a package name looks like; thirdParty are the modules
// the cells name by their short names.
var (
	pathLike   = regexp.MustCompile(`^[a-z][a-z0-9_/*-]*$`)
	thirdParty = []string{"mcp-go", "mmap-go", "go-nvml", "go-sqlite3", "yaml", "x/sys/unix"}
)

// item is one entry of a "Depends on" cell: a name and its note, e.g.
// "internal/sysmem (RAM, or the cgroup's limit)".
type item struct{ name, note string }

// items splits a cell at the commas and semicolons outside parentheses.
func items(cell string) []item {
	var out []item
	depth, start := 0, 0
	flush := func(end int) {
		s := strings.TrimSpace(cell[start:end])
		if s == "" || s == "—" {
			return
		}
		name, note := s, ""
		if i := strings.Index(s, " ("); i > 0 {
			name, note = s[:i], s[i:]
		}
		out = append(out, item{strings.Trim(name, "`"), note})
	}
	for i, r := range cell {
		switch {
		case r == '(':
			depth++
		case r == ')':
			depth--
		case (r == ',' || r == ';') && depth == 0:
			flush(i)
			start = i + 1
		}
	}
	flush(len(cell))
	return out
}

// named is what a "Depends on" cell names among the rows: "x/*" is x and
// every row under it; names that are not rows (third-party modules,
// words) are left out.
func named(cell string, names []string) map[string]bool {
	out := map[string]bool{}
	for _, it := range items(cell) {
		if base, ok := strings.CutSuffix(it.name, "/*"); ok {
			for _, n := range names {
				if n == base || strings.HasPrefix(n, base+"/") {
					out[n] = true
				}
			}
			continue
		}
		if slices.Contains(names, it.name) {
			out[it.name] = true
		}
	}
	return out
}

// rewrite is the cell with the module's rows as go list says (sorted,
// each keeping its note) and the other items as they were, after them.
func rewrite(cell string, deps map[string]bool, names []string) string {
	notes := map[string]string{}
	var others []string
	for _, it := range items(cell) {
		base := strings.TrimSuffix(it.name, "/*")
		if slices.Contains(names, it.name) || slices.Contains(names, base) {
			notes[it.name] = it.note
			continue
		}
		others = append(others, it.name+it.note)
	}
	var out []string
	for _, d := range slices.Sorted(func(yield func(string) bool) {
		for d := range deps {
			if !yield(d) {
				return
			}
		}
	}) {
		out = append(out, d+notes[d])
	}
	out = append(out, others...)
	if len(out) == 0 {
		return " — "
	}
	return " " + strings.Join(out, ", ") + " "
}

// rowOf is the most specific row covering a module package ("" none).
func rowOf(rel string, names []string) string {
	best := ""
	for _, n := range names {
		if (rel == n || strings.HasPrefix(rel, n+"/")) && len(n) > len(best) {
			best = n
		}
	}
	return best
}

// TestArchitectureDependsOn: every row's "Depends on" names exactly the
// rows its packages import (a package of tests only counts its tests'
// imports), all of them rows below it. `go test ./internal/archdoc -update` rewrites the column.
func TestArchitectureDependsOn(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command to list the packages")
	}
	rows := readTable(t, filepath.Join(root, "docs", "ARCHITECTURE.md"))
	var names []string
	for _, r := range rows {
		names = append(names, r.name)
	}
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	real := map[string]map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p goPkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		r := rowOf(rel, names)
		if r == "" {
			t.Errorf("package %s has no row in docs/ARCHITECTURE.md's table: add one", rel)
			continue
		}
		if real[r] == nil {
			real[r] = map[string]bool{}
		}
		imps := p.Imports
		if len(p.Imports) == 0 {
			// A package of tests (and a doc.go): what its tests import.
			imps = append(append(imps, p.TestImports...), p.XTestImports...)
		}
		for _, imp := range imps {
			if dep, ok := strings.CutPrefix(imp, module+"/"); ok {
				if d := rowOf(dep, names); d != "" && d != r && !strings.HasPrefix(d, r+"/") {
					real[r][d] = true
				}
			}
		}
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimSpace(l), "|"), "|")
		name, cell := strings.Trim(strings.TrimSpace(cells[1]), "`"), cells[len(cells)-1]
		if _, isGo := real[name]; !isGo {
			continue // not a Go package (the Python agent)
		}
		if *update {
			cells[len(cells)-1] = rewrite(cell, real[name], names)
			lines[i] = strings.Join(cells, "|") + "|"
			continue
		}
		for _, it := range items(cell) {
			if pathLike.MatchString(it.name) && !slices.Contains(names, it.name) && !slices.Contains(names, strings.TrimSuffix(it.name, "/*")) && !slices.Contains(thirdParty, it.name) {
				t.Errorf("docs/ARCHITECTURE.md, row %s: its Depends on names %q, which is no package of the module (moved?)", name, it.name)
			}
		}
		have := named(cell, names)
		var missing, extra []string
		for d := range real[name] {
			if !have[d] {
				missing = append(missing, d)
			}
		}
		for d := range have {
			if !real[name][d] && !strings.HasPrefix(d, name+"/") {
				extra = append(extra, d)
			}
		}
		sort.Strings(missing)
		sort.Strings(extra)
		if len(missing) > 0 || len(extra) > 0 {
			t.Errorf("docs/ARCHITECTURE.md, row %s: its Depends on lacks %v and names %v, which it does not import (go list); run go test ./internal/archdoc -update", name, missing, extra)
		}
		// The table runs from the doors down to the helpers: an import of
		// a row above is an arrow back up (move the row, or the code).
		for d := range real[name] {
			if slices.Index(names, d) < slices.Index(names, name) {
				t.Errorf("docs/ARCHITECTURE.md, row %s depends on %s, a row above it: the table must read top-down", name, d)
			}
		}
	}
	if *update {
		if err := os.WriteFile(filepath.Join(root, "docs", "ARCHITECTURE.md"), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
