package flightrecorder_test

import (
	"errors"
	"runtime/debug"
	"strings"
	"testing"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
)

// TestMemoryCeiling: past the ceiling, Load and Analyze stop with an error
// that names the ceiling and how to raise it, instead of growing until the
// kernel kills the process; under it they finish.
func TestMemoryCeiling(t *testing.T) {
	dir := t.TempDir()
	if err := frsynth.Write(dir, frsynth.Spec{Ranks: 64, Entries: 2000, TP: 8, CppStack: true, Fault: frsynth.Fault{Kind: "missing", Rank: 3, Seq: 1500}}); err != nil {
		t.Fatal(err)
	}
	softBefore := debug.SetMemoryLimit(-1)
	var ce *fr.MemoryCeilingError

	// A ceiling the process is already over: the load stops.
	_, err := fr.Load([]string{dir}, fr.LoadOptions{Limits: fr.Limits{MaxMemory: 1}})
	if !errors.As(err, &ce) || ce.Phase != "decoding the dumps" || ce.Ceiling != 1 {
		t.Fatalf("load past the ceiling: %v", err)
	}
	for _, want := range []string{"memory ceiling of 1 B (as asked)", "PROBING_FR_MAX_MEMORY=1MiB", "--max-memory 1MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}

	// Within the ceiling everything is analysed; then an analysis with a
	// ceiling it is over stops too.
	l, err := fr.Load([]string{dir}, fr.LoadOptions{Limits: fr.Limits{MaxMemory: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := fr.AnalyzeLoadedContext(t.Context(), l, fr.Options{}); err != nil || r.Verdict != "MISSING_RANKS" {
		t.Fatalf("under the default ceiling: %v %v", r, err)
	}
	if _, err := fr.AnalyzeLoadedContext(t.Context(), l, fr.Options{Limits: fr.Limits{MaxMemory: 1}}); !errors.As(err, &ce) || ce.Phase != "analysing" {
		t.Fatalf("analysis past the ceiling: %v", err)
	}

	// A ceiling a little above what the process holds now: decoding 64
	// ranks' dumps (5.6 MB of entries alone) passes it.
	l = nil
	debug.FreeOSMemory()
	now := fr.ProcessMemory()
	if _, err := fr.Load([]string{dir}, fr.LoadOptions{Limits: fr.Limits{MaxMemory: now + 2<<20}}); !errors.As(err, &ce) {
		t.Fatalf("a ceiling 2 MiB above the %d bytes held: %v", now, err)
	}

	// From the environment: said so; a malformed value is named.
	t.Setenv(fr.EnvMaxMemory, "1")
	if _, err := fr.Load([]string{dir}, fr.LoadOptions{}); !errors.As(err, &ce) || !strings.Contains(err.Error(), "set by PROBING_FR_MAX_MEMORY") {
		t.Errorf("ceiling from the environment: %v", err)
	}
	t.Setenv(fr.EnvMaxMemory, "lots")
	if _, err := fr.Load([]string{dir}, fr.LoadOptions{}); err == nil || !strings.Contains(err.Error(), `PROBING_FR_MAX_MEMORY="lots"`) {
		t.Errorf("malformed ceiling: %v", err)
	}
	if got := debug.SetMemoryLimit(-1); got != softBefore {
		t.Errorf("the runtime's soft limit is %d after the guards, was %d", got, softBefore)
	}
}

// TestProgress: Load reports every file and Analyze every group, counts
// rising to their totals.
func TestProgress(t *testing.T) {
	dir := t.TempDir()
	if err := frsynth.Write(dir, frsynth.Spec{Ranks: 16, Entries: 100, TP: 4, Fault: frsynth.Fault{Kind: "missing", Rank: 3, Seq: 60}}); err != nil {
		t.Fatal(err)
	}
	var seen []fr.Progress
	l, err := fr.Load([]string{dir}, fr.LoadOptions{Progress: func(p fr.Progress) { seen = append(seen, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 16 || seen[15].Done != 16 || seen[15].Total != 16 || seen[15].Phase != "decode" || seen[15].Entries == 0 || seen[15].Bytes == 0 {
		t.Fatalf("load progress: %+v", seen)
	}
	seen = nil
	fr.AnalyzeLoaded(l, fr.Options{Progress: func(p fr.Progress) { seen = append(seen, p) }})
	groups := 0
	for _, p := range seen {
		if p.Phase == "analyse" {
			groups++
			if p.Done != groups || p.Total != 5 {
				t.Errorf("analysis progress %+v after %d groups", p, groups)
			}
		}
	}
	if groups != 5 {
		t.Errorf("analysis progress: %+v", seen)
	}
}
