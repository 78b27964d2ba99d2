package skills

import (
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Injection policy. Probing substitutes `{name}` as plain text after
// doubling single quotes in string parameters, which is safe only when the
// template puts the placeholder inside '…'. Here that is checked, not
// assumed:
//   - integer, number, boolean and ranks values are parsed and re-printed
//     canonically, so they hold only digits, signs, dots, commas, "e",
//     "true"/"false": safe anywhere;
//   - enum choices may hold only [A-Za-z0-9_.]: safe anywhere;
//   - a string parameter may appear in SQL only inside a single-quoted
//     literal, where its quotes are doubled. A template using one anywhere
//     else (bare, in "identifiers", in comments) fails to load, naming the
//     file, line and placeholder;
//   - spec.variables may not use string parameters, other variables (they
//     do not chain in Probing either), quotes, ";", "--", "/*" or "\", so a
//     variable cannot shift the quoting of the text around it.
// In api paths, string and enum values are URL-query-escaped; in tool
// arguments, values are passed as they are (the tool validates its own
// inputs; no SQL is built from them here).

// derivedNames are Probing's table-name variables (§6.3), each the local
// table name, prefixed with "global." when use_global is true.
var derivedNames = map[string]string{
	"comm_table":          "python.comm_collective",
	"table_comm":          "python.comm_collective",
	"nccl_proxy_table":    "nccl.proxy_ops",
	"nccl_coll_table":     "nccl.coll_perf",
	"nccl_inflight_table": "nccl.inflight_ops",
	"net_qp_table":        "nccl.net_qp",
	"nccl_counters_table": "nccl.profiler_counters",
	"fr_table":            "python.torch_nccl_flight_record",
	"fr_status_table":     "python.torch_nccl_pg_status",
	"global_prefix":       "",
}

// Derived returns the derived variables for a use_global value.
func Derived(useGlobal bool) map[string]string {
	prefix := ""
	if useGlobal {
		prefix = "global."
	}
	out := make(map[string]string, len(derivedNames))
	for k, v := range derivedNames {
		out[k] = prefix + v
	}
	out["global_prefix"] = prefix
	return out
}

// placeholders calls fn for each {ident} in s with its byte offset.
func placeholders(s string, fn func(name string, start, end int)) {
	for i := 0; i < len(s); i++ {
		if s[i] != '{' {
			continue
		}
		if name, end := placeholderAt(s, i); end > 0 {
			fn(name, i, end)
			i = end - 1
		}
	}
}

// sqlContext is where in SQL text an offset falls.
type sqlContext int

const (
	sqlCode sqlContext = iota
	sqlString
	sqlIdent
	sqlComment
)

func (c sqlContext) String() string {
	return [...]string{"bare SQL", "a '…' string", "a \"…\" identifier", "a comment"}[c]
}

// sqlContexts lexes SQL just enough to tell, for each placeholder, whether
// it sits in code, a '…' literal, a "…" or `…` identifier or a comment.
func sqlContexts(sql string, fn func(name string, start, end int, ctx sqlContext)) {
	ctx, block, quote := sqlCode, false, byte(0)
	next := func(i int) byte {
		if i+1 < len(sql) {
			return sql[i+1]
		}
		return 0
	}
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		if c == '{' {
			if name, end := placeholderAt(sql, i); end > 0 {
				fn(name, i, end, ctx)
				i = end - 1
				continue
			}
		}
		switch ctx {
		case sqlCode:
			switch {
			case c == '\'':
				ctx = sqlString
			case c == '"' || c == '`':
				ctx, quote = sqlIdent, c
			case c == '-' && next(i) == '-':
				ctx, block = sqlComment, false
				i++
			case c == '/' && next(i) == '*':
				ctx, block = sqlComment, true
				i++
			}
		case sqlString:
			if c == '\'' {
				ctx = sqlCode // a doubled '' re-opens on the next byte
			}
		case sqlIdent:
			if c == quote {
				ctx = sqlCode
			}
		case sqlComment:
			if !block && c == '\n' {
				ctx = sqlCode
			} else if block && c == '*' && next(i) == '/' {
				ctx = sqlCode
				i++
			}
		}
	}
}

