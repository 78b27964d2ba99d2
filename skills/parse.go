package skills

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"go.yaml.in/yaml/v3"
)

const apiVersion = "probing.dev/v1"

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// safeChoiceRE is what an enum choice may hold: enough for asc/desc, table
// names and modes, never a quote, a comment or a statement separator, so an
// enum value is safe anywhere in SQL.
var safeChoiceRE = regexp.MustCompile(`^[A-Za-z0-9_.]+$`)

// ParseSteps decodes and validates one steps.yaml. Every problem found is
// returned (errors.Join of *Error), each naming file, line and field.
func ParseSteps(file string, data []byte) (*StepsFile, error) {
	root, err := parseYAML(file, data, 0)
	if err != nil {
		return nil, err
	}
	d := &decoder{file: file}
	sf := &StepsFile{File: file}
	var metaNode, specNode *yaml.Node
	d.fields(root, "the document", []string{"apiVersion", "kind", "metadata", "spec"}, func(k string, v *yaml.Node) {
		switch k {
		case "apiVersion":
			sf.APIVersion = d.str(v, k)
		case "kind":
			sf.Kind = d.str(v, k)
		case "metadata":
			metaNode = v
		case "spec":
			specNode = v
		}
	})
	if sf.APIVersion != apiVersion {
		d.errorf(root, "apiVersion", "apiVersion must be %q, not %q", apiVersion, sf.APIVersion)
	}
	if sf.Kind != "Skill" {
		d.errorf(root, "kind", "kind must be \"Skill\", not %q", sf.Kind)
	}
	if metaNode == nil {
		d.errorf(root, "metadata", "metadata is required")
	} else {
		d.metadata(metaNode, &sf.Metadata)
	}
	if specNode == nil {
		d.errorf(root, "spec", "spec is required")
	} else {
		d.spec(specNode, &sf.Spec)
	}
	if len(d.errs) == 0 {
		validateTemplates(d, sf)
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return sf, nil
}

func (d *decoder) metadata(n *yaml.Node, m *Metadata) {
	d.fields(n, "metadata", []string{"id", "title", "title_en", "category", "docs", "tags", "triggers"}, func(k string, v *yaml.Node) {
		switch k {
		case "id":
			m.ID = d.str(v, "metadata.id")
		case "title":
			m.Title = d.str(v, "metadata.title")
		case "title_en":
			m.TitleEn = d.str(v, "metadata.title_en")
		case "category":
			m.Category = d.str(v, "metadata.category")
		case "docs":
			m.Docs = strings.TrimSpace(d.str(v, "metadata.docs"))
		case "tags":
			m.Tags = d.strList(v, "metadata.tags")
		case "triggers":
			d.fields(v, "metadata.triggers", []string{"keywords"}, func(_ string, kv *yaml.Node) {
				m.Triggers = d.keywords(kv, "metadata.triggers.keywords")
			})
		}
	})
	if m.ID == "" {
		d.errorf(n, "metadata.id", "metadata.id is required")
	}
	if m.Title == "" {
		d.errorf(n, "metadata.title", "metadata.title is required")
	}
}

func (d *decoder) keywords(n *yaml.Node, where string) Keywords {
	var kw Keywords
	d.fields(n, where, []string{"zh", "en"}, func(k string, v *yaml.Node) {
		if k == "zh" {
			kw.Zh = d.strList(v, where+".zh")
		} else {
			kw.En = d.strList(v, where+".en")
		}
	})
	return kw
}

func (d *decoder) spec(n *yaml.Node, s *Spec) {
	known := []string{"parameters", "requires", "steps", "variables", "interpretation", "summary_template", "next_steps"}
	d.fields(n, "spec", known, func(k string, v *yaml.Node) {
		switch k {
		case "parameters":
			d.list(v, "spec.parameters", func(i int, item *yaml.Node) {
				s.Parameters = append(s.Parameters, d.parameter(item, fmt.Sprintf("spec.parameters[%d]", i)))
			})
		case "requires":
			d.fields(v, "spec.requires", []string{"any_tables"}, func(_ string, t *yaml.Node) {
				s.RequiresTables = d.strList(t, "spec.requires.any_tables")
			})
		case "steps":
			d.list(v, "spec.steps", func(i int, item *yaml.Node) {
				s.Steps = append(s.Steps, d.step(item, fmt.Sprintf("spec.steps[%d]", i)))
			})
		case "variables":
			d.orderedMap(v, "spec.variables", func(key, val *yaml.Node) {
				s.Variables = append(s.Variables, Variable{Name: key.Value, Template: d.str(val, "spec.variables."+key.Value), Line: key.Line})
			})
		case "interpretation":
			d.fields(v, "spec.interpretation", []string{"rules", "verdict_step"}, func(k string, rv *yaml.Node) {
				if k == "verdict_step" {
					s.VerdictStep = strings.TrimSpace(d.str(rv, "spec.interpretation.verdict_step"))
					return
				}
				d.list(rv, "spec.interpretation.rules", func(i int, item *yaml.Node) {
					s.Rules = append(s.Rules, d.rule(item, fmt.Sprintf("spec.interpretation.rules[%d]", i)))
				})
			})
		case "summary_template":
			s.SummaryTemplate = strings.TrimSpace(d.str(v, "spec.summary_template"))
		case "next_steps":
			s.NextSteps = d.strList(v, "spec.next_steps")
		}
	})
	d.checkUnique(s)
}

func (d *decoder) parameter(n *yaml.Node, where string) Parameter {
	p := Parameter{Type: TypeString, Line: n.Line}
	var def *yaml.Node
	d.fields(n, where, []string{"name", "type", "default", "description", "required", "choices"}, func(k string, v *yaml.Node) {
		switch k {
		case "name":
			p.Name = d.str(v, where+".name")
		case "type":
			p.Type = ParamType(d.str(v, where+".type"))
		case "default":
			def = resolve(v)
		case "description":
			p.Description = d.str(v, where+".description")
		case "required":
			p.Required = d.boolean(v, where+".required")
		case "choices":
			p.Choices = d.strList(v, where+".choices")
		}
	})
	if !identRE.MatchString(p.Name) {
		d.errorf(n, where+".name", "%s.name %q must be an identifier (letters, digits, _)", where, p.Name)
	}
	where = fmt.Sprintf("parameter %q", p.Name)
	switch p.Type {
	case TypeString, TypeInteger, TypeNumber, TypeBoolean, TypeRanks:
		if len(p.Choices) > 0 {
			d.errorf(n, "choices", "%s: choices are only for type enum", where)
		}
	case TypeEnum:
		if len(p.Choices) == 0 {
			d.errorf(n, "choices", "%s: type enum needs choices", where)
		}
		for _, c := range p.Choices {
			if !safeChoiceRE.MatchString(c) {
				d.errorf(n, "choices", "%s: choice %q may hold only letters, digits, _ and .", where, c)
			}
		}
	default:
		d.errorf(n, "type", "%s: type %q is not one of integer, number, boolean, string, enum, ranks", where, p.Type)
		return p
	}
	if def != nil && !isNull(def) {
		if def.Kind != yaml.ScalarNode {
			d.errorf(def, "default", "%s: default must be a scalar, not %s", where, kindName(def))
		} else if v, err := canonicalDefault(p, def); err != nil {
			d.errorf(def, "default", "%s: default %s: %v", where, describe(def), err)
		} else {
			p.Default, p.HasDefault = v, true
		}
	}
	if p.Required && p.HasDefault {
		d.errorf(n, "required", "%s: required and default exclude each other", where)
	}
	return p
}

// canonicalDefault checks a default against the type by its YAML tag, as
// Probing does (`default: "5"` for an integer is an error there too).
func canonicalDefault(p Parameter, n *yaml.Node) (string, error) {
	switch p.Type {
	case TypeInteger:
		if n.Tag != "!!int" {
			return "", fmt.Errorf("does not match type integer")
		}
	case TypeNumber:
		if n.Tag != "!!int" && n.Tag != "!!float" {
			return "", fmt.Errorf("does not match type number")
		}
	case TypeBoolean:
		if n.Tag != "!!bool" {
			return "", fmt.Errorf("does not match type boolean")
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			return "", err
		}
		return strconv.FormatBool(b), nil
	default:
		if n.Tag != "!!str" {
			return "", fmt.Errorf("does not match type %s (quote it)", p.Type)
		}
	}
	if p.Type == TypeInteger {
		var i int64
		if err := n.Decode(&i); err != nil {
			return "", fmt.Errorf("does not fit in 64 bits")
		}
		return strconv.FormatInt(i, 10), nil
	}
	return NormalizeValue(p, n.Value)
}

// NormalizeValue checks a value given as text against the parameter's type
// and returns its canonical text (§6.3): "0042" → "42", "TRUE" → "true",
// ranks "3,0-2" → "0,1,2,3". A string is returned as given.
func NormalizeValue(p Parameter, v string) (string, error) {
	switch p.Type {
	case TypeInteger:
		i, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return "", fmt.Errorf("must be an integer")
		}
		return strconv.FormatInt(i, 10), nil
	case TypeNumber:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return "", fmt.Errorf("must be a finite number")
		}
		return strconv.FormatFloat(f, 'f', -1, 64), nil
	case TypeBoolean:
		switch strings.ToLower(v) {
		case "true":
			return "true", nil
		case "false":
			return "false", nil
		}
		return "", fmt.Errorf("must be true or false")
	case TypeEnum:
		if !slices.Contains(p.Choices, v) {
			return "", fmt.Errorf("must be one of %s", strings.Join(p.Choices, ", "))
		}
		return v, nil
	case TypeRanks:
		rs, err := rankset.Parse(v)
		if err != nil {
			return "", err
		}
		if len(rs) == 0 {
			return "", fmt.Errorf("must name at least one rank")
		}
		if len(rs) > maxRanks {
			return "", fmt.Errorf("names %d ranks, more than %d", len(rs), maxRanks)
		}
		parts := make([]string, len(rs))
		for i, r := range rs {
			parts[i] = strconv.Itoa(r)
		}
		return strings.Join(parts, ","), nil
	default:
		if strings.ContainsRune(v, 0) {
			return "", fmt.Errorf("must not contain a NUL byte")
		}
		return v, nil
	}
}

