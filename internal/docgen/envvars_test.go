package docgen

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// root is the repository, from this package's directory.
const root = "../.."

// envName is a variable of ours: PROBING, or PROBING_ and a name. A
// literal ending in "_" is a family's prefix (PROBING_ROLE_).
var envName = regexp.MustCompile(`^PROBING(_[A-Z0-9_]*[A-Z0-9])?_?$`)

// notInTable are names the code holds that the README's variable table
// leaves out on purpose, each with why.
var notInTable = map[string]string{
	// The test harness's, read only by tests (internal/testpython is
	// imported by _test.go files only); the Makefile documents them.
	"PROBING_E2E_PYTHON":   "test harness (internal/testpython, Makefile)",
	"PROBING_E2E_REQUIRED": "test harness (internal/testpython, Makefile)",
	"PROBING_TORCH_PYTHON": "test harness (internal/testpython)",
	// Probing's own variables for its web UI and server, which this agent
	// does not have: named only so that config.py does not mirror them
	// into probing.* keys (_ENV_EXCLUDED).
	"PROBING_ASSETS_ROOT":        "Probing's own; agent/python/probing_mcp_agent/config.py only excludes it from mirroring",
	"PROBING_SERVER_ADDRPATTERN": "Probing's own; agent/python/probing_mcp_agent/config.py only excludes it from mirroring",
}

// goNames: every string literal in the non-test Go files that is one of
// our variable names (os.Getenv's argument, an Env* constant, a getenv
// through a seam).
func goNames(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", ".venv", ".git", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && envName.MatchString(s) {
					out[s] = append(out[s], rel(p))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pyLiteral is a quoted string in Python source.
var pyLiteral = regexp.MustCompile(`["']([A-Z][A-Z0-9_]*)["']`)

// pyNames: the same for the in-process agent's package (its string
// literals that are our names: os.environ's keys, env.get's, ENV_*
// constants).
func pyNames(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	files, err := filepath.Glob(filepath.Join(root, "agent/python/probing_mcp_agent/*.py"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no agent sources: %v", err)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range pyLiteral.FindAllStringSubmatch(string(b), -1) {
			if envName.MatchString(m[1]) {
				out[m[1]] = append(out[m[1]], rel(p))
			}
		}
	}
	return out
}

func rel(p string) string {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}

// tableCode is a name in backquotes in the first column.
var tableCode = regexp.MustCompile("`([A-Z][A-Z0-9_]*)(<[a-z]+>)?`")

// readmeVars: the names in the first column of the README's variable
// table; a name written PROBING_ROLE_<name> is the family PROBING_ROLE_.
func readmeVars(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "| Variable | Default | Meaning |\n")
	if i < 0 {
		t.Fatal("README.md: no variable table (| Variable | Default | Meaning |)")
	}
	out := map[string]bool{}
	for _, line := range strings.Split(doc[i:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range tableCode.FindAllStringSubmatch(first, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// TestREADMEVariableTable: every variable of ours the code reads (Go and
// the Python agent) is a row of the README's variable table, and every
// PROBING name there is read somewhere.
func TestREADMEVariableTable(t *testing.T) {
	read := goNames(t)
	for k, v := range pyNames(t) {
		read[k] = append(read[k], v...)
	}
	doc := readmeVars(t)
	var missing, unread []string
	for name, where := range read {
		if doc[name] || notInTable[name] != "" {
			continue
		}
		sort.Strings(where)
		missing = append(missing, name+" (read in "+strings.Join(dedup(where), ", ")+")")
	}
	for name := range doc {
		if strings.HasPrefix(name, "PROBING") && len(read[name]) == 0 {
			unread = append(unread, name)
		}
	}
	for name := range notInTable {
		if len(read[name]) == 0 {
			t.Errorf("notInTable lists %s, which no code reads any more: take it out", name)
		}
	}
	sort.Strings(missing)
	sort.Strings(unread)
	if len(missing) > 0 {
		t.Errorf("read by the code but not in the README's variable table (add a row with its default and meaning):\n  %s",
			strings.Join(missing, "\n  "))
	}
	if len(unread) > 0 {
		t.Errorf("in the README's variable table but read by no code (take the row out, or fix the name):\n  %s",
			strings.Join(unread, "\n  "))
	}
}

func dedup(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
