package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fedsql"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// Local serves this node to the coordinator: the node's evidence.Scope
// (evidence.Node, as a member of the job) in the node API's replies, with
// each process named by the host its job knows, and the ring tables.
type Local struct {
	Self    cluster.Node
	Version string
	Agents  agent.Options
	// SQL is the node's ring tables; nil serves no tables.
	SQL *sqlengine.Engine
	// GPUSampler is this process's GPU sampler (the daemon's); nil reads the
	// newest round another sampler left in the rings through SQL.
	GPUSampler evidence.GPUSource
}

// errNoSQL answers table requests of a node without an engine.
var errNoSQL = errors.New("this node daemon has no SQL engine (its data dir could not be opened)")

// Info lists the node's ranks.
func (l *Local) Info(ctx context.Context) (*Info, error) {
	as, err := agent.Discover(l.Agents)
	in := &Info{Node: l.Self, Version: l.Version, NowNS: time.Now().UnixNano(), Ranks: []RankInfo{}}
	if err != nil {
		in.Problems = append(in.Problems, "agents: "+err.Error())
	}
	sizes := map[int]int{}
	for _, a := range as {
		if !a.IsJobRank() {
			continue
		}
		ri := RankInfo{Rank: a.Rank(), LocalRank: -1, PID: a.PID, Alive: a.Alive, Kind: a.Kind}
		if id := a.Identity; id != nil {
			ri.LocalRank, ri.Role = id.LocalRank, id.Role
			if a.Alive && id.WorldSize > 0 && id.WorldSize <= evidence.MaxWorld {
				sizes[id.WorldSize]++
			}
		}
		in.Ranks = append(in.Ranks, ri)
	}
	in.World = evidence.MajorityWorld(sizes)
	sort.Slice(in.Ranks, func(i, j int) bool {
		if in.Ranks[i].Rank != in.Ranks[j].Rank {
			return in.Ranks[i].Rank < in.Ranks[j].Rank
		}
		return in.Ranks[i].PID < in.Ranks[j].PID
	})
	var live []int
	for _, r := range in.Ranks {
		if r.Alive {
			live = append(live, r.Rank)
		}
	}
	if in.Node.Ranks == "" {
		in.Node.Ranks = rankset.Format(live)
	}
	return in, nil
}

// scope is the node as one of a whole-job scope: the coordinator's
// selection is the job's, its deadline the node's time, its Flight
// Recorder dumps raw.
func (l *Local) scope() *evidence.Node {
	return &evidence.Node{Agents: l.Agents, SQL: l.SQL, Sampler: l.GPUSampler, Host: l.Self.Host, Member: true}
}

// hostOf is the node's name as the job of process pid knows it (the name
// the Registrar registers for that job, JobStores): the daemon may serve
// a later job than the one that started it, whose ranks set another
// PROBING_NODE_HOST. The daemon's own name when pid's environment cannot
// be read (gone, or not an agent of ours).
func (l *Local) hostOf(pid int) string {
	env, err := procfacts.Env(pid)
	if err != nil {
		return l.Self.Host
	}
	h, _, _ := jobNode(func(k string) string { return env[k] }, "", nil)
	if h == "" {
		return l.Self.Host
	}
	return h
}

// Stacks captures every selected process's threads.
func (l *Local) Stacks(ctx context.Context, req StacksRequest) (*StacksReply, error) {
	ans, err := l.scope().Stacks(ctx, evidence.Selection{Ranks: req.Ranks})
	if err != nil {
		return nil, err
	}
	for i := range ans.Processes {
		ans.Processes[i].Host = l.hostOf(ans.Processes[i].PID)
	}
	return &StacksReply{Processes: ans.Processes}, nil
}

// Evidence is the node's bundle for the diagnosis, its Flight Recorder
// raw: the coordinator analyses every node's dumps together.
func (l *Local) Evidence(ctx context.Context, req EvidenceRequest) (*EvidenceReply, error) {
	ev := l.scope().Evidence
	if req.Pulse {
		ev = func(ctx context.Context, _ int) (*evidence.Bundle, *evidence.Coverage, error) {
			return l.scope().Pulse(ctx)
		}
	}
	b, _, err := ev(ctx, req.CommPerRank)
	if err != nil {
		return nil, err
	}
	return &EvidenceReply{Bundle: b}, nil
}

// FlightRecorder snapshots the selected torch ranks.
func (l *Local) FlightRecorder(ctx context.Context, req FRRequest) (*FRReply, error) {
	ans, err := l.scope().FlightRecorder(ctx, evidence.Selection{Ranks: req.Ranks}, req.OnlyActive)
	if err != nil {
		return nil, err
	}
	for i := range ans.Dumps {
		d := &ans.Dumps[i]
		d.Host = l.hostOf(d.PID)
		d.From = fmt.Sprintf("%s pid %d", d.Host, d.PID)
	}
	return &FRReply{Dumps: ans.Dumps, Problems: ans.Failed}, nil
}

func (l *Local) fed() (*fedsql.Local, error) {
	if l.SQL == nil {
		return nil, errNoSQL
	}
	return &fedsql.Local{Engine: l.SQL, NodeID: l.Self.Addr,
		NodeTags: fedsql.NodeTags{Host: l.Self.Host, Addr: l.Self.Addr, NodeRank: l.Self.NodeRank}}, nil
}

// Tables lists the node's ring tables.
func (l *Local) Tables(ctx context.Context) ([]fedsql.Table, error) {
	f, err := l.fed()
	if err != nil {
		return nil, err
	}
	return f.Tables(ctx)
}

// Scan reads one table's rows matching the pushed-down filters.
func (l *Local) Scan(ctx context.Context, req fedsql.ScanRequest) (*fedsql.ScanReply, error) {
	f, err := l.fed()
	if err != nil {
		return nil, err
	}
	return f.Scan(ctx, req)
}

// GPU is the node's GPUs: the live sampler's newest round, else the
// rings', else why there is none (never an error).
func (l *Local) GPU(ctx context.Context, _ GPURequest) (*GPUReply, error) {
	reps, _, err := l.scope().GPU(ctx)
	if err != nil || len(reps) != 1 {
		return nil, fmt.Errorf("the node's GPU report: %v", err)
	}
	return &GPUReply{Report: reps[0]}, nil
}