// maxRanks bounds a rendered ranks parameter: "IN (0,1,…)" for a 64k-GPU
// job is ~400 KB of SQL, already more than any step should carry.
const maxRanks = 1 << 16

func (d *decoder) step(n *yaml.Node, where string) Step {
	s := Step{Type: StepSQL, OnEmpty: "skip", Line: n.Line}
	known := []string{"id", "title", "type", "sql", "tool", "args", "method", "path", "view", "action", "on_empty", "empty_message", "when", "cluster", "platform"}
	d.fields(n, where, known, func(k string, v *yaml.Node) {
		f := where + "." + k
		switch k {
		case "id":
			s.ID = d.str(v, f)
		case "title":
			s.Title = d.str(v, f)
		case "type":
			s.Type = StepType(d.str(v, f))
		case "sql":
			s.SQL, s.SQLLine = d.str(v, f), resolve(v).Line
			if resolve(v).Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
				s.SQLLine++ // a block scalar's text starts below its indicator
			}
		case "tool":
			s.Tool = d.str(v, f)
		case "args":
			s.Args = map[string]string{}
			d.orderedMap(v, f, func(key, val *yaml.Node) {
				s.Args[key.Value] = d.str(val, f+"."+key.Value)
			})
		case "method":
			s.Method = d.str(v, f)
		case "path":
			s.Path = d.str(v, f)
		case "view":
			s.View = d.str(v, f)
		case "action":
			s.Action = d.str(v, f)
		case "on_empty":
			s.OnEmpty = d.str(v, f)
		case "empty_message":
			s.EmptyMessage = d.str(v, f)
		case "when":
			s.When = d.str(v, f)
		case "cluster":
			s.Cluster = d.boolean(v, f)
		case "platform":
			s.Platform = d.str(v, f)
		}
	})
	name := fmt.Sprintf("step %q", s.ID)
	if s.ID == "" {
		d.errorf(n, where+".id", "%s.id is required", where)
		name = where
	}
	if s.Title == "" {
		d.errorf(n, "title", "%s: title is required", name)
	}
	switch s.Type {
	case StepSQL:
		if strings.TrimSpace(s.SQL) == "" {
			d.errorf(n, "sql", "%s: sql steps need sql", name)
		}
	case StepAPI:
		if strings.TrimSpace(s.Path) == "" {
			d.errorf(n, "path", "%s: api steps need path", name)
		}
		if s.Method != "" && !strings.EqualFold(s.Method, "GET") {
			d.errorf(n, "method", "%s: api steps support method GET only, not %q", name, s.Method)
		}
	case StepUI:
		if strings.TrimSpace(s.View) == "" {
			d.errorf(n, "view", "%s: ui steps need view", name)
		}
	case StepConfig:
	case StepTool:
		if !identRE.MatchString(s.Tool) {
			d.errorf(n, "tool", "%s: tool steps need tool, a tool name", name)
		}
	default:
		d.errorf(n, "type", "%s: type %q is not one of sql, tool, api, ui, config", name, s.Type)
	}
	if s.Type != StepTool && (s.Tool != "" || s.Args != nil) {
		d.errorf(n, "tool", "%s: tool and args are only for tool steps", name)
	}
	if !slices.Contains([]string{"skip", "warn", "abort"}, s.OnEmpty) {
		d.errorf(n, "on_empty", "%s: on_empty %q is not one of skip, warn, abort", name, s.OnEmpty)
	}
	if s.When != "" && s.When != "always" && !strings.Contains(s.When, "use_global") {
		d.errorf(n, "when", "%s: when %q is neither \"always\" nor a use_global condition", name, s.When)
	}
	if s.Platform != "" && !slices.Contains([]string{"linux", "macos", "windows"}, s.Platform) {
		d.errorf(n, "platform", "%s: platform %q is not one of linux, macos, windows", name, s.Platform)
	}
	return s
}

