package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
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

// TestAnalyzeHostileSharedLists: issue 23's 7.9 MB dump (16 groups sharing
// one memoised list of a million ranks) took the binary 33 s and 3.8 GB
// and wrote 134 MB of text; --max-memory 1GiB did not stop it. Now it is
// refused by the membership ceiling; with the ceiling raised it is
// answered in bounded text and JSON; and a ceiling the work passes stops
// it with the ceiling named. Every run stays under 512 MB, as GNU time
// measures it where there is one (the rusage of a child exec'd from this
// process's vfork starts at this process's peak; time forks its own).
func TestAnalyzeHostileSharedLists(t *testing.T) {
	bin := buildBinary(t)
	gnuTime := "/usr/bin/time"
	if b, err := exec.Command(gnuTime, "-f", "%M", "true").CombinedOutput(); err != nil || strings.TrimSpace(string(b)) == "" {
		gnuTime = ""
	}
	dir := t.TempDir()
	data := frsynth.SharedGroups(frsynth.SharedSpec{Ranks: 1_000_000, Groups: 16})
	if err := os.WriteFile(filepath.Join(dir, "nccl_trace_rank_0"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	raised := fr.EnvMaxMemberships + "=33554432"
	for _, c := range []struct {
		name string
		env  []string
		args []string
		code int
		want string // in stdout (exit 0) or stderr
	}{
		{"default", nil, nil, 1, "16 groups name 16000000 members in all"},
		{"raised", []string{raised}, nil, 0, "no dump from ranks 1-999999"},
		{"raised/json", []string{raised}, []string{"--json"}, 0, `"truncated": true`},
		{"raised/ceiling", []string{raised}, []string{"--max-memory", "40MiB"}, 1, "over the memory ceiling of 40.0 MiB (as asked)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			argv := append([]string{bin, "analyze", dir}, c.args...)
			peakFile := filepath.Join(t.TempDir(), "peak")
			if gnuTime != "" {
				argv = append([]string{gnuTime, "-f", "%M", "-o", peakFile}, argv...)
			}
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), c.env...)
			var out, errOut strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errOut
			start := time.Now()
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			var peak int64 // KiB from GNU time; 0 without it
			if b, err := os.ReadFile(peakFile); err == nil && len(strings.Fields(string(b))) > 0 {
				words := strings.Fields(string(b)) // "Command exited with non-zero status 1" comes first
				peak, _ = strconv.ParseInt(words[len(words)-1], 10, 64)
				peak <<= 10
			}
			t.Logf("exit %d in %s, peak %d MiB, %d bytes out", code, time.Since(start).Round(time.Millisecond), peak>>20, out.Len())
			got := out.String()
			if code != 0 {
				got = errOut.String()
			}
			if code != c.code || !strings.Contains(got, c.want) {
				t.Errorf("exit %d, want %d with %q:\n%.2000s", code, c.code, c.want, got)
			}
			if peak > 512<<20 || out.Len() > 2<<20 {
				t.Errorf("peak %d MiB, %d bytes of output", peak>>20, out.Len())
			}
		})
	}
}
