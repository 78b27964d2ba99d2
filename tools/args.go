package tools

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Arguments are checked against the tool's own input schema before they
// are bound into its Params: unknown names are refused with the valid ones
// (encoding/json would drop them silently, and a model that misspelt
// max_groups would get a default it did not ask for), required ones must be
// there, enums and bounds hold. Clients and models that send a number or a
// boolean as a string, or an array as its JSON text, get it converted when
// the text can mean one thing only; anything else is an error naming the
// argument, what it wants and an example. A null is an absent argument.

// argSpec is what a tool accepts, read from its reflected input schema.
type argSpec struct {
	props    map[string]*propSpec
	names    []string
	required []string
}

type propSpec struct {
	Type                 string    `json:"type"`
	Items                *propSpec `json:"items"`
	AdditionalProperties *propSpec `json:"additionalProperties"`
	Enum                 []any     `json:"enum"`
	Minimum              *float64  `json:"minimum"`
	Maximum              *float64  `json:"maximum"`
	MinLength            *int      `json:"minLength"`
	MinItems             *int      `json:"minItems"`
}

func specOf(schema json.RawMessage) *argSpec {
	var s struct {
		Properties map[string]*propSpec `json:"properties"`
		Required   []string             `json:"required"`
	}
	if err := json.Unmarshal(schema, &s); err != nil {
		panic(fmt.Sprintf("input schema does not decode: %v", err)) // built from our own structs
	}
	spec := &argSpec{props: s.Properties, required: s.Required}
	for n := range s.Properties {
		spec.names = append(spec.names, n)
	}
	slices.Sort(spec.names)
	return spec
}

// bind checks args and decodes them into dst (a pointer to the Params).
func (s *argSpec) bind(args map[string]any, dst any) error {
	var problems []string
	clean := make(map[string]any, len(args))
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := args[k]
		p, ok := s.props[k]
		if !ok {
			problems = append(problems, s.unknown(k))
			continue
		}
		if v == nil {
			continue
		}
		cv, err := p.coerce(v)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", k, err))
			continue
		}
		clean[k] = cv
	}
	for _, r := range s.required {
		if _, ok := clean[r]; !ok && !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, r+":") }) {
			problems = append(problems, fmt.Sprintf("%s is required (%s)", r, s.props[r].example()))
		}
	}
	if len(problems) > 0 {
		return userErrorf("%s; this tool's arguments: %s", strings.Join(problems, "; "), s.list())
	}
	b, err := json.Marshal(clean)
	if err == nil {
		err = json.Unmarshal(b, dst)
	}
	if err != nil {
		return userErrorf("arguments do not fit this tool's input schema (%v); this tool's arguments: %s", err, s.list())
	}
	return nil
}

func (s *argSpec) list() string {
	if len(s.names) == 0 {
		return "none"
	}
	out := make([]string, len(s.names))
	for i, n := range s.names {
		out[i] = n
		if slices.Contains(s.required, n) {
			out[i] += " (required)"
		}
	}
	return strings.Join(out, ", ")
}

// unknown names the argument and, when it is a spelling of a real one
// (maxGroups, max-groups, MAX_GROUPS), that one.
func (s *argSpec) unknown(k string) string {
	norm := func(x string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "", " ", "").Replace(x))
	}
	for _, n := range s.names {
		if norm(n) == norm(k) {
			return fmt.Sprintf("unknown argument %s: did you mean %s?", quoteArg(k), n)
		}
	}
	return fmt.Sprintf("unknown argument %s", quoteArg(k))
}

