package tools

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

func ptr[T any](v T) *T { return &v }

// spinGPUs are n H100s spinning in a collective (rank base+i on GPU i).
func spinGPUs(n, base int, at time.Time) []gpu.Snapshot {
	var out []gpu.Snapshot
	for i := 0; i < n; i++ {
		out = append(out, gpu.Snapshot{Index: i, Name: "NVIDIA H100 80GB HBM3", UUID: fmt.Sprintf("GPU-%d-%d", base, i),
			PCIBusID:    fmt.Sprintf("00000000:%02x:00.0", 0x18+i),
			Utilization: &gpu.Utilization{GPU: 100}, PowerW: ptr(70.0 + float64(i%6)), PowerLimitW: ptr(700.0),
			Processes: []gpu.Process{{PID: uint32(1000 + base + i), GPUInstance: -1, Rank: base + i, LocalRank: i}}, Time: at})
	}
	return out
}

// xidNode is 8 GPUs, GPU 3 fallen off the bus (Xid 79).
func xidNode(host string, base int, at time.Time) gpu.Report {
	snaps := spinGPUs(8, base, at)
	snaps[3].Lost, snaps[3].Utilization, snaps[3].PowerW = true, nil, nil
	xid := gpu.XidEvent{Kind: "xid", Xid: 79, Meaning: gpu.XidMeaning(79), GPU: 3, Source: "nvml", Time: at.Add(-time.Second)}
	r := gpu.NewReport(host, gpu.Status{State: gpu.StateOK, Devices: 8}, snaps, []gpu.XidEvent{xid}, 0)
	r.IntervalMS = 1000
	return r
}

// ringsEnv writes rep into a data dir's GPU rings and serves it through
// the SQL engine, as a dead job's or another sampler's rings.
func ringsEnv(t *testing.T, rep gpu.Report) (*sqlengine.Engine, string) {
	t.Helper()
	dir := t.TempDir()
	rings, err := gpu.OpenRings(dir, rep.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rings.Close() })
	if err := rings.Write(gpu.Tick{Report: rep, New: rep.Xids}); err != nil {
		t.Fatal(err)
	}
	e, err := sqlengine.New(sqlengine.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return e, dir
}

func gpuText(t *testing.T, env *Env, args map[string]any) (GPUStatusResult, string) {
	t.Helper()
	r := callTool(t, env, "gpu_status", args).(GPUStatusResult)
	return r, r.ModelText()
}

// TestGPUStatusRings: a node's GPUs read back from the rings, the lost
// GPU and its Xid before the spinning ones, with its rank.
func TestGPUStatusRings(t *testing.T) {
	t.Setenv(cluster.EnvNodeHost, "node-a")
	e, _ := ringsEnv(t, xidNode("node-a", 0, time.Now()))
	r, txt := gpuText(t, &Env{SQL: e}, nil)
	if r.DevicesTotal != 8 || r.NodesTotal != 1 || r.Nodes[0].Source != gpu.SourceRings || r.Nodes[0].Host != "node-a" {
		t.Fatalf("%+v", r)
	}
	xi, lost, spin := strings.Index(txt, "Xid 79"), strings.Index(txt, "⟦node-a⟧ GPU 3 (rank 3)"), strings.Index(txt, "7 GPU(s) on 1 node(s) (⟦NVIDIA H100 80GB HBM3⟧) spinning")
	if xi < 0 || lost < 0 || spin < 0 || !(xi < lost && lost < spin) {
		t.Fatalf("want the Xid, then the lost GPU with host and rank, then the 7 spinning merged:\n%s", txt)
	}
	if !strings.Contains(txt, "70-75 W of 700 W") {
		t.Errorf("the spinning group's power spread is not said:\n%s", txt)
	}
	// Devices, paged: the lost one first, the rest said.
	r, txt = gpuText(t, &Env{SQL: e}, map[string]any{"detail": "devices", "max_devices": 2})
	if len(r.Devices) != 2 || r.Devices[0].Index != 3 || !r.Truncated || r.NextOffset == nil || *r.NextOffset != 2 {
		t.Fatalf("devices page: %+v", r)
	}
	if !strings.Contains(txt, "call again with offset 2") {
		t.Errorf("the cut is not said:\n%s", txt)
	}
	r, _ = gpuText(t, &Env{SQL: e}, map[string]any{"detail": "devices", "max_devices": 64, "offset": 2})
	if len(r.Devices) != 6 || r.Truncated {
		t.Fatalf("second page: %d devices, truncated %v", len(r.Devices), r.Truncated)
	}
}

