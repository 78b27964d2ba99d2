package tools

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// skipTPEnv is the SQL engine over what a real hung 8-rank gloo job left
// on disk (rank 3 skipped its pair's all_reduce).
func skipTPEnv(t *testing.T) *Env {
	t.Helper()
	dir := "../testdata/jobs/real/skip_tp"
	e, err := sqlengine.New(sqlengine.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return &Env{SQL: e, Agents: agent.Options{DataDir: dir, CtrlRoot: t.TempDir()}, Skills: DefaultSkills}
}

func callTool(t *testing.T, env *Env, name string, args map[string]any) any {
	t.Helper()
	for _, d := range All(env) {
		if d.Tool.Name == name {
			r, err := d.Call(context.Background(), args)
			if err != nil {
				t.Fatalf("%s %v: %v", name, args, err)
			}
			return r
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

// TestQueryText: the rows as a pipe table with the column names once, the
// count first; a result cut by limit says so and how to get the rest;
// the dead job's rings are said after the rows.
func TestQueryText(t *testing.T) {
	env := skipTPEnv(t)
	r := callTool(t, env, "query", map[string]any{"sql": "SELECT _rank, op, count(*) AS n, max(group_seq) AS last_seq FROM python.comm_collective GROUP BY _rank, op ORDER BY _rank"})
	res := r.(queryAnswer)
	_, textLen := sizes(t, "query (group by)", res)
	text := res.ModelText()
	lines := strings.Split(text, "\n")
	if lines[0] != "8 rows." || lines[1] != "_rank | op | n | last_seq" || !strings.HasPrefix(lines[2], "0 | ⟦all_reduce⟧ | ") {
		t.Errorf("text:\n%s", text)
	}
	if !strings.Contains(text, "note: read rings of exited processes (pids ") || textLen > 2048 {
		t.Errorf("text %d bytes:\n%s", textLen, text)
	}

	r = callTool(t, env, "query", map[string]any{"sql": "SELECT * FROM python.comm_collective", "limit": 5})
	res = r.(queryAnswer)
	sizes(t, "query (select *, limit 5)", res)
	text = res.ModelText()
	if !res.Truncated || !strings.HasPrefix(text, "5 rows of ") || !strings.Contains(text, "truncated at limit: pass limit up to 1000") {
		t.Errorf("cut not said:\n%s", text)
	}
	if n := strings.Count(text, "\n"); n < 7 {
		t.Errorf("want the 5 rows:\n%s", text)
	}

	// Every row and column of the table: the text stays within its
	// table budget and says where it cut.
	r = callTool(t, env, "query", map[string]any{"sql": "SELECT * FROM python.comm_collective"})
	res = r.(queryAnswer)
	jsonLen, textLen := sizes(t, "query (select *, all 110 rows)", res)
	text = res.ModelText()
	if textLen > maxTextTable+2048 || textLen >= jsonLen {
		t.Errorf("text %d bytes, JSON %d", textLen, jsonLen)
	}
	if len(res.Rows) > 0 && textLen > maxTextTable && !strings.Contains(text, "… text cut after ") || !strings.Contains(text, " OFFSET ") {
		t.Errorf("cut not said:\n%s", text[len(text)-400:])
	}
}

// TestClusterQueryText: the whole job's SQL, one node answering over a
// real hung job's rings and one dead: the rows, then the node that did
// not answer said after them.
func TestClusterQueryText(t *testing.T) {
	e := skipTPEnv(t).SQL
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	self := cluster.Node{Host: "node0", Addr: ln.Addr().String(), NodeRank: 0, Ranks: "0-7", Kind: cluster.KindDaemon, Source: "peers"}
	srv := &http.Server{Handler: node.Handler(node.Config{Source: &node.Local{Self: self, SQL: e}})}
	go srv.Serve(ln)
	defer srv.Close()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := cluster.Node{Host: "node1", Addr: dead.Addr().String(), NodeRank: 1, Ranks: "8-15", Kind: cluster.KindDaemon, Source: "peers"}
	dead.Close()
	j := fanout.NewJob(func(context.Context) ([]cluster.Node, []string, error) { return []cluster.Node{self, gone}, nil, nil },
		fanout.NewClient("", 2), fanout.Options{Concurrency: 2, PeerTimeout: 30 * time.Second, Deadline: 60 * time.Second})
	env := &Env{Cluster: j, SQL: e}
	res := callTool(t, env, "cluster_query", map[string]any{"sql": "SELECT _node_rank, _rank, count(*) AS n FROM python.comm_collective GROUP BY _node_rank, _rank ORDER BY _rank"}).(queryAnswer)
	_, textLen := sizes(t, "cluster_query (1 of 2 nodes)", res)
	text := res.ModelText()
	lines := strings.Split(text, "\n")
	if lines[0] != "8 rows." || lines[1] != "_node_rank | _rank | n" || !strings.HasPrefix(lines[2], "0 | 0 | ") {
		t.Errorf("text:\n%s", text)
	}
	if !strings.Contains(text, "note: 1/2 node(s) answered") || !strings.Contains(text, "did not answer: "+gone.Addr) || textLen > 2048 {
		t.Errorf("the dead node is not said, or the text is %d bytes:\n%s", textLen, text)
	}
}
