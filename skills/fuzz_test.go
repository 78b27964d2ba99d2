package skills

import "testing"

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"always", "step:a | rows > {n}*0.7", "column:x | any_contains('a','b')", "step:a | top(row).c > 2 * median(c)", "column:m | last > 2 * avg(m)", "column:s | value = 'x|y'"} {
		f.Add(s)
	}
	env := &Env{Params: map[string]string{"n": "2"}, Evidence: map[string]*Table{"a": {Columns: []string{"c", "x", "m", "s"}, Rows: [][]any{{1, "a", 2.0, nil}, {3, nil, "4", "x"}}}}, Order: []string{"a"}}
	f.Fuzz(func(t *testing.T, when string) {
		c, err := ParseRule(when)
		if err != nil {
			return
		}
		c.Eval(env) // must not panic
	})
}

func FuzzParseSteps(f *testing.F) {
	f.Add([]byte(goodSteps))
	f.Add([]byte(billionLaughs()))
	f.Add([]byte("apiVersion: probing.dev/v1\nkind: Skill\nmetadata: {id: x, title: X}\nspec: {steps: []}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sf, err := ParseSteps("f.yaml", data)
		if err != nil {
			return
		}
		s := &Skill{ID: sf.Metadata.ID, Steps: sf}
		b, err := s.Bind(nil, BindOptions{})
		if err != nil {
			return
		}
		for i := range sf.Spec.Steps {
			b.Expand(&sf.Spec.Steps[i]) //nolint:errcheck // must not panic
		}
		ParseFrontMatter("SKILL.md", append([]byte("---\n"), data...)) //nolint:errcheck
	})
}
