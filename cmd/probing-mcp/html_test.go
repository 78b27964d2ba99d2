package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/demojob"
)

// TestAnalyzeHTML: `analyze --html FILE` on a real gloo dump set writes
// the page (the culprit node highlighted) and prints the same text as
// without the flag; a FILE that is a symbolic link is refused.
func TestAnalyzeHTML(t *testing.T) {
	const dumps = "../../testdata/fr/real/subgroup_missing"
	code, plain, errOut := runCLI("analyze", dumps)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	page := filepath.Join(t.TempDir(), "hang.html")
	code, out, errOut := runCLI("analyze", dumps, "--html", page)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if out != plain {
		t.Errorf("--html changed the text answer:\n%s\nwant:\n%s", out, plain)
	}
	if !strings.Contains(errOut, "page written to "+page) {
		t.Errorf("stderr does not say where the page is: %q", errOut)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`class="node culprit"`, ">rank 2<", "Flight Recorder analysis"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	link := filepath.Join(t.TempDir(), "link.html")
	if err := os.Symlink(filepath.Join(t.TempDir(), "elsewhere.html"), link); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI("analyze", dumps, "--html", link); code != 1 || !strings.Contains(errOut, "symbolic link") {
		t.Errorf("--html to a symlink: exit %d %q, want 1 and the refusal", code, errOut)
	}
}

// TestDiagnoseHTML: `diagnose --html FILE` on the demo's hung job (real
// ranks, a real hang) writes the page naming rank 2 as the culprit with
// its line of code.
func TestDiagnoseHTML(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3: the demo job needs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	job, err := demojob.Start(ctx, demojob.Options{Torch: "no", Python: "python3"})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Stop()
	if err := job.WaitHung(ctx, 0); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PROBING_DATA_DIR", job.DataDir)
	t.Setenv("PROBING_CTRL_ROOT", job.CtrlRoot)
	t.Setenv("PROBING_MCP_HISTORY", "off")
	page := filepath.Join(t.TempDir(), "hang.html")
	var b []byte
	// The stall must pass its threshold: diagnose until it says so. Just
	// past the hang step, rank 2's slow loader can read as a 1 s stall
	// for a moment and then as a straggler again: only a stalled state
	// is the hang.
	for {
		code, out, errOut := runCLI("diagnose", "--stall-seconds", "1", "--html", page)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if strings.Contains(out, "rank 2 is the culprit") && strings.Contains(out, "State: stalled") {
			if b, err = os.ReadFile(page); err != nil {
				t.Fatal(err)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no verdict on rank 2 before the deadline:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond) // a poll, not evidence
	}
	for _, want := range []string{`class="node culprit"`, ">rank 2<", "socket_rank.py:67 (fake_data_loader)", `class="op inside stuck"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("page lacks %q", want)
		}
	}
}
