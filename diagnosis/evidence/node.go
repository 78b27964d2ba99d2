package evidence

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// Node is the scope of this node: its agents, their fallbacks (the
// faulthandler dump, /proc), its ring tables and its GPUs. The server in
// the node scope reads it directly; a node daemon serves it to the
// coordinator (cluster/node.Local) as a Member.
type Node struct {
	Agents agent.Options
	// SQL is the node's ring tables; nil serves none.
	SQL *sqlengine.Engine
	// Sampler is this process's GPU sampler; nil reads the newest round
	// another sampler left in the rings.
	Sampler GPUSource
	// Host names this node.
	Host string
	// History holds the watcher's captures (a dead rank's last place);
	// nil: none.
	History *history.Store
	// Deadline bounds a gathering (Options.Deadline: agent.NodeBudget
	// when 0); a member's caller sets its own.
	Deadline time.Duration
	// Member: this node is one of a whole-job scope. A selection is then
	// the job's (ranks this node does not hold are another node's, not an
	// error), the caller's deadline is the node's time, and its Flight
	// Recorder dumps go raw to the coordinator, which analyses every
	// node's together.
	Member bool
}

// snapshotTime bounds a node's live Flight Recorder snapshots.
const snapshotTime = 60 * time.Second

// budget gives ctx the node's time: a member's caller says how long it
// waits; a person's call gets d.
func (n *Node) budget(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if n.Member {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// Select resolves a selection into this node's live agents (all: every
// agent found). A selection no live agent matches is a CallError naming
// where the agents were looked for; a member answers it with none.
func (n *Node) Select(sel Selection) (picked, all []*agent.Agent, err error) {
	all, err = agent.Discover(n.Agents)
	if err != nil {
		return nil, nil, err
	}
	as := agent.Selection{PIDs: sel.PIDs}
	if strings.TrimSpace(sel.Ranks) != "" {
		if as.Ranks, err = rankset.Parse(sel.Ranks); err != nil {
			return nil, all, &CallError{Msg: fmt.Sprintf("ranks %q: %v", sel.Ranks, err)}
		}
	}
	if n.Member && len(as.Ranks) > 0 {
		// Only the ranks this node holds: the coordinator sends the
		// whole selection to every node.
		held := map[int]bool{}
		for _, a := range all {
			if a.IsJobRank() && a.Alive {
				held[a.Rank()] = true
			}
		}
		mine := as.Ranks[:0:0]
		for _, r := range as.Ranks {
			if held[r] {
				mine = append(mine, r)
			}
		}
		if len(mine) == 0 {
			return nil, all, nil
		}
		as.Ranks = mine
	}
	picked, err = agent.Select(all, as)
	if err != nil {
		return nil, all, &CallError{Msg: err.Error()}
	}
	if len(picked) == 0 && !n.Member {
		msg := fmt.Sprintf("no live agent on this node (data dir %s, control sockets in %s); start the job with PROBING=1 and the agent installed (probing-mcp agent install), or use query for a dead job's rings",
			n.Agents.DataDir, n.Agents.CtrlRoot)
		if u, why := untrustedLive(all); u > 0 {
			msg = fmt.Sprintf("no trusted live agent on this node: %d live process(es) are untrusted and never called (e.g. %s); list_processes lists them", u, why)
		}
		return nil, all, &CallError{Msg: msg}
	}
	return picked, all, nil
}

// untrustedLive counts the live agents left out as untrusted, with one
// reason.
func untrustedLive(all []*agent.Agent) (int, string) {
	n, why := 0, ""
	for _, a := range all {
		if a.Alive && a.Untrusted != "" {
			if n++; why == "" {
				why = fmt.Sprintf("pid %d: %s", a.PID, a.Untrusted)
			}
		}
	}
	return n, why
}

// Stacks captures every selected process's threads.
func (n *Node) Stacks(ctx context.Context, sel Selection) (*StacksAnswer, error) {
	as, _, err := n.Select(sel)
	if err != nil {
		return nil, err
	}
	ctx, cancel := n.budget(ctx, agent.NodeBudget)
	defer cancel()
	ans := &StacksAnswer{Processes: agent.CollectStacks(ctx, as, agent.StackOptions{}), Sources: map[string]string{}}
	for _, p := range ans.Processes {
		ans.Sources[fmt.Sprint(p.PID)] = p.Source
	}
	return ans, nil
}

// FlightRecorder snapshots the selected torch ranks: raw for the
// coordinator, decoded for this node's analysis.
func (n *Node) FlightRecorder(ctx context.Context, sel Selection, onlyActive bool) (*FRAnswer, error) {
	as, _, err := n.Select(sel)
	if err != nil {
		return nil, err
	}
	var torch []*agent.Agent
	for _, a := range as {
		if a.Identity != nil && a.Identity.Torch != "" {
			torch = append(torch, a)
		}
	}
	ctx, cancel := n.budget(ctx, snapshotTime)
	defer cancel()
	col := agent.CollectFlightRecorder(ctx, torch, onlyActive)
	ans := &FRAnswer{Dumps: []FRDump{}, Loaded: col.Loaded}
	for _, a := range torch {
		if err := col.Errors[a.PID]; err != nil {
			ans.Failed = append(ans.Failed, fmt.Sprintf("rank %d (pid %d): %v", a.Rank(), a.PID, err))
		}
		s := col.Snapshots[a.PID]
		if s == nil {
			continue
		}
		d := FRDump{Rank: s.Rank, From: fmt.Sprintf("pid %d", a.PID), Data: s.Data, PID: a.PID, WorldSize: max(s.WorldSize, 0),
			Records: s.Records, ProcessGroups: s.ProcessGroups, Version: s.Version, Format: s.Format, DumpFunction: s.DumpFunction}
		if d.Rank < 0 {
			d.Rank = a.Rank()
		}
		if a.Identity != nil {
			d.Host = a.Identity.Host
		}
		ans.Dumps = append(ans.Dumps, d)
	}
	if k := len(as) - len(torch); k > 0 {
		ans.Failed = append(ans.Failed, fmt.Sprintf("%d process(es) without torch have no Flight Recorder", k))
	}
	return ans, nil
}

// Evidence is the node's bundle: Gather over this node's sources.
func (n *Node) Evidence(ctx context.Context, commPerRank int) (*Bundle, *Coverage, error) {
	o := n.options()
	o.CommPerRank, o.RawFR, o.Deadline = commPerRank, n.Member, n.Deadline
	if dl, ok := ctx.Deadline(); ok && n.Member {
		o.Deadline = time.Until(dl)
	}
	b := Gather(ctx, o)
	if len(b.Ranks) == 0 && !n.Member {
		b.Problems = append(b.Problems, "looked for agents in data dir "+n.Agents.DataDir+" and control sockets in "+n.Agents.CtrlRoot)
	}
	return b, nil, nil
}

// Pulse is the node's liveness and ring progress (Options.Pulse).
func (n *Node) Pulse(ctx context.Context) (*Bundle, *Coverage, error) {
	o := n.options()
	o.Pulse, o.CommPerRank, o.Deadline = true, PulseCommPerRank, n.Deadline
	if dl, ok := ctx.Deadline(); ok && n.Member {
		o.Deadline = time.Until(dl)
	}
	return Gather(ctx, o), nil, nil
}

// PulseCommPerRank is how many recent collectives of each rank a pulse
// reads: enough for the cadence of a job without optimizer hooks.
const PulseCommPerRank = 16

func (n *Node) options() Options {
	return Options{Agents: n.Agents, SQL: n.SQL, GPU: n.Sampler, Host: n.Host, History: n.History}
}

// Samples are this node's ranks' main stacks, sampled (MainSamples).
func (n *Node) Samples(ctx context.Context, rounds int, gap time.Duration) map[int][]*stacks.Thread {
	return MainSamples(ctx, n.options(), rounds, gap)
}

// GPU is the node's GPUs: the live sampler's newest round, else the
// rings', else why there is none (never an error).
func (n *Node) GPU(ctx context.Context) ([]gpu.Report, *Coverage, error) {
	return []gpu.Report{NodeGPU(ctx, n.Sampler, n.SQL, n.Host)}, nil, nil
}

// Query runs SQL on the node's engine.
func (n *Node) Query(ctx context.Context, sql string, limit int) (*sqlengine.Result, error) {
	if n.SQL == nil {
		return nil, &CallError{Msg: "the SQL engine is not available on this server"}
	}
	return n.SQL.Query(ctx, sql, limit)
}

// Peers is 0: a node is its own scope.
func (n *Node) Peers(context.Context) (int, error) { return 0, nil }

// LoadFR decodes raw dumps for the analysis; one that does not decode is
// a problem, said with its rank and where it came from.
func LoadFR(ctx context.Context, dumps []FRDump) (*fr.Loaded, []string) {
	loaded := &fr.Loaded{}
	var problems []string
	for _, d := range dumps {
		dump, err := fr.DecodeContext(ctx, d.Data, fr.Limits{})
		if err != nil {
			problems = append(problems, fmt.Sprintf("rank %d's Flight Recorder (%s) does not decode: %v", d.Rank, d.From, err))
			continue
		}
		agent.DropAgentFRFrames(dump)
		dump.Rank, dump.Path = d.Rank, d.From
		loaded.Dumps = append(loaded.Dumps, dump)
	}
	return loaded, problems
}
