package redteam

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster/fedsql"
	"github.com/probing-mcp/probing-mcp/cluster/node"
)

// TestClusterQueryPrintfWidth. Attack: cluster_query (and query in the
// whole job's scope) with a printf width that builds a 1 GB string in the
// coordinator's in-memory copy of the nodes' rows. Before (b2aa69a): the
// coordinator's SQL lacked the engine's bounds, and built the 1 GB string
// in 5 s. Bound: refused with the engine's value-length guard and the fix;
// an ordinary statement still answers; under 512 MB, each call within
// 40 s. (The instr that held a slot past its 504 is
// TestClusterQueryInstrSlot.)
func TestClusterQueryPrintfWidth(t *testing.T) {
	n := newFakeNode(t, "node-a", 0, []int{0, 1}, map[string]http.HandlerFunc{
		node.PathTables: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, []fedsql.Table{{Schema: "python", Name: "comm_collective", Columns: []fedsql.Column{{Name: "rank", Type: "INTEGER"}}}})
		},
		node.PathScan: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, fedsql.ScanReply{Columns: []string{"rank"}, Rows: [][]any{{0}, {1}}})
		},
	})
	c := serveStdio(t, env(t, t.TempDir()), "--peers", n.node.Addr)
	for _, tool := range []string{"cluster_query", "query"} {
		r := c.call(tool, map[string]any{"sql": "SELECT printf('%.*c', 1000000000, 'x') AS s FROM python.comm_collective LIMIT 1"}, fanoutTime)
		if !r.IsError {
			t.Errorf("%s built the string: %.300s", tool, r.Text)
		}
		mustContain(t, tool, r.Text, "longer than 4 MiB, the engine's value-length guard", "PROBING_MCP_QUERY_MAX_VALUE")
		said(t, r.Text, "value-length guard")
		ok := c.call(tool, map[string]any{"sql": "SELECT rank, count(*) AS n FROM python.comm_collective GROUP BY rank ORDER BY rank"}, fanoutTime)
		if ok.IsError || !strings.Contains(ok.Text, "2 rows.") {
			t.Errorf("%s: an ordinary statement after it: %.500s", tool, ok.Text)
		}
		bounded(t, "printf width of 1 GB in "+tool, c.p, r.Took, fanoutTime)
	}
	c.close()
	bounded(t, "printf width of 1 GB: the coordinator's whole run", c.p, c.p.took, 4*fanoutTime+startTime)
}

// TestClusterQueryInstrSlot. Attack: cluster_query with an instr over
// large values a node's scan sends (a 4 MB haystack and a 2 MB needle
// that almost matches), the coordinator's query slots set to one and its
// deadline to 2 s: issue 23's statement, then one that repeats the instr
// without end. Before (b2aa69a): the instr ran 166 s against a 10 s
// deadline and kept its slot after the 504, so every later query waited
// for it. Bound: the endless statement is stopped at the deadline with a
// timeout naming it (PROBING_STACK_FANOUT_DEADLINE_SEC); issue 23's
// statement answers (instr is linear now) or is stopped the same way; an
// ordinary cluster_query right after each answers (the slot was freed);
// under 512 MB, each call within 40 s.
func TestClusterQueryInstrSlot(t *testing.T) {
	const n = 4_000_000
	rows := []map[string]any{{"k": 1, "s": strings.Repeat("a", n)}, {"k": 2, "s": strings.Repeat("a", n/2) + "b"}}
	fake := newFakeNode(t, "node-a", 0, []int{0, 1}, map[string]http.HandlerFunc{
		node.PathTables: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, []fedsql.Table{{Schema: "python", Name: "t", Columns: []fedsql.Column{{Name: "k", Type: "INTEGER"}, {Name: "s", Type: "TEXT"}}}})
		},
		node.PathScan: func(w http.ResponseWriter, r *http.Request) {
			var req fedsql.ScanRequest
			json.NewDecoder(r.Body).Decode(&req)
			rep := fedsql.ScanReply{Columns: req.Columns, Rows: [][]any{}}
			for _, row := range rows {
				var out []any
				for _, c := range req.Columns {
					out = append(out, row[c])
				}
				rep.Rows = append(rep.Rows, out)
			}
			writeJSON(w, rep)
		},
	})
	c := serveStdio(t, env(t, t.TempDir(), "PROBING_STACK_FANOUT_DEADLINE_SEC=2", "PROBING_MCP_QUERY_CONCURRENCY=1"), "--peers", fake.node.Addr)
	const pair = "FROM python.t a, python.t b WHERE a.k = 1 AND b.k = 2"
	timeout := "the cluster query stopped at its time limit of " // 2s, less what was spent before the query began
	var slowest time.Duration
	for _, a := range []struct {
		name, sql string
		endless   bool
	}{
		{"issue 23's instr", "SELECT instr(a.s, b.s) AS i " + pair, false},
		{"endless instr", "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c) SELECT sum(instr(a.s, b.s) + i) AS x FROM c, python.t a, python.t b WHERE a.k = 1 AND b.k = 2", true},
	} {
		r := c.call("cluster_query", map[string]any{"sql": a.sql}, fanoutTime)
		slowest = max(slowest, r.Took)
		t.Logf("%s: %.2f s", a.name, r.Took.Seconds())
		switch {
		case r.IsError:
			mustContain(t, a.name, r.Text, timeout, "PROBING_STACK_FANOUT_DEADLINE_SEC")
			said(t, r.Text, "time limit")
		case a.endless:
			t.Errorf("%s answered: %.500s", a.name, r.Text)
		default:
			mustContain(t, a.name, r.Text, "1 rows.", "\ni\n0\n")
		}
		ok := c.call("cluster_query", map[string]any{"sql": "SELECT k FROM python.t ORDER BY k"}, fanoutTime)
		slowest = max(slowest, ok.Took)
		if ok.IsError || !strings.Contains(ok.Text, "2 rows.") {
			t.Errorf("an ordinary cluster_query after the %s: %.500s", a.name, ok.Text)
		}
		bounded(t, "cluster_query "+a.name+" over 4 MB values", c.p, r.Took, fanoutTime)
	}
	c.close()
	bounded(t, "cluster_query instr: the coordinator's whole run", c.p, slowest, fanoutTime)
}
