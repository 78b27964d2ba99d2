package tools

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/internal/docgen"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

var update = flag.Bool("update", false, "rewrite the README's generated tool table from tools.All")

// everyTool is tools.All with every optional family on: SQL, skills, the
// whole job.
func everyTool() []Def {
	job := fanout.NewJob(func(context.Context) ([]cluster.Node, []string, error) { return nil, nil, nil },
		fanout.NewClient("", 1), fanout.Options{Concurrency: 1, PeerTimeout: time.Second, Deadline: time.Second})
	return All(&Env{SQL: &sqlengine.Engine{}, Skills: DefaultSkills, Cluster: job})
}

// toolTable renders the README's tool table: one row a tool, in the order
// of tools.All, its kind from Write and its text from Doc.
func toolTable(t *testing.T, defs []Def) string {
	var b strings.Builder
	b.WriteString("| Tool | Kind | What it does |\n|---|---|---|\n")
	for _, d := range defs {
		name := d.Tool.Name
		if d.Doc == "" || strings.ContainsAny(d.Doc, "|\n") {
			t.Errorf("tool %s: its Doc must be one README table cell (not empty, no | or newline): %q", name, d.Doc)
		}
		kind := "read"
		if d.Write {
			kind = "write"
		}
		b.WriteString("| `" + name + "` | " + kind + " | " + d.Doc + " |\n")
	}
	return b.String()
}

// TestREADMEToolTable: the README's tool table is the inventory's, so it
// cannot drift from what tools/list serves. To change a row, change the
// tool's Doc and run the command the failure names.
func TestREADMEToolTable(t *testing.T) {
	defs := everyTool()
	seen := map[string]bool{}
	for _, d := range defs {
		if seen[d.Tool.Name] {
			t.Fatalf("tool %s listed twice", d.Tool.Name)
		}
		seen[d.Tool.Name] = true
	}
	for _, w := range []string{"set_config", "eval_python"} {
		found := false
		for _, d := range defs {
			found = found || (d.Tool.Name == w && d.Write)
		}
		if !found {
			t.Errorf("%s is not in the inventory as a write tool", w)
		}
	}
	want := toolTable(t, defs)
	if err := docgen.Sync("../README.md", "tools", want, *update, "go test ./tools -run TestREADMEToolTable -update"); err != nil {
		t.Fatal(err)
	}
}
