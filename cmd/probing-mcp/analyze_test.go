package main

import (
	"strings"
	"testing"
)

// TestAnalyzeFilterMatchingNothing: a --pg or --ranks filter that matches
// no group is an error naming the groups there are, never "0 process
// group(s). Verdict OK".
func TestAnalyzeFilterMatchingNothing(t *testing.T) {
	dir := "../../testdata/fr/real/missing_rank"
	for _, args := range [][]string{{"--pg", "nosuch"}, {"--ranks", "900"}} {
		code, out, errOut := runCLI(append([]string{"analyze", dir}, args...)...)
		if code != 2 || !strings.Contains(errOut, "no process group matches") || !strings.Contains(errOut, "0 (default_pg)") || strings.Contains(out, "OK") {
			t.Errorf("%v: exit %d, out %q, err %q", args, code, out, errOut)
		}
	}
	if code, _, errOut := runCLI("analyze", dir, "--pg", "default_pg"); code != 0 {
		t.Errorf("a filter that matches: exit %d %s", code, errOut)
	}
}
