package tools

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// TestDescribeTablesText: without a table, one short line a readable
// table (rows, what a row is) and the other documented tables by name,
// within a few thousand characters; with a table, its columns.
func TestDescribeTablesText(t *testing.T) {
	env := skipTPEnv(t)
	res := callTool(t, env, "describe_tables", map[string]any{}).(describeAnswer)
	jsonLen, textLen := sizes(t, "describe_tables", res)
	text := res.ModelText()
	lines := strings.Split(text, "\n")
	if !strings.HasPrefix(lines[1], "python.comm_collective: 110 rows from 8 process(es); One row per torch.distributed collective call") ||
		!strings.Contains(text, "No rows on this node (documented; no process here recorded them, so a query says no such table): cpu.tasks,") ||
		!strings.Contains(text, "Only a live agent computes (no query here reads them): process.kmsg, python.backtrace, rdma.mlx_hca.") ||
		strings.Contains(text, "timestamp I64") || textLen > 3000 || jsonLen > 4000 {
		t.Errorf("text %d bytes, JSON %d:\n%s", textLen, jsonLen, text)
	}
	// A page says where the next one starts.
	res = callTool(t, env, "describe_tables", map[string]any{"limit": 2}).(describeAnswer)
	if text := res.ModelText(); res.NextOffset == nil || *res.NextOffset != 2 || !strings.Contains(text, "listed 1-2 (more: call again with offset=2)") {
		t.Errorf("page:\n%s", text)
	}
	res = callTool(t, env, "describe_tables", map[string]any{"table": "python.comm_collective"}).(describeAnswer)
	sizes(t, "describe_tables (one table)", res)
	text = res.ModelText()
	if !strings.HasPrefix(text, "python.comm_collective: 110 rows on this node from 8 process(es).\n") || !strings.Contains(text, "Columns (") ||
		!strings.Contains(text, "\n  group_seq ") {
		t.Errorf("text:\n%s", text)
	}
}

// TestDescribeTablesAgreesWithQuery: every table describe_tables lists as
// readable can be queried, and every documented table it says has no rows
// here (or only a live agent computes) is refused by query in words that
// say so, not as a typo: the listing and the engine agree.
func TestDescribeTablesAgreesWithQuery(t *testing.T) {
	dir := "../testdata/jobs/real/skip_tp"
	hpath := filepath.Join(t.TempDir(), "history.db")
	h, err := history.Open(hpath, history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	for name, hp := range map[string]string{"without history": "", "with history": hpath} {
		e, err := sqlengine.New(sqlengine.Options{DataDir: dir, HistoryPath: hp})
		if err != nil {
			t.Fatal(err)
		}
		env := &Env{SQL: e}
		res := callTool(t, env, "describe_tables", map[string]any{"limit": 1000}).(describeAnswer)
		var listed []string
		for _, row := range res.Tables.Rows {
			v, _ := row.Get("table")
			listed = append(listed, v.(string))
		}
		if len(listed) < 5 || len(res.NoRows) < 10 || len(res.LiveOnly) != 3 {
			t.Fatalf("%s: listed %v, no rows %v, live only %v", name, listed, res.NoRows, res.LiveOnly)
		}
		if hist := strings.Contains(strings.Join(listed, ","), "history.diagnoses"); hist != (hp != "") {
			t.Errorf("%s: history.diagnoses listed: %v", name, hist)
		}
		for _, tbl := range listed {
			if _, err := e.Query(context.Background(), "SELECT * FROM "+tbl+" LIMIT 1", 1); err != nil {
				t.Errorf("%s: describe_tables lists %s, but query says: %v", name, tbl, err)
			}
		}
		for _, c := range []struct {
			tables []string
			says   string
		}{{res.NoRows, "is documented but has no rows on this node"}, {res.LiveOnly, "is documented but virtual: only a live agent computes it"}} {
			for _, tbl := range c.tables {
				_, err := callToolErr(env, "query", map[string]any{"sql": "SELECT * FROM " + tbl})
				if err == nil || !strings.Contains(err.Error(), tbl+" "+c.says) {
					t.Errorf("%s: %s: query says %v, want %q", name, tbl, err, c.says)
				}
			}
		}
	}
}

// callToolErr is callTool for a call expected to fail.
func callToolErr(env *Env, name string, args map[string]any) (any, error) {
	for _, d := range All(env) {
		if d.Tool.Name == name {
			return d.Call(context.Background(), args)
		}
	}
	return nil, nil
}
