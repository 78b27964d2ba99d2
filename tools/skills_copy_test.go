package tools

import (
	"reflect"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/skills"
	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
)

// TestRunSkillResultCopiesRunner: RunSkillResult, the run_skill tool's
// output schema, is a hand copy of the skill runner's skills.RunResult
// (the schema reflector cannot see through a row's custom encoding). The
// two must put the same JSON on the wire: the same fields, in the same
// order, with the same names, omitempty and kinds, recursively. Two
// differences are the copy's reason to exist: a named string (StepStatus)
// is a string, and a jsonrow.Row (an object keyed by column) is a
// map[string]any. Fields the runner does not serialise (json:"-") are left
// out. When this fails, change RunSkillResult to match the runner, then
// update the tool snapshots (go test ./mcp -run TestToolSnapshots -update).
func TestRunSkillResultCopiesRunner(t *testing.T) {
	for _, p := range wireDiff("RunSkillResult", reflect.TypeFor[RunSkillResult](), reflect.TypeFor[skills.RunResult]()) {
		t.Error(p)
	}
}

// TestWireDiffCatches: the comparison finds a renamed, retyped, missing
// or extra field, and a changed omitempty, at any depth.
func TestWireDiffCatches(t *testing.T) {
	type inner struct {
		A string `json:"a"`
	}
	type runner struct {
		X    int               `json:"x"`
		S    skills.StepStatus `json:"s,omitempty"`
		Rows []jsonrow.Row     `json:"rows"`
		In   []inner           `json:"in"`
		Skip map[string]int    `json:"-"`
	}
	type same struct {
		X    int              `json:"x"`
		S    string           `json:"s,omitempty"`
		Rows []map[string]any `json:"rows"`
		In   []struct {
			A string `json:"a"`
		} `json:"in"`
	}
	if d := wireDiff("same", reflect.TypeFor[same](), reflect.TypeFor[runner]()); len(d) != 0 {
		t.Errorf("equal shapes differ: %v", d)
	}
	type renamed struct {
		X    int              `json:"y"`
		S    string           `json:"s,omitempty"`
		Rows []map[string]any `json:"rows"`
		In   []inner          `json:"in"`
	}
	type retyped struct {
		X    string           `json:"x"`
		S    string           `json:"s,omitempty"`
		Rows []map[string]any `json:"rows"`
		In   []inner          `json:"in"`
	}
	type deep struct {
		X    int              `json:"x"`
		S    string           `json:"s"`
		Rows []map[string]any `json:"rows"`
		In   []struct {
			A int `json:"a"`
		} `json:"in"`
	}
	type short struct {
		X int    `json:"x"`
		S string `json:"s,omitempty"`
	}
	for _, c := range []struct {
		name string
		typ  reflect.Type
		want string
	}{
		{"renamed", reflect.TypeFor[renamed](), "renamed: fields y,s,rows,in in the copy, x,s,rows,in in the runner"},
		{"retyped", reflect.TypeFor[retyped](), "retyped.x: string (string) in the copy, int (int)"},
		{"deep", reflect.TypeFor[deep](), "deep.in[].a: int (int) in the copy, string (string)"},
		{"deep", reflect.TypeFor[deep](), "deep.s: omitempty is off in the copy, on in the runner"},
		{"short", reflect.TypeFor[short](), "short: fields x,s in the copy, x,s,rows,in in the runner"},
	} {
		d := strings.Join(wireDiff(c.name, c.typ, reflect.TypeFor[runner]()), "\n")
		if !strings.Contains(d, c.want) {
			t.Errorf("%s: want %q in:\n%s", c.name, c.want, d)
		}
	}
}

// wireField is one struct field as encoding/json writes it.
type wireField struct {
	name      string
	omitempty bool
	typ       reflect.Type
}

// wireFields lists t's JSON fields in order (embedded structs without a
// tag flattened, json:"-" and unexported fields left out).
func wireFields(t reflect.Type) []wireField {
	var out []wireField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				out = append(out, wireFields(ft)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, wireField{name: name, omitempty: strings.Contains(","+opts+",", ",omitempty,"), typ: f.Type})
	}
	return out
}

func fieldNames(fs []wireField) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	return strings.Join(names, ",")
}

// wireDiff lists where the copy's JSON shape differs from the runner's,
// each with its path (a.b[].c).
func wireDiff(path string, cp, rn reflect.Type) []string {
	if rn == reflect.TypeFor[jsonrow.Row]() {
		if cp != reflect.TypeFor[map[string]any]() {
			return []string{path + ": " + cp.String() + " in the copy, a jsonrow.Row (map[string]any) in the runner"}
		}
		return nil
	}
	if cp.Kind() != rn.Kind() {
		return []string{path + ": " + cp.String() + " (" + cp.Kind().String() + ") in the copy, " + rn.String() + " (" + rn.Kind().String() + ") in the runner"}
	}
	switch cp.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		sub := path
		if cp.Kind() != reflect.Pointer {
			sub += "[]"
		}
		return wireDiff(sub, cp.Elem(), rn.Elem())
	case reflect.Map:
		return append(wireDiff(path+"{key}", cp.Key(), rn.Key()), wireDiff(path+"{}", cp.Elem(), rn.Elem())...)
	case reflect.Struct:
		cf, rf := wireFields(cp), wireFields(rn)
		if fieldNames(cf) != fieldNames(rf) {
			return []string{path + ": fields " + fieldNames(cf) + " in the copy, " + fieldNames(rf) + " in the runner"}
		}
		var out []string
		for i := range cf {
			sub := path + "." + cf[i].name
			if cf[i].omitempty != rf[i].omitempty {
				out = append(out, sub+": omitempty is "+boolWord(cf[i].omitempty)+" in the copy, "+boolWord(rf[i].omitempty)+" in the runner")
			}
			out = append(out, wireDiff(sub, cf[i].typ, rf[i].typ)...)
		}
		return out
	}
	return nil
}

func boolWord(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
