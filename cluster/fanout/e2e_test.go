package fanout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
	"github.com/probing-mcp/probing-mcp/internal/demojob"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
	"github.com/probing-mcp/probing-mcp/tools"
)

const token = "e2e-secret"

// daemon is one node daemon of a test: a real HTTP server on its own
// loopback address (127.0.0.x) over a real node.Source.
type daemon struct {
	node cluster.Node
	srv  *http.Server
	ln   net.Listener
}

func startDaemon(t *testing.T, ip string, self cluster.Node, src node.Source, tok string) *daemon {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("cannot listen on %s (a loopback alias this system lacks?): %v", ip, err)
	}
	self.Addr, self.Kind = ln.Addr().String(), cluster.KindDaemon
	if l, ok := src.(*node.Local); ok {
		l.Self = self
	}
	d := &daemon{node: self, ln: ln, srv: &http.Server{Handler: node.Handler(node.Config{Source: src, Token: tok, Version: "test"})}}
	go d.srv.Serve(ln)
	t.Cleanup(func() { d.srv.Close() })
	return d
}

func staticMembers(ns ...cluster.Node) fanout.Members {
	return func(context.Context) ([]cluster.Node, []string, error) {
		return append([]cluster.Node(nil), ns...), nil, nil
	}
}

// TestWholeJobOnTwoNodes runs the torch-free demo job split over two
// simulated nodes (each its own data dir, control root and node host,
// a real daemon on its own 127.0.0.x address) and asks the whole job
// through the coordinator's fan-out: every rank's stacks, and the
// verdict, whose culprit (rank 2) is on the second node. Then the second
// daemon dies: its ranks become unreachable evidence, not a failure.
func TestWholeJobOnTwoNodes(t *testing.T) {
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
	var ds []*daemon
	for i, nd := range job.NodeDirs {
		e, err := sqlengine.New(sqlengine.Options{DataDir: nd.DataDir, Host: nd.Host})
		if err != nil {
			t.Fatal(err)
		}
		src := &node.Local{Agents: agent.Options{DataDir: nd.DataDir, CtrlRoot: nd.CtrlRoot}, SQL: e, Version: "test"}
		ds = append(ds, startDaemon(t, fmt.Sprintf("127.0.0.%d", i+2), cluster.Node{Host: nd.Host, NodeRank: i, Source: "peers"}, src, token))
	}
	j := fanout.NewJob(staticMembers(ds[0].node, ds[1].node), fanout.NewClient(token, 8),
		fanout.Options{Concurrency: 8, PeerTimeout: 30 * time.Second, Deadline: 60 * time.Second})

	ns, cov, err := j.Nodes(ctx)
	if err != nil || !cov.Complete() || len(ns) != 2 || ns[0].Live != "0-1" || ns[1].Live != "2-3" {
		t.Fatalf("nodes %+v, %s, %v", ns, cov.Text(), err)
	}
	procs, cov, err := j.Stacks(ctx, "")
	if err != nil || !cov.Complete() || len(procs) != 4 {
		t.Fatalf("stacks: %d processes, %s, %v", len(procs), cov.Text(), err)
	}
	m := stacks.Merge(procs, stacks.MergeOptions{})
	if m.Ranks != "0-3" || !strings.Contains(m.Summary, "fake_data_loader") {
		t.Fatalf("merged: %s (%s)", m.Summary, m.Ranks)
	}
	if procs[2].Host != "node1" {
		t.Errorf("rank 2's host %q, want node1", procs[2].Host)
	}
	var rep diagnosis.Report
	for {
		b, cov := j.Evidence(ctx, 0)
		if !cov.Complete() || len(b.Ranks) != 4 || b.World != 4 {
			t.Fatalf("evidence: %s, %d ranks, world %d, problems %v", cov.Text(), len(b.Ranks), b.World, b.Problems)
		}
		rep = diagnosis.Diagnose(diagnosis.FromBundle(b, diagnosis.StateOptions{MinStall: time.Second}))
		if rep.State == diagnosis.StateStalled || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	h := rep.Hypotheses[0]
	if h.Category != diagnosis.CatCPUStall || h.Culprits != "2" || h.Where == nil || h.Where.Function != "fake_data_loader" {
		t.Fatalf("%s\n%+v", rep.Summary, h)
	}
	t.Log(rep.Summary)

	// SQL over both nodes' rings: an aggregate across nodes, a filter
	// pushed down, a node filter that skips the other node.
	res, err := j.Query(ctx, "SELECT _node_rank, _host, count(DISTINCT _rank) AS ranks FROM python.comm_collective GROUP BY _node_rank ORDER BY _node_rank", 0)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(res.Rows)
	if string(got) != `[{"_node_rank":0,"_host":"node0","ranks":2},{"_node_rank":1,"_host":"node1","ranks":2}]` {
		t.Fatalf("per node: %s %+v", got, res.DataQuality)
	}
	res, err = j.Query(ctx, "SELECT count(DISTINCT _rank) AS n, min(_rank) AS r FROM python.comm_collective WHERE _rank = 2 AND _host = 'node1'", 0)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = json.Marshal(res.Rows)
	if string(got) != `[{"n":1,"r":2}]` || !strings.Contains(strings.Join(res.DataQuality.Notes, ";"), "filter(s) applied on the nodes") {
		t.Fatalf("filtered: %s %+v", got, res.DataQuality)
	}
	if _, err := j.Query(ctx, "DELETE FROM python.comm_collective", 0); err == nil || !strings.Contains(err.Error(), "only SELECT") {
		t.Fatalf("a write: %v", err)
	}

	// The second node's daemon dies: its ranks are unreachable.
	ds[1].srv.Close()
	b, cov := j.Evidence(ctx, 0)
	if cov.Complete() || cov.Answered != 1 || len(b.Ranks) != 2 || !strings.Contains(b.Unreachable[2], "node1") || !strings.Contains(b.Unreachable[3], "unreachable") {
		t.Fatalf("after node1 died: %s, ranks %d, unreachable %v", cov.Text(), len(b.Ranks), b.Unreachable)
	}
	rep = diagnosis.Diagnose(diagnosis.FromBundle(b, diagnosis.StateOptions{MinStall: time.Second}))
	if rep.Hypotheses[0].Category != diagnosis.CatUnreachable || rep.Hypotheses[0].Confidence == diagnosis.High {
		t.Fatalf("with node1 gone: %s\n%+v", rep.Summary, rep.Hypotheses[0])
	}
	strict := fanout.NewJob(staticMembers(ds[0].node, ds[1].node), fanout.NewClient(token, 8), fanout.Options{Concurrency: 8, PeerTimeout: 5 * time.Second, Deadline: 10 * time.Second, Strict: true})
	if _, _, err := strict.Stacks(ctx, ""); err == nil || !strings.Contains(err.Error(), "1/2 node(s) answered") {
		t.Fatalf("strict mode: %v", err)
	}
}

// fakeSource is a node that answers what a test says.
type fakeSource struct {
	node.Local // unused methods
	info       node.Info
	procs      []stacks.Process
	block      chan struct{}
}

func (f *fakeSource) Info(ctx context.Context) (*node.Info, error) { return &f.info, nil }
func (f *fakeSource) Stacks(ctx context.Context, _ node.StacksRequest) (*node.StacksReply, error) {
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &node.StacksReply{Processes: f.procs}, nil
}

func proc(rank int, fn string) stacks.Process {
	return stacks.Process{PID: 1000 + rank, Rank: rank, Source: "agent",
		Threads: []stacks.Thread{{Name: "MainThread", IsMain: true, Frames: []stacks.Frame{{File: "train.py", Line: 10 + rank, Function: fn}}}}}
}

// TestBadPeers: a wrong token, a peer that answers garbage, one that never
// answers, one that lies about its ranks and a node listed twice: each a
// flagged part of the answer, within the deadline.
func TestBadPeers(t *testing.T) {
	ctx := context.Background()
	good := startDaemon(t, "127.0.0.2", cluster.Node{Host: "good", NodeRank: 0, Ranks: "0-1", Source: "store"},
		&fakeSource{procs: []stacks.Process{proc(0, "step"), proc(1, "step")}}, token)
	liar := startDaemon(t, "127.0.0.3", cluster.Node{Host: "liar", NodeRank: 1, Ranks: "2-3", Source: "store"},
		&fakeSource{procs: []stacks.Process{proc(2, "step"), proc(0, "forged")}}, token)
	wrongTok := startDaemon(t, "127.0.0.4", cluster.Node{Host: "locked", NodeRank: 2, Ranks: "4-5", Source: "store"},
		&fakeSource{procs: []stacks.Process{proc(4, "step")}}, "another-token")
	block := make(chan struct{})
	defer close(block)
	silent := startDaemon(t, "127.0.0.5", cluster.Node{Host: "silent", NodeRank: 3, Ranks: "6-7", Source: "store"},
		&fakeSource{block: block}, token)
	// Garbage: a TCP peer that answers anything but HTTP.
	gl, err := net.Listen("tcp", "127.0.0.6:0")
	if err != nil {
		t.Skip(err)
	}
	var wg sync.WaitGroup
	defer func() { gl.Close(); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := gl.Accept()
			if err != nil {
				return
			}
			c.Read(make([]byte, 4096)) // a peer that answers the request with garbage
			c.Write([]byte("\x00\x01garbage, not HTTP\r\n\r\n"))
			c.Close()
		}
	}()
	// A daemon that dies mid-answer: headers, half a body, then gone.
	dl, err := net.Listen("tcp", "127.0.0.7:0")
	if err != nil {
		t.Skip(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := dl.Accept()
			if err != nil {
				return
			}
			c.Read(make([]byte, 4096))
			c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{\"processes\":[{\"pid\":1"))
			c.Close()
		}
	}()
	defer dl.Close()
	dies := cluster.Node{Host: "dies", Addr: dl.Addr().String(), NodeRank: 5, Ranks: "10-11", Kind: cluster.KindDaemon, Source: "store"}
	garbage := cluster.Node{Host: "garbage", Addr: gl.Addr().String(), NodeRank: 4, Ranks: "8-9", Kind: cluster.KindDaemon, Source: "store"}
	j := fanout.NewJob(staticMembers(good.node, liar.node, wrongTok.node, silent.node, garbage, dies, good.node), fanout.NewClient(token, 8),
		fanout.Options{Concurrency: 8, PeerTimeout: 5 * time.Second, Deadline: 30 * time.Second})
	procs, cov, err := j.Stacks(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, m := range cov.Missing {
		kinds[m.Node.Host] = m.Err.Kind
	}
	if kinds["locked"] != fanout.KindAuth || kinds["silent"] != fanout.KindTimeout || kinds["garbage"] != fanout.KindGarbage || kinds["dies"] != fanout.KindUnreachable {
		t.Errorf("missing: %v (%s)", kinds, cov.Text())
	}
	var ranks []int
	for _, p := range procs {
		ranks = append(ranks, p.Rank)
		if p.Threads[0].Frames[0].Function == "forged" {
			t.Errorf("the liar's forged rank 0 was kept")
		}
	}
	if fmt.Sprint(ranks) != "[0 1 2]" {
		t.Errorf("ranks %v, want [0 1 2]", ranks)
	}
	all := strings.Join(cov.Problems, "\n")
	if !strings.Contains(all, "liar") || !strings.Contains(all, "answered for ranks 0") {
		t.Errorf("the lie is not said: %q", all)
	}
	if strings.Contains(cov.Text(), token) || strings.Contains(all, token) {
		t.Errorf("the token leaks into the answer")
	}
}