// placeholderAt returns the {ident} starting at s[i] and the offset after it.
func placeholderAt(s string, i int) (string, int) {
	j := i + 1
	for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
		j++
	}
	if j > i+1 && j < len(s) && s[j] == '}' {
		return s[i+1 : j], j + 1
	}
	return "", 0
}

// validateTemplates checks every template of a steps.yaml at load time.
func validateTemplates(d *decoder, sf *StepsFile) {
	params := map[string]Parameter{}
	for _, p := range sf.Spec.Parameters {
		params[p.Name] = p
	}
	vars := map[string]bool{}
	for _, v := range sf.Spec.Variables {
		vars[v.Name] = true
	}
	known := func(name string) bool {
		_, p := params[name]
		_, dv := derivedNames[name]
		return p || dv || vars[name]
	}
	for _, v := range sf.Spec.Variables {
		lit := v.Template
		placeholders(v.Template, func(name string, _, _ int) {
			lit = strings.ReplaceAll(lit, "{"+name+"}", "")
			_, builtin := derivedNames[name]
			switch {
			case vars[name] && name == v.Name && builtin:
				// Probing's skills write nccl_proxy_table: "{nccl_proxy_table}":
				// the built-in table name, restated. Not a chain.
			case vars[name]:
				d.errorf(nodeAt(v.Line), v.Name, "variable %q uses variable {%s}: variables do not chain", v.Name, name)
			case !known(name):
				d.errorf(nodeAt(v.Line), v.Name, "variable %q: unknown placeholder {%s} (not a parameter or derived variable)", v.Name, name)
			case params[name].Type == TypeString:
				d.errorf(nodeAt(v.Line), v.Name, "variable %q uses string parameter {%s}; string parameters may appear only inside '…' in a step's sql", v.Name, name)
			}
		})
		for _, bad := range []string{"'", "\"", ";", "--", "/*", "\\"} {
			if strings.Contains(lit, bad) {
				d.errorf(nodeAt(v.Line), v.Name, "variable %q holds %q; variables must not change SQL quoting", v.Name, bad)
				break
			}
		}
	}
	for _, st := range sf.Spec.Steps {
		if st.SQL != "" {
			sqlContexts(st.SQL, func(name string, start, _ int, ctx sqlContext) {
				line := st.SQLLine + strings.Count(st.SQL[:start], "\n")
				if !known(name) {
					d.errorf(nodeAt(line), "sql", "step %q: unknown placeholder {%s} in sql (parameters: %s)", st.ID, name, paramNames(sf))
					return
				}
				if p, ok := params[name]; ok && p.Type == TypeString && ctx != sqlString {
					d.errorf(nodeAt(line), "sql", "step %q: string parameter {%s} is in %s; it may appear only inside a '…' literal", st.ID, name, ctx)
				}
			})
		}
		check := func(field, text string) {
			placeholders(text, func(name string, _, _ int) {
				if !known(name) {
					d.errorf(nodeAt(st.Line), field, "step %q: unknown placeholder {%s} in %s", st.ID, name, field)
				}
			})
		}
		check("path", st.Path)
		for k, v := range st.Args {
			check("args."+k, v)
		}
	}
}

func nodeAt(line int) *yaml.Node { return &yaml.Node{Line: line} }

