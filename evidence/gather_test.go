package evidence

import (
	"fmt"
	"testing"
)

// TestWorldOfMajorityAndConflict: the world size most live ranks report
// is used, and a disagreement is a conflict naming who said what.
func TestWorldOfMajorityAndConflict(t *testing.T) {
	var got []string
	conflict := func(f string, a ...any) { got = append(got, fmt.Sprintf(f, a...)) }
	if w := worldOf(map[int][]int{8: {0, 1, 2, 3, 4, 5, 6, 7}}, conflict); w != 8 || len(got) != 0 {
		t.Errorf("agreeing: %d %v", w, got)
	}
	w := worldOf(map[int][]int{8: {0, 1, 2, 4, 5, 6, 7}, 4: {3}}, conflict)
	want := "the ranks report different world sizes: 4 (rank 3), 8 (ranks 0-2,4-7); the size most report, 8, is used"
	if w != 8 || len(got) != 1 || got[0] != want {
		t.Errorf("disagreeing: %d %q", w, got)
	}
	if w := worldOf(nil, conflict); w != 0 {
		t.Errorf("nobody said: %d", w)
	}
}
