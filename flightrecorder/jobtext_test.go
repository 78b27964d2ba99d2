package flightrecorder

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/internal/jobtext/jobtexttest"
)

// TestTextQuotesDumpText: issue 23. A dump's group name and description,
// thread and frames are the job's text, and so is a dump file's name: the
// text quotes them, the tools' and the terminal's, verbose or not, the
// NoMatch line names the groups quoted, and a file problem says its path
// once, quoted (an os error's copy of it is "the file").
func TestTextQuotesDumpText(t *testing.T) {
	dir := t.TempDir()
	jobtexttest.WriteFRDumps(t, dir)
	ld, err := LoadContext(context.Background(), []string{dir}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep := Analyze(ld.Dumps, Options{})
	for _, o := range []ViewOptions{{}, {Full: true}, TerminalView(false), TerminalView(true)} {
		jobtexttest.Check(t, fmt.Sprintf("analyze %+v", o), rep.View(o).Text(), 16<<10)
	}
	jobtexttest.Check(t, "summary", rep.Summary, 2<<10)
	if rep := Analyze(ld.Dumps, Options{PG: "nosuch"}); rep.NoMatch == "" {
		t.Error("no NoMatch")
	} else {
		jobtexttest.Check(t, "no match", rep.NoMatch, 2<<10)
	}
	h := jobtexttest.Hostile()
	fp := FileProblem{Path: "/tmp/" + h, Problem: "unreadable: open /tmp/" + h + ": permission denied"}
	if got := fp.Text(); !strings.HasSuffix(got, ": unreadable: open the file: permission denied") {
		t.Errorf("%.300s", got)
	}
	jobtexttest.CheckSafe(t, "file problem", fp.Text(), 1<<10)
}
