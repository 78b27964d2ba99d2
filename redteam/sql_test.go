package redteam

import (
	"net/http"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/cluster/fedsql"
	"github.com/probing-mcp/probing-mcp/cluster/node"
)

// TestClusterQueryPrintfWidth. Attack: cluster_query (and query in the
// whole job's scope) with a printf width that builds a 1 GB string in the
// coordinator's in-memory copy of the nodes' rows. Before (b2aa69a): the
// coordinator's SQL lacked the engine's bounds, and built the 1 GB string
// in 5 s. Bound: refused with the engine's value-length guard and the fix;
// an ordinary statement still answers; under 512 MB, each call within
// 40 s. (The instr that held a slot past its 504 is the other branch's:
// see pending_test.go.)
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