func (d *decoder) rule(n *yaml.Node, where string) Rule {
	r := Rule{Severity: SeverityInfo, Line: n.Line}
	var whenNode *yaml.Node
	d.fields(n, where, []string{"id", "when", "severity", "message"}, func(k string, v *yaml.Node) {
		f := where + "." + k
		switch k {
		case "id":
			r.ID = d.str(v, f)
		case "when":
			r.When, whenNode = d.str(v, f), resolve(v)
		case "severity":
			r.Severity = Severity(d.str(v, f))
		case "message":
			r.Message = d.str(v, f)
		}
	})
	name := fmt.Sprintf("rule %q", r.ID)
	if r.ID == "" {
		d.errorf(n, where+".id", "%s.id is required", where)
		name = where
	}
	if r.Message == "" {
		d.errorf(n, "message", "%s: message is required", name)
	}
	switch r.Severity {
	case SeverityError, SeverityWarning, SeverityInfo:
	default:
		d.errorf(n, "severity", "%s: severity %q is not one of error, warning, info", name, r.Severity)
	}
	if whenNode == nil {
		d.errorf(n, "when", "%s: when is required", name)
	} else if c, err := ParseRule(r.When); err != nil {
		d.errorf(whenNode, "when", "%s: when: %v", name, err)
	} else {
		r.Cond = c
	}
	return r
}

