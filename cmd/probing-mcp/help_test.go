package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// helpCommands are every command and subcommand, as typed.
var helpCommands = [][]string{
	{"serve"}, {"node"}, {"diagnose"}, {"watch"}, {"analyze"}, {"query"}, {"export"}, {"gpu"},
	{"agent", "install"}, {"agent", "uninstall"}, {"demo"},
	{"skill", "list"}, {"skill", "plan"}, {"skill", "run"}, {"skill", "validate"}, {"skill", "install"},
	{"version"},
}

// TestEveryCommandHasHelp: COMMAND --help, -h and `help COMMAND` print the
// command's own usage, flags and examples on stdout and exit 0; nothing of
// the flag package's "Usage of serve:".
func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range helpCommands {
		name := strings.Join(c, " ")
		for _, args := range [][]string{
			append(append([]string(nil), c...), "--help"),
			append(append([]string(nil), c...), "-h"),
			append([]string{"help"}, c...),
		} {
			code, out, errOut := runCLI(args...)
			if code != 0 || errOut != "" {
				t.Errorf("%v: exit %d, stderr %q; want 0 and usage on stdout", args, code, errOut)
				continue
			}
			for _, want := range []string{"Usage: probing-mcp " + name + " ", "Examples:\n  ", "Flags"} {
				if !strings.Contains(out, want) {
					t.Errorf("%v: stdout lacks %q:\n%s", args, want, out)
				}
			}
			if strings.Contains(out, "Usage of ") {
				t.Errorf("%v: the flag package's default usage:\n%s", args, out)
			}
			// Every example runs this command.
			ex := out[strings.Index(out, "Examples:"):]
			if !strings.Contains(ex, "probing-mcp "+name) && !strings.Contains(ex, "probing-mcp --"+name) {
				t.Errorf("%v: no example of probing-mcp %s:\n%s", args, name, ex)
			}
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"agent", "--help"}, {"skill", "--help"}, {"help", "skill"}} {
		code, out, errOut := runCLI(args...)
		if code != 0 || errOut != "" || !strings.Contains(out, "Usage") || !strings.Contains(out, "Examples:") && len(args) > 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	if _, out, _ := runCLI("--help"); !strings.Contains(out, "probing-mcp demo") || !strings.Contains(out, "probing-mcp skill") {
		t.Errorf("top-level help lacks the commands:\n%s", out)
	}
}

// TestBadFlags: a wrong flag exits 2 on stderr with the fix (the flag
// meant) and the command's usage; a wrong value of a switch is refused at
// start naming the valid ones.
func TestBadFlags(t *testing.T) {
	t.Setenv("PROBING_DATA_DIR", t.TempDir())
	t.Setenv("PROBING_MCP_HISTORY", "off")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"analyze", "x", "--jsn"}, []string{"flag provided but not defined: -jsn", "did you mean --json?", "Usage: probing-mcp analyze"}},
		{[]string{"serve", "--htp", ":1"}, []string{"did you mean --http?", "Usage: probing-mcp serve"}},
		{[]string{"query", "--limt", "3", "SELECT 1"}, []string{"did you mean --limit?"}},
		{[]string{"version", "--x"}, []string{"takes no flags"}},
		{[]string{"skill", "list", "--agent", "claude"}, []string{"(the flags are --json)", "Usage: probing-mcp skill list"}},
		{[]string{"demo", "--torch", "maybe"}, []string{`--torch "maybe": want one of auto, yes, no`}},
		{[]string{"demo", "--ranks", "1"}, []string{"want 2 to 64"}},
		{[]string{"skill", "install", "--agent", "claud"}, []string{`--agent "claud": want one of claude, cursor, codex`}},
		{[]string{"skill", "install"}, []string{"pass --agent claude|cursor|codex"}},
		{[]string{"skill", "frob"}, []string{"want list, plan, run, validate or install"}},
		{[]string{"agent", "frob"}, []string{"want install or uninstall"}},
	} {
		code, out, errOut := runCLI(c.args...)
		if code != 2 || out != "" {
			t.Errorf("%v: exit %d, stdout %q; want 2 and nothing on stdout", c.args, code, out)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr lacks %q:\n%s", c.args, w, errOut)
			}
		}
	}
}