func paramNames(sf *StepsFile) string {
	var names []string
	for _, p := range sf.Spec.Parameters {
		names = append(names, p.Name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// BindOptions are what Bind needs from outside the skill.
type BindOptions struct {
	// PeerCount answers how many other nodes the job has. It is called only
	// when use_global defaults to true and was not given; nil means none.
	PeerCount func() (int, error)
	// GOOS overrides runtime.GOOS for platform checks (tests).
	GOOS string
}

// Binding is a skill with its parameters resolved (§6.3).
type Binding struct {
	Skill     *Skill
	Overrides map[string]string // normalised overrides: the run JSON's "parameters"
	Values    map[string]string // defaults, overrides, derived and spec variables
	UseGlobal bool
	types     map[string]ParamType
	goos      string
}

// Bind validates and normalises overrides and resolves the context.
func (s *Skill) Bind(overrides map[string]string, opt BindOptions) (*Binding, error) {
	if s.Steps == nil {
		return nil, fmt.Errorf("skill `%s` has no steps.yaml", s.ID)
	}
	sp := &s.Steps.Spec
	b := &Binding{Skill: s, Overrides: map[string]string{}, Values: map[string]string{}, types: map[string]ParamType{}, goos: opt.GOOS}
	if b.goos == "" {
		b.goos = runtime.GOOS
	}
	if b.goos == "darwin" {
		b.goos = "macos"
	}
	decl := map[string]Parameter{}
	for _, p := range sp.Parameters {
		decl[p.Name] = p
		b.types[p.Name] = p.Type
		if p.HasDefault {
			b.Values[p.Name] = p.Default
		}
	}
	for name, v := range overrides {
		p, ok := decl[name]
		if !ok {
			return nil, fmt.Errorf("unknown parameter `%s` for skill `%s`; its parameters: %s (plan_skill shows them with their types and defaults)", name, s.ID, paramList(sp.Parameters))
		}
		nv, err := NormalizeValue(p, v)
		if err != nil {
			return nil, fmt.Errorf("parameter `%s` of skill `%s`: %v", name, s.ID, err)
		}
		b.Overrides[name], b.Values[name] = nv, nv
	}
	for _, p := range sp.Parameters {
		if _, ok := b.Values[p.Name]; !ok && p.Required {
			return nil, fmt.Errorf("skill `%s` needs parameter `%s` (%s); pass it in params, e.g. {%q: \"…\"}", s.ID, p.Name, p.Type, p.Name)
		}
	}
	if p, ok := decl["use_global"]; ok {
		if v, given := b.Overrides["use_global"]; given {
			b.UseGlobal = v == "true"
		} else if p.Default == "true" {
			n := 0
			if opt.PeerCount != nil {
				var err error
				if n, err = opt.PeerCount(); err != nil {
					return nil, fmt.Errorf("failed to discover cluster peers before running `%s`: %w", s.ID, err)
				}
			}
			b.UseGlobal = n > 0
		}
		b.Values["use_global"] = fmt.Sprint(b.UseGlobal)
	}
	for k, v := range Derived(b.UseGlobal) {
		b.Values[k] = v
	}
	// Variables are expanded against the context without them: one pass.
	expanded := map[string]string{}
	for _, v := range sp.Variables {
		text, err := b.substitute(v.Template, modeText, "variable "+v.Name)
		if err != nil {
			return nil, err
		}
		expanded[v.Name] = text
	}
	for k, v := range expanded {
		b.Values[k] = v
	}
	return b, nil
}

type substMode int

const (
	modeText substMode = iota
	modeSQL
	modePath
)

func (b *Binding) substitute(tmpl string, mode substMode, what string) (string, error) {
	var out strings.Builder
	var errs []error
	last := 0
	emit := func(name string, start, end int, ctx sqlContext) {
		out.WriteString(tmpl[last:start])
		last = end
		v, ok := b.Values[name]
		if !ok {
			errs = append(errs, fmt.Errorf("skill `%s` (%s): %s: unknown placeholder {%s}", b.Skill.ID, b.Skill.Steps.File, what, name))
			return
		}
		t := b.types[name]
		switch mode {
		case modeSQL:
			if t == TypeString {
				if ctx != sqlString {
					errs = append(errs, fmt.Errorf("skill `%s` (%s): %s: string parameter {%s} is in %s, not a '…' literal", b.Skill.ID, b.Skill.Steps.File, what, name, ctx))
					return
				}
				v = strings.ReplaceAll(v, "'", "''")
			}
		case modePath:
			if t == TypeString || t == TypeEnum {
				v = url.QueryEscape(v)
			}
		}
		out.WriteString(v)
	}
	if mode == modeSQL {
		sqlContexts(tmpl, emit)
	} else {
		placeholders(tmpl, func(name string, s, e int) { emit(name, s, e, sqlCode) })
	}
	out.WriteString(tmpl[last:])
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return out.String(), nil
}

// ExpandedStep is a step ready to run: templates expanded, skip decided.
type ExpandedStep struct {
	ID, Title    string
	Type         StepType
	SQL          string
	Tool         string
	Args         map[string]string
	Path         string
	View         string
	Action       string
	OnEmpty      string
	EmptyMessage string
	// Fanout: the step must run cluster-wide (cluster: true, or the SQL
	// names a global. table).
	Fanout bool
	// SkipReason, when set, is why the runner must skip the step (§6.4).
	// For a ui step it is the reason to use when the UI option is off.
	SkipReason string
}

// Expand expands one step of the bound skill.
func (b *Binding) Expand(st *Step) (ExpandedStep, error) {
	e := ExpandedStep{ID: st.ID, Title: st.Title, Type: st.Type, Tool: st.Tool, View: st.View, Action: st.Action, OnEmpty: st.OnEmpty, EmptyMessage: st.EmptyMessage}
	switch {
	case st.Platform != "" && st.Platform != b.goos:
		e.SkipReason = fmt.Sprintf("step requires platform %s, current platform is %s", st.Platform, b.goos)
	case strings.Contains(st.When, "use_global") && !b.UseGlobal:
		e.SkipReason = "skipped (standalone / use_global=false)"
	case st.Type == StepConfig:
		e.SkipReason = "config steps are not applied automatically in CLI skill"
	case st.Type == StepUI:
		view := st.View
		if view == "" {
			view = "analytics"
		}
		e.View = view
		e.SkipReason = fmt.Sprintf("ui step (view=%s) — run probing Web UI for navigation", view)
	}
	var err error
	what := fmt.Sprintf("step %q", st.ID)
	if e.SQL, err = b.substitute(st.SQL, modeSQL, what+" sql"); err != nil {
		return ExpandedStep{}, err
	}
	e.Fanout = st.Cluster || strings.Contains(strings.ToLower(e.SQL), "global.")
	if e.Path, err = b.substitute(st.Path, modePath, what+" path"); err != nil {
		return ExpandedStep{}, err
	}
	if st.Args != nil {
		e.Args = make(map[string]string, len(st.Args))
		for k, v := range st.Args {
			if e.Args[k], err = b.substitute(v, modeText, what+" args."+k); err != nil {
				return ExpandedStep{}, err
			}
		}
	}
	return e, nil
}

// Expand binds the overrides (no peers: use_global defaults to false unless
// given) and expands step stepID. The runner should Bind once per run.
func (s *Skill) Expand(stepID string, overrides map[string]string) (ExpandedStep, error) {
	b, err := s.Bind(overrides, BindOptions{})
	if err != nil {
		return ExpandedStep{}, err
	}
	for i := range s.Steps.Spec.Steps {
		if s.Steps.Spec.Steps[i].ID == stepID {
			return b.Expand(&s.Steps.Spec.Steps[i])
		}
	}
	return ExpandedStep{}, fmt.Errorf("skill `%s` has no step `%s`", s.ID, stepID)
}

// paramList names a skill's parameters, or says it has none.
func paramList(ps []Parameter) string {
	if len(ps) == 0 {
		return "none"
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = "`" + p.Name + "`"
	}
	return strings.Join(names, ", ")
}
