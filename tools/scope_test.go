package tools

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/internal/demojob"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/skills"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
	"github.com/probing-mcp/probing-mcp/watch"
)

// scopeSkill asks the same question three ways: the ranks in the rings
// (SQL), in the stacks and in the verdict (tool steps).
const scopeSkillMD = `---
name: scope_probe
description: Which ranks the SQL, the stacks and the verdict see.
category: triage
---
# Scope probe
`

const scopeSkillSteps = `apiVersion: probing.dev/v1
kind: Skill
metadata:
  id: scope_probe
  title: Scope probe
  category: triage
spec:
  steps:
    - id: ring_ranks
      title: Ranks in the rings
      sql: SELECT DISTINCT _rank AS rank FROM python.comm_collective WHERE _rank >= 0 ORDER BY 1
    - id: stacks
      title: Stacks
      type: tool
      tool: get_stacks
    - id: verdict
      title: Verdict
      type: tool
      tool: diagnose_hang
      args:
        detail: ranks
`

// TestSkillSeesItsScope: a skill's SQL, stacks and verdict see the same
// ranks. The torch-free demo job runs split over two simulated nodes,
// each with a real node daemon; run in the whole-job scope, the skill's
// SQL step queries both nodes (cluster_meta says 2) and all three steps
// see ranks 0-3; run in the first node's scope, all three see its ranks
// 0-1. Before the one scope, the whole-job SQL saw one node's ranks.
func TestSkillSeesItsScope(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3: the demo job needs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	job, err := demojob.Start(ctx, demojob.Options{Torch: "no", Python: "python3", Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Stop()
	if err := job.WaitHung(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "scope_probe"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"SKILL.md": scopeSkillMD, "steps.yaml": scopeSkillSteps} {
		if err := os.WriteFile(filepath.Join(dir, "scope_probe", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	load := func() (*skills.Catalog, []skills.Problem) {
		return skills.Load([]skills.Root{{Label: "env", Path: dir}})
	}

	var members []cluster.Node
	var nodeEnvs []*Env
	for i, nd := range job.NodeDirs {
		e, err := sqlengine.New(sqlengine.Options{DataDir: nd.DataDir, Host: nd.Host})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		self := cluster.Node{Host: nd.Host, Addr: ln.Addr().String(), NodeRank: i, Kind: cluster.KindDaemon, Source: "peers"}
		ag := agent.Options{DataDir: nd.DataDir, CtrlRoot: nd.CtrlRoot}
		srv := &http.Server{Handler: node.Handler(node.Config{Source: &node.Local{Self: self, Agents: ag, SQL: e, Version: "test"}})}
		go srv.Serve(ln)
		defer srv.Close()
		members = append(members, self)
		nodeEnvs = append(nodeEnvs, &Env{Agents: ag, SQL: e, Skills: load})
	}
	j := fanout.NewJob(func(context.Context) ([]cluster.Node, []string, error) { return members, nil, nil },
		fanout.NewClient("", 4), fanout.Options{Concurrency: 4, PeerTimeout: 60 * time.Second, Deadline: 90 * time.Second})
	whole := &Env{Cluster: j, SQL: nodeEnvs[0].SQL, Skills: load}

	// Probing's global. names every node's table; the docs are the
	// coordinator's own, said so.
	res, err := whole.scope().Query(ctx, "SELECT count(DISTINCT _rank) AS n FROM global.python.comm_collective", 0)
	if err != nil || len(res.Rows) != 1 || res.Rows[0].Values()[0] != int64(4) || res.DataQuality.NodesAsked != 2 {
		t.Fatalf("global.: %+v %v", res, err)
	}
	// The watcher over the whole job: its pulse reads both daemons (no rank
	// asked), and the hang is captured, then confirmed with the culprit,
	// rank 2 on the second node.
	pb, cov, err := whole.scope().Pulse(ctx)
	if err != nil || len(pb.Ranks) != 4 || cov == nil || cov.Answered != 2 {
		t.Fatalf("whole-job pulse: %v, %d ranks, coverage %+v", err, len(pb.Ranks), cov)
	}
	for r, re := range pb.Ranks {
		if len(re.Threads) > 0 || re.Activity == nil {
			t.Errorf("pulse rank %d: %d threads, activity %v", r, len(re.Threads), re.Activity != nil)
		}
	}
	var evs []watch.Event
	w, err := watch.New(watch.Options{Scope: whole.scope(), State: diagnosis.StateOptions{MinStall: time.Second},
		Interval: 200 * time.Millisecond, Notify: func(e watch.Event) { evs = append(evs, e) }})
	if err != nil {
		t.Fatal(err)
	}
	for len(evs) < 2 && ctx.Err() == nil {
		w.Tick(ctx)
		time.Sleep(200 * time.Millisecond)
	}
	if len(evs) < 2 || evs[0].Kind != watch.KindCaptured || evs[1].Kind != watch.KindStalled || evs[1].Headline().Culprits != "2" {
		t.Fatalf("whole-job watch: %+v", evs)
	}
	res, err = whole.scope().Query(ctx, "SELECT count(*) AS n FROM probing.table_docs", 0)
	if err != nil || len(res.Rows) != 1 || !strings.Contains(strings.Join(res.DataQuality.Notes, ";"), "coordinator's own engine") {
		t.Fatalf("table_docs in the whole job: %+v %v", res, err)
	}

	for _, c := range []struct {
		name  string
		env   *Env
		ranks string
		nodes int
	}{{"whole job", whole, "0-3", 2}, {"node 0", nodeEnvs[0], "0-1", 0}} {
		t.Run(c.name, func(t *testing.T) {
			r, err := RunSkill(ctx, c.env, "scope_probe", nil)
			if err != nil {
				t.Fatal(err)
			}
			steps := map[string]skills.StepResult{}
			for _, s := range r.Steps {
				steps[s.StepID] = s
			}
			sqlStep := steps["ring_ranks"]
			var sqlRanks []int
			for _, row := range sqlStep.Rows {
				b, _ := json.Marshal(row)
				var v struct{ Rank int }
				if err := json.Unmarshal(b, &v); err != nil {
					t.Fatalf("row %s: %v", b, err)
				}
				sqlRanks = append(sqlRanks, v.Rank)
			}
			sort.Ints(sqlRanks)
			if got := rankset.Format(sqlRanks); got != c.ranks {
				t.Errorf("the SQL step sees ranks %q, want %q (%+v)", got, c.ranks, sqlStep)
			}
			if got := 0; sqlStep.ClusterMeta != nil {
				if got = sqlStep.ClusterMeta.NodesQueried; got != c.nodes {
					t.Errorf("the SQL step queried %d node(s), want %d", got, c.nodes)
				}
			} else if c.nodes != 0 {
				t.Errorf("the SQL step has no cluster_meta; want %d nodes queried", c.nodes)
			}
			var st struct {
				Ranks string `json:"ranks"`
			}
			if err := json.Unmarshal([]byte(steps["stacks"].Text), &st); err != nil || st.Ranks != c.ranks {
				t.Errorf("the stacks step sees ranks %q (%v), want %q: %.300s", st.Ranks, err, c.ranks, steps["stacks"].Text)
			}
			var vd struct {
				Rows []struct {
					Rank int `json:"rank"`
				} `json:"rank_rows"`
			}
			if err := json.Unmarshal([]byte(steps["verdict"].Text), &vd); err != nil {
				t.Fatalf("verdict: %v: %.300s", err, steps["verdict"].Text)
			}
			var vr []int
			for _, row := range vd.Rows {
				vr = append(vr, row.Rank)
			}
			sort.Ints(vr)
			if got := rankset.Format(vr); got != c.ranks {
				t.Errorf("the verdict sees ranks %q, want %q", got, c.ranks)
			}
		})
	}
}

// TestNoToolBranchesOnScope: the tools read the job through Env.scope()
// only. Env.Cluster is read where the registry adds the whole-job-only
// tools and where list_cluster_nodes lists the nodes, nowhere else: a
// tool that branched on it would see another job than the skills do.
func TestNoToolBranchesOnScope(t *testing.T) {
	allowed := map[string]bool{"All": true, "scope": true, "listClusterNodes": true}
	fset := gotoken.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || allowed[fn.Name.Name] {
				continue
			}
			ast.Inspect(fn, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Cluster" && isEnv(sel.X) {
					t.Errorf("%s: %s reads Env.Cluster: read the evidence through env.scope()", fset.Position(sel.Pos()), fn.Name.Name)
				}
				return true
			})
		}
	}
}

// isEnv is whether x names an *Env: env, or a receiver's env field.
func isEnv(x ast.Expr) bool {
	switch v := x.(type) {
	case *ast.Ident:
		return v.Name == "env"
	case *ast.SelectorExpr:
		return v.Sel.Name == "env"
	}
	return false
}
