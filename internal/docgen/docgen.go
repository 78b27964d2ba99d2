// Package docgen keeps the generated sections of the README in step with
// the code: a section is the text between <!-- NAME:begin --> and
// <!-- NAME:end --> lines, rewritten by a test run with -update and
// compared by the same test otherwise (TestREADMEToolTable in tools; the
// variable table is checked by this package's own test).
package docgen

import (
	"fmt"
	"os"
	"strings"
)

func markers(name string) (string, string) {
	return "<!-- " + name + ":begin -->\n", "<!-- " + name + ":end -->"
}

// Section returns the text between the markers of section name.
func Section(doc, name string) (string, error) {
	b, e := markers(name)
	i := strings.Index(doc, b)
	if i < 0 {
		return "", fmt.Errorf("no %q marker", strings.TrimSpace(b))
	}
	j := strings.Index(doc[i+len(b):], e)
	if j < 0 {
		return "", fmt.Errorf("no %q marker after %q", e, strings.TrimSpace(b))
	}
	return doc[i+len(b) : i+len(b)+j], nil
}

// Replace returns doc with section name's text replaced by body.
func Replace(doc, name, body string) (string, error) {
	old, err := Section(doc, name)
	if err != nil {
		return "", err
	}
	b, _ := markers(name)
	i := strings.Index(doc, b) + len(b)
	return doc[:i] + body + doc[i+len(old):], nil
}

// Sync compares section name of the file at path with want. With update
// it rewrites the file when they differ; otherwise it returns an error
// that shows the difference (line by line) and says how to fix it (fix, a
// command).
func Sync(path, name, want string, update bool, fix string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(raw)
	got, err := Section(doc, name)
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	if got == want {
		return nil
	}
	if update {
		out, err := Replace(doc, name, want)
		if err != nil {
			return err
		}
		return os.WriteFile(path, []byte(out), 0o644)
	}
	return fmt.Errorf("%s: the %q section differs from the code (- README, + code):\n%s\nrun: %s",
		path, name, Diff(got, want), fix)
}

// Diff shows where a and b differ, as lines: the common head and tail
// are left out, the rest of a is shown with "-" and of b with "+" (enough
// for a table whose rows are whole lines).
func Diff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	head := 0
	for head < len(al) && head < len(bl) && al[head] == bl[head] {
		head++
	}
	tail := 0
	for tail < len(al)-head && tail < len(bl)-head && al[len(al)-1-tail] == bl[len(bl)-1-tail] {
		tail++
	}
	var out strings.Builder
	fmt.Fprintf(&out, "after line %d of the section:\n", head)
	for _, l := range al[head : len(al)-tail] {
		fmt.Fprintf(&out, "- %s\n", l)
	}
	for _, l := range bl[head : len(bl)-tail] {
		fmt.Fprintf(&out, "+ %s\n", l)
	}
	return out.String()
}
