package main

import (
	"runtime/debug"
	"strings"
	"testing"
	"time"

	fr "github.com/probing-mcp/probing-mcp/diag/flightrecorder"
)

// TestAnalyzeFilterMatchingNothing: a --pg or --ranks filter that matches
// no group is an error naming the groups there are, never "0 process
// group(s). Verdict OK".
func TestAnalyzeFilterMatchingNothing(t *testing.T) {
	dir := "../../testdata/fr/real/missing_rank"
	for _, args := range [][]string{{"--pg", "nosuch"}, {"--ranks", "900"}} {
		code, out, errOut := runCLI(append([]string{"analyze", dir}, args...)...)
		if code != 2 || !strings.Contains(errOut, "no process group matches") || !strings.Contains(errOut, "⟦0⟧ (⟦default_pg⟧)") || strings.Contains(out, "OK") {
			t.Errorf("%v: exit %d, out %q, err %q", args, code, out, errOut)
		}
	}
	if code, _, errOut := runCLI("analyze", dir, "--pg", "default_pg"); code != 0 {
		t.Errorf("a filter that matches: exit %d %s", code, errOut)
	}
}

// TestAnalyzeProgressAndCeiling: progress goes to stderr when asked (a
// pipe gets none by default), and a memory ceiling the analysis passes
// stops it with the ceiling named, exit 1.
func TestAnalyzeProgressAndCeiling(t *testing.T) {
	soft := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(soft) })
	dir := "../../testdata/fr/real/missing_rank"
	code, out, errOut := runCLI("analyze", dir)
	if code != 0 || strings.Contains(errOut, "decoded") {
		t.Fatalf("default: exit %d, stderr %q", code, errOut)
	}
	code, out2, errOut := runCLI("analyze", dir, "--progress")
	if code != 0 || out2 != out || !strings.Contains(errOut, "probing-mcp analyze: decoded 4/4 files") || !strings.Contains(errOut, "analysed 1/1 process groups") {
		t.Fatalf("--progress: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runCLI("analyze", dir, "--max-memory", "1MiB")
	if code != 1 || !strings.Contains(errOut, "over the memory ceiling of 1.00 MiB (as asked)") || !strings.Contains(errOut, "--max-memory 2MiB") {
		t.Fatalf("--max-memory 1MiB: exit %d, stderr %q", code, errOut)
	}
	t.Setenv("PROBING_FR_MAX_MEMORY", "1MiB")
	if code, _, errOut = runCLI("analyze", dir); code != 1 || !strings.Contains(errOut, "set by PROBING_FR_MAX_MEMORY") {
		t.Fatalf("PROBING_FR_MAX_MEMORY=1MiB: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut = runCLI("analyze", dir, "--max-memory", "64GiB"); code != 0 {
		t.Fatalf("--max-memory over the environment's: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut = runCLI("analyze", dir, "--max-memory", "lots"); code != 2 || !strings.Contains(errOut, `--max-memory "lots"`) {
		t.Fatalf("--max-memory lots: exit %d, stderr %q", code, errOut)
	}
}

// TestProgressPrinterTerminal: on a terminal the line is rewritten in
// place, at most every 100 ms but always at a phase's end, and cleared
// before the report.
func TestProgressPrinterTerminal(t *testing.T) {
	var b strings.Builder
	p := newProgressPrinter(&b, false, false)
	p.tty, p.on, p.every = true, true, time.Hour
	p.report(fr.Progress{Phase: "decode", Done: 1, Total: 3, Bytes: 3 << 20, Entries: 2000})
	p.report(fr.Progress{Phase: "decode", Done: 2, Total: 3}) // within the period: not written
	p.report(fr.Progress{Phase: "decode", Done: 3, Total: 3, Entries: 2_500_000})
	p.phaseDone()
	got := b.String()
	if strings.Count(got, "\r\033[K") != 3 || !strings.Contains(got, "decoded 1/3 files (3 MiB, 2000 entries)") ||
		strings.Contains(got, "decoded 2/3") || !strings.Contains(got, "decoded 3/3 files (0 KiB, 2.5M entries)") || !strings.HasSuffix(got, "\r\033[K") {
		t.Errorf("%q", got)
	}
}
