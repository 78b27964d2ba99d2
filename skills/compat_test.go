package skills

import (
	"os"
	"testing"
)

// TestProbingCompat loads a copy of Probing's own skills (its
// python/probing/bundled_skills directory, or a checkout's skills/) when
// PROBING_COMPAT_SKILLS_DIR names one. They are not vendored: the test is
// skipped without them.
func TestProbingCompat(t *testing.T) {
	dir := os.Getenv("PROBING_COMPAT_SKILLS_DIR")
	if dir == "" {
		t.Skip("PROBING_COMPAT_SKILLS_DIR not set")
	}
	cat, problems := Load([]Root{{Label: LabelBundled, Path: dir}})
	for _, p := range problems {
		if p.Warning {
			t.Logf("%v", p)
		} else {
			t.Errorf("%v", p)
		}
	}
	for _, s := range cat.Skills {
		steps := 0
		if s.Steps != nil {
			steps = len(s.Steps.Spec.Steps)
			for i := range s.Steps.Spec.Steps {
				b, err := s.Bind(nil, BindOptions{PeerCount: func() (int, error) { return 1, nil }})
				if err != nil {
					t.Fatalf("%s: %v", s.ID, err)
				}
				if _, err := b.Expand(&s.Steps.Spec.Steps[i]); err != nil {
					t.Errorf("%s: %v", s.ID, err)
				}
			}
		}
		t.Logf("loaded %s (priority %d, %d steps, catalogued %v)", s.ID, s.Priority, steps, s.Catalogued)
	}
}