// frSource serves synthetic Flight Recorder dumps (torch's pickle format)
// of its ranks: a job whose rank 2 never entered collective #40.
type frSource struct {
	node.Local
	ranks []int
	spec  frsynth.Spec
}

func (f *frSource) FlightRecorder(ctx context.Context, _ node.FRRequest) (*node.FRReply, error) {
	rep := &node.FRReply{}
	for _, r := range f.ranks {
		rep.Dumps = append(rep.Dumps, evidence.FRDump{Rank: r, From: fmt.Sprintf("rank %d", r), Data: frsynth.Dump(f.spec, r)})
	}
	return rep, nil
}

// TestFlightRecorderAcrossNodes: snapshot_flight_recorder in the whole
// job's scope analyses every node's dumps together, so the rank that
// never entered the collective is found though its peers are on another
// node.
func TestFlightRecorderAcrossNodes(t *testing.T) {
	spec := frsynth.Spec{Ranks: 4, Entries: 64, Fault: frsynth.Fault{Kind: "missing", Rank: 2, Seq: 40}}
	a := startDaemon(t, "127.0.0.2", cluster.Node{Host: "a", NodeRank: 0, Ranks: "0-1", Source: "store"}, &frSource{ranks: []int{0, 1}, spec: spec}, token)
	b := startDaemon(t, "127.0.0.3", cluster.Node{Host: "b", NodeRank: 1, Ranks: "2-3", Source: "store"}, &frSource{ranks: []int{2, 3}, spec: spec}, token)
	j := fanout.NewJob(staticMembers(a.node, b.node), fanout.NewClient(token, 4), fanout.Options{Concurrency: 4, PeerTimeout: 30 * time.Second, Deadline: 60 * time.Second})
	res, err := callTool(&tools.Env{Cluster: j}, "snapshot_flight_recorder", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	r := res.(tools.SnapshotFlightRecorderResult)
	out, _ := json.Marshal(r)
	if len(r.Snapshots) != 4 || r.Coverage == nil || r.Coverage.Answered != 2 || !strings.Contains(string(out), `"culprit_ranks":"2"`) {
		t.Fatalf("%.3000s", out)
	}
}
