package flightrecorder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
)

// TestDecodeBudgetBoundsParallelDecode: the files decoded at once never
// hold more than the budget, and a file larger than the budget still
// decodes, alone. Before the budget, one file was decoded per core
// whatever its size, so two large dumps took twice the memory.
func TestDecodeBudgetBoundsParallelDecode(t *testing.T) {
	dir := t.TempDir()
	spec := frsynth.Spec{Ranks: 8, Entries: 400}
	var files []candidate
	var largest int64
	for r := 0; r < spec.Ranks; r++ {
		data := frsynth.Dump(spec, r)
		p := filepath.Join(dir, fmt.Sprintf("nccl_trace_rank_%d", r))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, candidate{path: p, rank: r})
		largest = max(largest, int64(len(data)))
	}
	for _, size := range []int64{largest * 3 / 2, largest / 2, 1 << 40} {
		lim, err := Limits{DecodeBudget: size}.resolve()
		if err != nil {
			t.Fatal(err)
		}
		b := newByteBudget(size)
		res := &Loaded{}
		dumps, err := decodeAll(context.Background(), files, LoadOptions{Workers: 4, MaxFileBytes: DefaultMaxFileBytes, Limits: lim}, res, b, nil)
		if err != nil || len(dumps) != spec.Ranks || len(res.Problems) > 0 {
			t.Fatalf("budget %d: %d dumps, %v, %+v", size, len(dumps), err, res.Problems)
		}
		if b.peak > size {
			t.Errorf("budget %d: %d bytes decoded at once", size, b.peak)
		}
		if size < largest && b.peak != size {
			t.Errorf("budget %d below a file's size: peak %d, want the whole budget (one file at a time)", size, b.peak)
		}
		if b.used != 0 {
			t.Errorf("budget %d: %d bytes never given back", size, b.used)
		}
	}
}

// TestLimitsFromEnvironment: the ceilings come from PROBING_FR_* when the
// options leave them zero, and a malformed value is an error naming it.
func TestLimitsFromEnvironment(t *testing.T) {
	t.Setenv(EnvMaxRanks, "4096")
	t.Setenv(EnvMaxGroups, "12")
	t.Setenv(EnvDecodeBudget, "3MiB")
	lim, err := Limits{}.resolve()
	if err != nil || lim.MaxRanks != 4096 || lim.MaxGroups != 12 || lim.DecodeBudget != 3<<20 {
		t.Fatalf("%+v %v", lim, err)
	}
	if lim, _ := (Limits{MaxRanks: 8}).resolve(); lim.MaxRanks != 8 {
		t.Errorf("an option overrides the environment: %+v", lim)
	}
	for name, bad := range map[string]string{EnvMaxRanks: "many", EnvMaxGroups: "-1", EnvDecodeBudget: "3 parsecs"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, bad)
			if _, err := Load([]string{t.TempDir()}, LoadOptions{}); err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), bad) {
				t.Errorf("%s=%s: %v", name, bad, err)
			}
		})
	}
}
