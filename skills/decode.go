package skills

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Limits on what one skill file may cost. yaml.v3 keeps an alias as a
// pointer to its anchor when decoding into a yaml.Node, so parsing itself is
// linear in the input; the cost of a billion-laughs file appears only when a
// walker follows aliases. checkBudget walks the tree once, following aliases
// the way the decoder will, and stops at the first limit, so such a file
// fails in microseconds with a message saying why.
const (
	// MaxFileSize bounds SKILL.md, steps.yaml and catalog.yaml. The largest
	// bundled Probing skill is ~20 KiB.
	MaxFileSize = 1 << 20
	// maxNodes bounds the nodes visited with aliases expanded.
	maxNodes = 100_000
	// maxAliases bounds how many times aliases are followed.
	maxAliases = 1_000
	// maxDepth bounds nesting (mappings and sequences), aliases included.
	maxDepth = 32
)

// Error is a problem at one place in one file. Line is 0 when the problem is
// the file as a whole.
type Error struct {
	File  string
	Line  int
	Field string // the key or path concerned, when there is one
	Msg   string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// parseYAML reads one YAML document into a node tree, within the limits.
// line offsets the reported line numbers (front matter starts below line 1).
func parseYAML(file string, data []byte, lineOffset int) (*yaml.Node, error) {
	if len(data) > MaxFileSize {
		return nil, &Error{File: file, Msg: fmt.Sprintf("file is %d bytes, more than the %d-byte limit", len(data), MaxFileSize)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Msg: "empty document"}
		}
		return nil, &Error{File: file, Line: yamlErrLine(err, lineOffset), Msg: "invalid YAML: " + stripYAMLPrefix(err.Error())}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line + lineOffset
		if err != nil {
			line = yamlErrLine(err, lineOffset)
		}
		return nil, &Error{File: file, Line: line, Msg: "more than one YAML document"}
	}
	if lineOffset != 0 {
		shiftLines(&doc, lineOffset, 0)
	}
	b := budget{file: file}
	if err := b.walk(&doc, 0); err != nil {
		return nil, err
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	return root, nil
}

func shiftLines(n *yaml.Node, off, depth int) {
	if depth > maxDepth+2 {
		return // checkBudget reports it
	}
	n.Line += off
	for _, c := range n.Content {
		shiftLines(c, off, depth+1)
	}
}

type budget struct {
	file           string
	nodes, aliases int
}

func (b *budget) walk(n *yaml.Node, depth int) error {
	b.nodes++
	if b.nodes > maxNodes {
		return &Error{File: b.file, Line: n.Line, Msg: fmt.Sprintf("document expands to more than %d nodes (aliases followed); refusing it", maxNodes)}
	}
	if depth > maxDepth {
		return &Error{File: b.file, Line: n.Line, Msg: fmt.Sprintf("nesting deeper than %d levels", maxDepth)}
	}
	if n.Kind == yaml.AliasNode {
		b.aliases++
		if b.aliases > maxAliases {
			return &Error{File: b.file, Line: n.Line, Msg: fmt.Sprintf("more than %d alias expansions (a YAML bomb?); refusing it", maxAliases)}
		}
		if n.Alias == nil {
			return &Error{File: b.file, Line: n.Line, Msg: "alias without an anchor"}
		}
		return b.walk(n.Alias, depth+1)
	}
	for _, c := range n.Content {
		if err := b.walk(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// yamlErrLine digs the line out of yaml.v3's "yaml: line N: ..." messages.
func yamlErrLine(err error, off int) int {
	var te *yaml.TypeError
	msg := err.Error()
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	i := strings.Index(msg, "line ")
	if i < 0 {
		return 0
	}
	rest := msg[i+5:]
	j := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if j <= 0 {
		return 0
	}
	n, _ := strconv.Atoi(rest[:j])
	return n + off
}

func stripYAMLPrefix(s string) string {
	s = strings.TrimPrefix(s, "yaml: ")
	if strings.HasPrefix(s, "line ") {
		if _, rest, ok := strings.Cut(s, ": "); ok {
			return rest
		}
	}
	return s
}

// decoder walks a node tree into Go values, collecting every error rather
// than stopping at the first, so one run of the validator lists them all.
type decoder struct {
	file string
	errs []error
}

func (d *decoder) errorf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	return errors.Join(d.errs...)
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < maxDepth; i++ {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return "a scalar (" + strings.TrimPrefix(n.Tag, "!!") + ")"
	}
	return "something else"
}

// fields decodes a mapping whose keys must be among known. where names the
// mapping in messages ("spec.steps[2]"). Duplicate keys are errors too: YAML
// forbids them, and silently keeping one would hide a typo.
func (d *decoder) fields(n *yaml.Node, where string, known []string, set func(key string, v *yaml.Node)) {
	n = resolve(n)
	if n == nil {
		return
	}
	if n.Kind != yaml.MappingNode {
		if isNull(n) {
			return
		}
		d.errorf(n, where, "%s must be a mapping, not %s", where, kindName(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, where, "non-scalar key in %s", where)
			continue
		}
		key := k.Value
		if !slices.Contains(known, key) {
			d.errorf(k, key, "unknown field %q in %s (known: %s)", key, where, strings.Join(known, ", "))
			continue
		}
		if seen[key] {
			d.errorf(k, key, "duplicate field %q in %s", key, where)
			continue
		}
		seen[key] = true
		set(key, v)
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func (d *decoder) str(n *yaml.Node, field string) string {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, field, "%s must be a string, not %s", field, kindName(n))
		return ""
	}
	if isNull(n) {
		return ""
	}
	return n.Value
}

func (d *decoder) boolean(n *yaml.Node, field string) bool {
	n = resolve(n)
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
		d.errorf(n, field, "%s must be true or false, not %s", field, describe(n))
	}
	return b
}

func (d *decoder) integer(n *yaml.Node, field string) int {
	n = resolve(n)
	var i int
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&i) != nil {
		d.errorf(n, field, "%s must be an integer, not %s", field, describe(n))
	}
	return i
}

func (d *decoder) strList(n *yaml.Node, field string) []string {
	n = resolve(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, field, "%s must be a list of strings, not %s", field, kindName(n))
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for i, c := range n.Content {
		out = append(out, d.str(c, fmt.Sprintf("%s[%d]", field, i)))
	}
	return out
}

func (d *decoder) list(n *yaml.Node, field string, each func(i int, item *yaml.Node)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, field, "%s must be a list, not %s", field, kindName(n))
		return
	}
	for i, c := range n.Content {
		each(i, resolve(c))
	}
}

// orderedMap decodes a mapping of name → value in file order.
func (d *decoder) orderedMap(n *yaml.Node, field string, each func(key *yaml.Node, v *yaml.Node)) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, field, "%s must be a mapping, not %s", field, kindName(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := resolve(n.Content[i])
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, field, "non-scalar key in %s", field)
			continue
		}
		if seen[k.Value] {
			d.errorf(k, k.Value, "duplicate key %q in %s", k.Value, field)
			continue
		}
		seen[k.Value] = true
		each(k, n.Content[i+1])
	}
}

func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return strconv.Quote(n.Value)
	}
	return kindName(n)
}