func (d *decoder) checkUnique(s *Spec) {
	seen := map[string]bool{}
	for _, p := range s.Parameters {
		if p.Name != "" && seen[p.Name] {
			d.errorf(&yaml.Node{Line: p.Line}, "name", "duplicate parameter %q", p.Name)
		}
		seen[p.Name] = true
		if _, ok := derivedNames[p.Name]; ok {
			d.errorf(&yaml.Node{Line: p.Line}, "name", "parameter %q would be overwritten by the derived variable of that name; rename it", p.Name)
		}
	}
	for _, v := range s.Variables {
		if seen[v.Name] {
			d.errorf(&yaml.Node{Line: v.Line}, v.Name, "variable %q has the name of a parameter", v.Name)
		}
		if !identRE.MatchString(v.Name) {
			d.errorf(&yaml.Node{Line: v.Line}, v.Name, "variable name %q must be an identifier", v.Name)
		}
	}
	steps := map[string]bool{}
	for _, st := range s.Steps {
		if st.ID != "" && steps[st.ID] {
			d.errorf(&yaml.Node{Line: st.Line}, "id", "duplicate step id %q", st.ID)
		}
		steps[st.ID] = true
	}
	if v := s.VerdictStep; v != "" {
		i := slices.IndexFunc(s.Steps, func(st Step) bool { return st.ID == v })
		switch {
		case i < 0:
			d.errorf(n0(s), "verdict_step", "spec.interpretation.verdict_step %q names no step of this skill", v)
		case s.Steps[i].Type != StepTool || s.Steps[i].Tool != "diagnose_hang":
			d.errorf(&yaml.Node{Line: s.Steps[i].Line}, "verdict_step", "verdict_step %q must be a tool step calling diagnose_hang", v)
		case s.SummaryTemplate != "":
			d.errorf(n0(s), "summary_template", "a skill with a verdict_step takes its summary from the diagnosis: drop summary_template")
		}
	}
	rules := map[string]bool{}
	for _, r := range s.Rules {
		if r.ID != "" && rules[r.ID] {
			d.errorf(&yaml.Node{Line: r.Line}, "id", "duplicate rule id %q", r.ID)
		}
		rules[r.ID] = true
		if r.Cond != nil && r.Cond.Step != "" && !steps[r.Cond.Step] {
			d.errorf(&yaml.Node{Line: r.Line}, "when", "rule %q: step:%s names no step of this skill", r.ID, r.Cond.Step)
		}
		if r.Cond != nil {
			for _, name := range r.Cond.params() {
				if !seen[name] {
					d.errorf(&yaml.Node{Line: r.Line}, "when", "rule %q: {%s} is not a parameter of this skill", r.ID, name)
				}
			}
		}
	}
}