// coerce returns v as the JSON type p wants, or why it cannot be.
func (p *propSpec) coerce(v any) (any, error) {
	var out any
	switch p.Type {
	case "string":
		switch x := v.(type) {
		case string:
			out = x
		case float64:
			// A rank written as a number (ranks: 2) means its digits.
			out = strconv.FormatFloat(x, 'f', -1, 64)
		default:
			return nil, p.want(v)
		}
	case "integer", "number":
		f, ok := v.(float64)
		if sv, isStr := v.(string); isStr {
			n, err := strconv.ParseFloat(strings.TrimSpace(sv), 64)
			f, ok = n, err == nil
		}
		if !ok || math.IsInf(f, 0) || math.IsNaN(f) || (p.Type == "integer" && (f != math.Trunc(f) || math.Abs(f) > 1<<53)) {
			return nil, p.want(v)
		}
		out = f
	case "boolean":
		switch x := v.(type) {
		case bool:
			out = x
		case string:
			b, err := strconv.ParseBool(strings.TrimSpace(x))
			if err != nil {
				return nil, p.want(v)
			}
			out = b
		default:
			return nil, p.want(v)
		}
	case "array":
		arr, ok := v.([]any)
		if sv, isStr := v.(string); isStr && strings.HasPrefix(strings.TrimSpace(sv), "[") {
			ok = json.Unmarshal([]byte(sv), &arr) == nil
		}
		if !ok {
			return nil, p.want(v)
		}
		items := make([]any, len(arr))
		for i, e := range arr {
			if p.Items == nil {
				items[i] = e
				continue
			}
			if e == nil {
				return nil, fmt.Errorf("item %d is null; %s", i, p.example())
			}
			ce, err := p.Items.coerce(e)
			if err != nil {
				return nil, fmt.Errorf("item %d: %v", i, err)
			}
			items[i] = ce
		}
		if p.MinItems != nil && len(items) < *p.MinItems {
			return nil, fmt.Errorf("want at least %d item(s), %s", *p.MinItems, p.example())
		}
		out = items
	case "object":
		obj, ok := v.(map[string]any)
		if sv, isStr := v.(string); isStr && strings.HasPrefix(strings.TrimSpace(sv), "{") {
			ok = json.Unmarshal([]byte(sv), &obj) == nil
		}
		if !ok {
			return nil, p.want(v)
		}
		if p.AdditionalProperties != nil && p.AdditionalProperties.Type != "" {
			for k, e := range obj {
				ce, err := p.AdditionalProperties.coerce(e)
				if err != nil {
					return nil, fmt.Errorf("key %s: %v", quoteArg(k), err)
				}
				obj[k] = ce
			}
		}
		out = obj
	default:
		out = v
	}
	return out, p.check(out)
}

// check applies enum, bounds and lengths to a value of the right type.
func (p *propSpec) check(v any) error {
	if len(p.Enum) > 0 && !slices.ContainsFunc(p.Enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) }) {
		vals := make([]string, len(p.Enum))
		for i, e := range p.Enum {
			vals[i] = fmt.Sprint(e)
		}
		return fmt.Errorf("%s is not one of %s", quoteArg(fmt.Sprint(v)), strings.Join(vals, ", "))
	}
	if f, ok := v.(float64); ok {
		if (p.Minimum != nil && f < *p.Minimum) || (p.Maximum != nil && f > *p.Maximum) {
			return fmt.Errorf("%v is out of range: want %s", v, p.rangeText())
		}
	}
	if s, ok := v.(string); ok && p.MinLength != nil && len(s) < *p.MinLength {
		return fmt.Errorf("must not be empty")
	}
	return nil
}

func (p *propSpec) rangeText() string {
	switch {
	case p.Minimum != nil && p.Maximum != nil:
		return fmt.Sprintf("%v..%v", *p.Minimum, *p.Maximum)
	case p.Minimum != nil:
		return fmt.Sprintf("at least %v", *p.Minimum)
	case p.Maximum != nil:
		return fmt.Sprintf("at most %v", *p.Maximum)
	}
	return "any"
}

// want says what p takes, with what came instead.
func (p *propSpec) want(got any) error {
	return fmt.Errorf("got %s; %s", DescribeValue(got), p.example())
}

// example is "want <type>, e.g. <value>".
func (p *propSpec) example() string {
	switch p.Type {
	case "string":
		if len(p.Enum) > 0 {
			return fmt.Sprintf("want one of %v", p.Enum)
		}
		return `want a string, e.g. "0-3"`
	case "integer":
		if p.Minimum != nil || p.Maximum != nil {
			return "want an integer " + p.rangeText()
		}
		return "want an integer, e.g. 5"
	case "number":
		return "want a number, e.g. 2.5"
	case "boolean":
		return "want true or false"
	case "array":
		if p.Items != nil && p.Items.Type == "integer" {
			return "want an array of integers, e.g. [1234, 5678]"
		}
		return `want an array of strings, e.g. ["/tmp/dumps"]`
	case "object":
		return `want an object, e.g. {"name": "value"}`
	}
	return "see the tool's input schema"
}

// DescribeValue names a JSON value's type and, briefly, the value, without
// quoting much of what a client sent (also for prompt arguments, in mcp).
func DescribeValue(v any) string {
	switch x := v.(type) {
	case string:
		return "the string " + quoteArg(x)
	case float64:
		return "the number " + strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return "the boolean " + strconv.FormatBool(x)
	case []any:
		return fmt.Sprintf("an array of %d item(s)", len(x))
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}

// quoteArg quotes at most 60 bytes of a client's text.
func quoteArg(s string) string {
	if len(s) > 60 {
		return strconv.Quote(s[:57]) + "…"
	}
	return strconv.Quote(s)
}