// TestAnalyzeRankMapping: a dump whose name does not end in its rank is
// reported with the flag that maps it; --rank FILE=N maps it; a --rank
// naming no file given is refused rather than ignored.
func TestAnalyzeRankMapping(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("../../testdata/fr/real/missing_rank/nccl_trace_rank_0")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "host-a.pkl")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("analyze", f)
	if !strings.Contains(out+errOut, "pass --rank FILE=N for each such file") {
		t.Errorf("unmapped: exit %d, no --rank hint:\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runCLI("analyze", f, "--rank", f+"=0", "--json")
	if code != 0 || !strings.Contains(out, `"rank": 0`) || strings.Contains(out, "cannot tell the rank") {
		t.Errorf("mapped: exit %d\n%s\n%s", code, out, errOut)
	}
	code, _, errOut = runCLI("analyze", f, "--rank", filepath.Join(dir, "other.pkl")+"=1")
	if code != 2 || !strings.Contains(errOut, "no such file among the PATHs given") {
		t.Errorf("a --rank for no file: exit %d %q", code, errOut)
	}
}

// TestRepoPathsFromElsewhere: the README's testdata/ paths, run from
// another directory or from /, name the fix instead of "no files found".
func TestRepoPathsFromElsewhere(t *testing.T) {
	for _, dir := range []string{t.TempDir(), "/"} {
		t.Chdir(dir)
		code, out, errOut := runCLI("analyze", "testdata/fr/real/missing_rank")
		if code != 1 || out != "" || !strings.Contains(errOut, "relative paths are read from the working directory, "+dir) ||
			!strings.Contains(errOut, "run from the repository's root, or pass its absolute path") {
			t.Errorf("from %s: exit %d, stdout %q, stderr %q", dir, code, out, errOut)
		}
	}
}

// TestDemoFlightRecorderPointer: the demo's pointer at the shipped dumps
// holds from any directory: absolute when the checkout is found (from the
// working directory or the source this binary was built from), else it
// says where the relative path holds.
func TestDemoFlightRecorderPointer(t *testing.T) {
	repo := findRepo()
	if repo == "" {
		t.Fatal("the checkout holding testdata/fr/real/missing_rank was not found")
	}
	for _, dir := range []string{t.TempDir(), "/"} {
		t.Chdir(dir)
		got := frDumpsCommand("probing-mcp", findRepo())
		want := "probing-mcp analyze " + filepath.Join(repo, frDumps)
		if got != want {
			t.Errorf("from %s: %q, want %q", dir, got, want)
		}
		if code, out, errOut := runCLI(strings.Fields(got)[1:]...); code != 0 || !strings.Contains(out, "Verdict MISSING_RANKS") {
			t.Errorf("from %s: %s: exit %d %s", dir, got, code, errOut)
		}
	}
	if got := frDumpsCommand("probing-mcp", ""); !strings.Contains(got, "run from the root of a probing-mcp checkout") {
		t.Errorf("no checkout: %q", got)
	}
}

// TestDemoCLIUnderGoRun: this test binary lives in a go-build directory,
// as go run's does. Kept running, the demo's MCP config names a copy in
// the demo's directory (it exists while the demo runs); with --exit it
// names go run itself, which lasts.
func TestDemoCLIUnderGoRun(t *testing.T) {
	exe, _ := os.Executable()
	if !goRunBinary(exe) {
		t.Skipf("the test binary %s is not in a go-build directory", exe)
	}
	dir := t.TempDir()
	c := cliFor(false, dir, findRepo())
	if c.err != nil || !c.copied || c.run != filepath.Join(dir, "probing-mcp") {
		t.Fatalf("%+v", c)
	}
	if fi, err := os.Stat(c.run); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("the copy %s: %v %v", c.run, fi, err)
	}
	if c := cliFor(true, t.TempDir(), findRepo()); c.copied || !strings.HasPrefix(c.run, "go run ") || c.lasting != c.run {
		t.Errorf("--exit: %+v", c)
	}
}