// ParseFrontMatter splits SKILL.md into its front matter (between the first
// two "---" lines) and the body. A file without front matter is all body.
func ParseFrontMatter(file string, data []byte) (*FrontMatter, string, error) {
	if len(data) > MaxFileSize {
		return nil, "", &Error{File: file, Msg: fmt.Sprintf("file is %d bytes, more than the %d-byte limit", len(data), MaxFileSize)}
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	if !strings.HasPrefix(text, "---\n") {
		return nil, text, nil
	}
	rest := text[4:]
	var yamlText, body string
	if strings.HasPrefix(rest, "---\n") || rest == "---" {
		yamlText, body = "", strings.TrimPrefix(strings.TrimPrefix(rest, "---"), "\n")
	} else {
		end := strings.Index(rest, "\n---\n")
		if end < 0 {
			if strings.HasSuffix(rest, "\n---") {
				end = len(rest) - 4
			} else {
				return nil, "", &Error{File: file, Line: 1, Msg: "front matter opened with --- is never closed"}
			}
		}
		yamlText = rest[:end+1]
		body = strings.TrimPrefix(rest[end+1:], "---")
		body = strings.TrimPrefix(body, "\n")
	}
	fm := &FrontMatter{}
	if strings.TrimSpace(yamlText) == "" {
		return fm, body, nil
	}
	root, err := parseYAML(file, []byte(yamlText), 1)
	if err != nil {
		return nil, "", err
	}
	d := &decoder{file: file}
	known := []string{"name", "description", "category", "tables", "tags", "keywords", "parameters"}
	d.fields(root, "the front matter", known, func(k string, v *yaml.Node) {
		switch k {
		case "name":
			fm.Name = d.str(v, k)
		case "description":
			fm.Description = strings.TrimSpace(d.str(v, k))
		case "category":
			fm.Category = d.str(v, k)
		case "tables":
			fm.Tables = d.strList(v, k)
		case "tags":
			fm.Tags = d.strList(v, k)
		case "keywords":
			fm.Keywords = d.keywords(v, "keywords")
		case "parameters":
			d.orderedMap(v, "parameters", func(key, pv *yaml.Node) {
				pv = resolve(pv)
				// Reuse the steps.yaml checks: the mapping form only
				// lacks the name, which is its key here.
				named := &yaml.Node{Kind: yaml.MappingNode, Line: pv.Line, Content: append([]*yaml.Node{
					{Kind: yaml.ScalarNode, Tag: "!!str", Value: "name", Line: key.Line},
					{Kind: yaml.ScalarNode, Tag: "!!str", Value: key.Value, Line: key.Line},
				}, pv.Content...)}
				if pv.Kind != yaml.MappingNode {
					d.errorf(pv, "parameters."+key.Value, "parameters.%s must be a mapping, not %s", key.Value, kindName(pv))
					return
				}
				fm.Parameters = append(fm.Parameters, d.parameter(named, "parameters."+key.Value))
			})
		}
	})
	if err := d.err(); err != nil {
		return nil, "", err
	}
	return fm, body, nil
}

// ParseCatalog decodes and validates one root's catalog.yaml (§6.8).
func ParseCatalog(file string, data []byte) (*CatalogFile, error) {
	root, err := parseYAML(file, data, 0)
	if err != nil {
		return nil, err
	}
	d := &decoder{file: file}
	c := &CatalogFile{File: file}
	var av, kind string
	d.fields(root, "the document", []string{"apiVersion", "kind", "categories", "skills"}, func(k string, v *yaml.Node) {
		switch k {
		case "apiVersion":
			av = d.str(v, k)
		case "kind":
			kind = d.str(v, k)
		case "categories":
			d.orderedMap(v, "categories", func(key, cv *yaml.Node) {
				cat := Category{ID: key.Value}
				d.fields(cv, "categories."+key.Value, []string{"label", "description"}, func(k string, v *yaml.Node) {
					if k == "label" {
						cat.Label = d.str(v, k)
					} else {
						cat.Description = d.str(v, k)
					}
				})
				c.Categories = append(c.Categories, cat)
			})
		case "skills":
			ids := map[string]bool{}
			d.list(v, "skills", func(i int, item *yaml.Node) {
				e := d.catalogEntry(item, fmt.Sprintf("skills[%d]", i))
				if ids[e.ID] {
					d.errorf(item, "id", "duplicate skill id %q in the catalog", e.ID)
				}
				ids[e.ID] = true
				c.Skills = append(c.Skills, e)
			})
		}
	})
	if av != apiVersion {
		d.errorf(root, "apiVersion", "apiVersion must be %q, not %q", apiVersion, av)
	}
	if kind != "Catalog" {
		d.errorf(root, "kind", "kind must be \"Catalog\", not %q", kind)
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return c, nil
}

func (d *decoder) catalogEntry(n *yaml.Node, where string) CatalogEntry {
	e := CatalogEntry{Line: n.Line}
	known := []string{"id", "category", "priority", "entry", "description", "tables", "pages", "related", "path", "file"}
	d.fields(n, where, known, func(k string, v *yaml.Node) {
		f := where + "." + k
		switch k {
		case "id":
			e.ID = d.str(v, f)
		case "category":
			e.Category = d.str(v, f)
		case "priority":
			e.Priority = d.integer(v, f)
		case "entry":
			e.Entry = d.boolean(v, f)
		case "description":
			e.Description = d.str(v, f)
		case "tables":
			e.Tables = d.strList(v, f)
		case "pages":
			e.Pages = d.strList(v, f)
		case "related":
			e.Related = d.strList(v, f)
		case "path":
			e.Path = d.str(v, f)
		case "file":
			e.File = d.str(v, f)
		}
	})
	if e.ID == "" {
		d.errorf(n, where+".id", "%s.id is required", where)
	}
	return e
}

// n0 is a position for errors about the spec as a whole: its first step.
func n0(s *Spec) *yaml.Node {
	if len(s.Steps) > 0 {
		return &yaml.Node{Line: s.Steps[0].Line}
	}
	return &yaml.Node{}
}