type liveGPU gpu.Report

func (l liveGPU) Report() gpu.Report { return gpu.Report(l) }

// TestGPUStatusLive: this process's sampler answers, not the rings.
func TestGPUStatusLive(t *testing.T) {
	t.Setenv(cluster.EnvNodeHost, "node-live")
	rep := gpu.NewReport("", gpu.Status{State: gpu.StateOK, Devices: 4}, spinGPUs(4, 8, time.Now()), nil, 0)
	rep.Source, rep.IntervalMS = gpu.SourceLive, 1000
	e, err := sqlengine.New(sqlengine.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r, txt := gpuText(t, &Env{SQL: e, GPU: liveGPU(rep)}, nil)
	if r.Nodes[0].Source != gpu.SourceLive || r.Nodes[0].Host != "node-live" || !strings.Contains(txt, "4 GPU(s) on 1 node(s) (⟦NVIDIA H100 80GB HBM3⟧) spinning: 100% util") {
		t.Fatalf("%+v\n%s", r, txt)
	}
	if !strings.Contains(txt, "ranks 8-11") {
		t.Errorf("the ranks on the GPUs are not said:\n%s", txt)
	}
}

// TestGPUStatusNotSampled: no sampler ran: the tool says why and how to
// get one.
func TestGPUStatusNotSampled(t *testing.T) {
	e, err := sqlengine.New(sqlengine.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []*Env{{SQL: e}, {}} {
		r, txt := gpuText(t, env, nil)
		if r.Nodes[0].State != gpu.StateNotSampled || !strings.Contains(txt, "not_sampled") ||
			!strings.Contains(txt, "probing-mcp node") || !strings.Contains(txt, "PROBING_GPU") {
			t.Fatalf("%+v\n%s", r, txt)
		}
	}
}

// TestGPUStatusArgs: bad arguments are refused, each naming the fix.
func TestGPUStatusArgs(t *testing.T) {
	var call Call
	for _, d := range All(&Env{}) {
		if d.Tool.Name == "gpu_status" {
			call = d.Call
		}
	}
	for _, args := range []map[string]any{{"detail": "all"}, {"max_devices": 2000}, {"offset": -1}, {"hosts": "x"}, {"host": "nope"}} {
		_, err := call(context.Background(), args)
		if err == nil {
			t.Errorf("%v: accepted", args)
			continue
		}
		t.Logf("%v: %v", args, err)
	}
}

// TestGPUStatusWholeJob: two real node daemons over HTTP, each serving
// its own data dir's rings; the node with the Xid GPU comes first, the
// identical spinning GPUs of both are merged, a dead daemon is missing
// in the coverage.
func TestGPUStatusWholeJob(t *testing.T) {
	now := time.Now()
	healthy := gpu.NewReport("node-0", gpu.Status{State: gpu.StateOK, Devices: 8}, spinGPUs(8, 0, now), nil, 0)
	healthy.IntervalMS = 1000
	var members []cluster.Node
	for i, rep := range []gpu.Report{healthy, xidNode("node-1", 8, now)} {
		e, dir := ringsEnv(t, rep)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		self := cluster.Node{Host: rep.Host, Addr: ln.Addr().String(), NodeRank: i, Kind: cluster.KindDaemon, Source: "peers"}
		srv := &http.Server{Handler: node.Handler(node.Config{Source: &node.Local{Self: self, SQL: e,
			Agents: agent.Options{DataDir: dir, CtrlRoot: t.TempDir()}}})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		members = append(members, self)
	}
	// A node whose report lists more GPUs than a node holds: garbage.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bogus := cluster.Node{Host: "node-bogus", Addr: ln.Addr().String(), NodeRank: 3, Kind: cluster.KindDaemon, Source: "peers"}
	big := gpu.NewReport("node-bogus", gpu.Status{State: gpu.StateOK}, spinGPUs(gpu.MaxDevices+1, 100, now), nil, 0)
	bsrv := &http.Server{Handler: node.Handler(node.Config{Source: &fixedNodeGPU{rep: big}})}
	go bsrv.Serve(ln)
	t.Cleanup(func() { bsrv.Close() })
	members = append(members, bogus)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	members = append(members, cluster.Node{Host: "node-2", Addr: deadAddr, NodeRank: 2, Ranks: "16-23", Kind: cluster.KindDaemon, Source: "peers"})
	j := fanout.NewJob(func(context.Context) ([]cluster.Node, []string, error) { return members, nil, nil },
		fanout.NewClient("", 4), fanout.Options{Concurrency: 4, PeerTimeout: 30 * time.Second, Deadline: 60 * time.Second})
	r, txt := gpuText(t, &Env{Cluster: j}, nil)
	if r.Coverage == nil || r.Coverage.Answered != 2 || r.Coverage.Asked != 4 || len(r.Coverage.Missing) != 2 ||
		!strings.Contains(strings.Join(r.Coverage.Missing, "\n"), "65 devices") {
		t.Fatalf("coverage %+v", r.Coverage)
	}
	xi, lost, spin := strings.Index(txt, "Xid 79: GPU has fallen off the bus on ⟦node-1⟧ GPU 3"), strings.Index(txt, "⟦node-1⟧ GPU 3 (rank 11)"), strings.Index(txt, "15 GPU(s) on 2 node(s) (⟦NVIDIA H100 80GB HBM3⟧) spinning")
	if xi < 0 || lost < 0 || spin < 0 || !(xi < lost && lost < spin) {
		t.Fatalf("want node-1's Xid, its lost GPU with rank, then the 15 spinning merged across both nodes:\n%s", txt)
	}
	if r.Nodes[0].Host != "node-1" {
		t.Errorf("the node with the fault is not first: %+v", r.Nodes)
	}
	if !strings.Contains(txt, "Scope: the whole job, 2/4 node(s) answered") || !strings.Contains(txt, "node-2") {
		t.Errorf("coverage not said:\n%s", txt)
	}
	// The diagnosis's bundle carries each node's GPUs, named by its node.
	b, _ := j.Evidence(context.Background(), 0)
	var hosts []string
	for _, g := range b.GPU {
		hosts = append(hosts, fmt.Sprintf("%s:%d", g.Host, len(g.Devices)))
	}
	sort.Strings(hosts) // node-bogus has no rings: its Evidence reads none
	if strings.Join(hosts, ",") != "node-0:8,node-1:8,node-bogus:0" {
		t.Errorf("evidence GPU reports %v", hosts)
	}
	// One node by host.
	r, _ = gpuText(t, &Env{Cluster: j}, map[string]any{"host": "node-0", "detail": "devices"})
	if r.NodesTotal != 1 || len(r.Devices) != 8 || r.Devices[0].Host != "node-0" {
		t.Fatalf("host filter: %+v", r)
	}
}

// TestGPUStatusScale: 4096 GPUs on 512 nodes, a few odd ones: the text
// stays within its bound, the odd GPUs first, the rest one line.
func TestGPUStatusScale(t *testing.T) {
	now := time.Now()
	var reps []gpu.Report
	for n := 0; n < 512; n++ {
		host := fmt.Sprintf("node-%03d", n)
		r := gpu.NewReport(host, gpu.Status{State: gpu.StateOK, Devices: 8}, spinGPUs(8, 8*n, now), nil, 0)
		if n%50 == 7 {
			r = xidNode(host, 8*n, now)
		}
		if n == 300 {
			r.Devices[5].Signature, r.Devices[5].Why = gpu.SigIdle, "0% utilisation: no kernel ran"
			r.Devices[5].Utilization = &gpu.Utilization{}
		}
		r.IntervalMS = 1000
		reps = append(reps, r)
	}
	for n := 0; n < 20; n++ {
		reps = append(reps, gpu.Report{Host: fmt.Sprintf("cpu-%02d", n), Source: gpu.SourceNone, Status: gpu.Status{State: gpu.StateNotSampled, Reason: "no GPU sampler has written to this data dir"}})
	}
	res := GPUStatusResult{now: now, Summary: mergeGPUs(reps, now, gpu.MaxSummary)}
	res.Nodes, res.NodesTotal = gpuNodes(reps, now)
	devs := oddFirst(reps)
	res.DevicesTotal = len(devs)
	txt := res.ModelText()
	t.Logf("%d bytes:\n%s", len(txt), txt)
	if len(txt) > maxGPUText || len(res.Summary) > gpu.MaxSummary {
		t.Fatalf("text %d bytes (bound %d), summary %d (bound %d)", len(txt), maxGPUText, len(res.Summary), gpu.MaxSummary)
	}
	if !strings.HasPrefix(txt, "4096 GPU(s) on 532 node(s); 11 Xid event(s).") {
		t.Errorf("head: %.200s", txt)
	}
	idle, bulk := strings.Index(txt, "⟦node-300⟧ GPU 5 (rank 2405)"), strings.Index(txt, "GPU(s) on 512 node(s) (⟦NVIDIA H100 80GB HBM3⟧) spinning")
	if idle < 0 || bulk < 0 || idle > bulk {
		t.Errorf("the idle GPU is not named before the merged spinning ones:\n%s", txt)
	}
	if len(res.Nodes) != maxGPUNodes || res.NodesTotal != 532 || !strings.Contains(txt, "more nodes not listed") {
		t.Errorf("nodes %d of %d", len(res.Nodes), res.NodesTotal)
	}
}

// fixedNodeGPU is a node daemon's source that answers one GPU report.
type fixedNodeGPU struct {
	node.Local
	rep gpu.Report
}

func (f *fixedNodeGPU) GPU(context.Context, node.GPURequest) (*node.GPUReply, error) {
	return &node.GPUReply{Report: f.rep}, nil
}

// TestNodeLiveSampler: the node daemon's sampler answers both its GPU
// route and its evidence bundle, named by the node.
func TestNodeLiveSampler(t *testing.T) {
	rep := gpu.NewReport("", gpu.Status{State: gpu.StateOK, Devices: 2}, spinGPUs(2, 0, time.Now()), nil, 0)
	rep.Source = gpu.SourceLive
	l := &node.Local{Self: cluster.Node{Host: "node-s"}, GPUSampler: liveGPU(rep), Agents: agent.Options{DataDir: t.TempDir(), CtrlRoot: t.TempDir()}}
	g, err := l.GPU(context.Background(), node.GPURequest{})
	if err != nil || g.Report.Source != gpu.SourceLive || g.Report.Host != "node-s" || len(g.Report.Devices) != 2 {
		t.Fatalf("GPU: %v %+v", err, g)
	}
	ev, err := l.Evidence(context.Background(), node.EvidenceRequest{})
	if err != nil || len(ev.Bundle.GPU) != 1 || ev.Bundle.GPU[0].Source != gpu.SourceLive || ev.Bundle.GPU[0].Host != "node-s" {
		t.Fatalf("Evidence: %v %+v", err, ev.Bundle.GPU)
	}
}
