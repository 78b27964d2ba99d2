package fanout

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/diag/rankset"
	"github.com/probing-mcp/probing-mcp/diag/stacks"
	"github.com/probing-mcp/probing-mcp/evidence"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// A node's answer is its text, the job's text it passes on included: the
// coordinator quotes what a node composed (a problem line, a rank's
// ending) as a whole, so that nothing a node sends reads as the
// coordinator's own words (jobtext).

// nodeWords names a node in a line: its host quoted, its address.
func nodeWords(n cluster.Node) string {
	return jobtext.Quote(n.Host, jobtext.Name) + " (" + addrWords(n.Addr) + ")"
}

// addrWords is an address as is when it is one, else quoted.
func addrWords(a string) string { return jobtext.Token(a, jobtext.Name) }

// ranksWords is a rank set membership was told: as is when it is one,
// else quoted (the store's text).
func ranksWords(s string) string {
	if _, err := rankset.Parse(s); err != nil {
		return jobtext.Quote(s, jobtext.Name)
	}
	return s
}

// nodeSaid is a line a node composed, quoted, after its node's name.
func nodeSaid(n cluster.Node, line string) string {
	return jobtext.Quote(n.Host, jobtext.Name) + " said: " + jobtext.Quote(line, jobtext.Line)
}

// nodeText quotes the lines a node composed for a rank (how it ended,
// why its stack or agent failed): read as the node's text, not ours. The
// codes the diagnosis reads (AgentErr's "timeout") are kept when plain.
func nodeText(e *evidence.RankEvidence) {
	if e.Ending != "" {
		e.Ending = jobtext.Quote(e.Ending, jobtext.Line)
	}
	if e.StackErr != "" {
		e.StackErr = jobtext.Quote(e.StackErr, jobtext.Message)
	}
	e.AgentErr = jobtext.Token(e.AgentErr, jobtext.Message)
}

// ranksOf are a node's ranks as membership or its last answer said.
func ranksOf(n cluster.Node) []int {
	rs, _ := rankset.Parse(n.Ranks)
	return rs
}

// owners keeps one node per rank: the first that spoke for it; a second
// is a conflict.
type owners struct {
	mu        sync.Mutex
	by        map[int]string
	conflicts []string
	lies      []string
}

// kept is claim as a set.
func (o *owners) kept(n cluster.Node, ranks []int) map[int]bool {
	keep := map[int]bool{}
	for _, r := range o.claim(n, ranks) {
		keep[r] = true
	}
	return keep
}

func (o *owners) claim(n cluster.Node, ranks []int) []int {
	ok, lies := claims(n, ranks)
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(lies) > 0 {
		o.lies = append(o.lies, fmt.Sprintf("%s answered for ranks %s, which membership registered to no rank of it (%s): dropped", nodeWords(n), rankset.Format(lies), ranksWords(n.Ranks)))
	}
	var kept []int
	for _, r := range ok {
		if prev, dup := o.by[r]; dup && prev != n.Addr {
			o.conflicts = append(o.conflicts, fmt.Sprintf("rank %d is claimed by two nodes, %s and %s: the first is used", r, addrWords(prev), addrWords(n.Addr)))
			continue
		}
		o.by[r] = n.Addr
		kept = append(kept, r)
	}
	return kept
}

// Stacks captures every rank's threads through its node's daemon.
func (j *Job) Stacks(ctx context.Context, ranks string) ([]stacks.Process, Coverage, error) {
	ns, problems, err := j.nodes(ctx)
	if err != nil {
		return nil, Coverage{Problems: problems}, err
	}
	var mu sync.Mutex
	var procs []stacks.Process
	own := &owners{by: map[int]string{}}
	cov := j.each(ctx, ns, func(ctx context.Context, n cluster.Node) error {
		var rep node.StacksReply
		if err := j.Client.Do(ctx, n, http.MethodPost, node.PathStacks, node.StacksRequest{Ranks: ranks}, &rep); err != nil {
			return err
		}
		var rs []int
		for _, p := range rep.Processes {
			if p.Rank >= 0 {
				rs = append(rs, p.Rank)
			}
		}
		keep := own.kept(n, rs)
		mu.Lock()
		defer mu.Unlock()
		for _, p := range rep.Processes {
			if p.Rank >= 0 && !keep[p.Rank] {
				continue
			}
			if p.Host == "" {
				p.Host = n.Host
			}
			procs = append(procs, p)
		}
		for _, pr := range rep.Problems {
			problems = append(problems, nodeSaid(n, pr))
		}
		return nil
	})
	cov.Problems = append(append(append(problems, cov.Problems...), own.lies...), own.conflicts...)
	sort.Slice(procs, func(a, b int) bool {
		if procs[a].Rank != procs[b].Rank {
			return procs[a].Rank < procs[b].Rank
		}
		return procs[a].PID < procs[b].PID
	})
	return procs, cov, j.strict(cov)
}

// FlightRecorder snapshots every torch rank through its node's daemon.
func (j *Job) FlightRecorder(ctx context.Context, ranks string, onlyActive bool) ([]evidence.FRDump, Coverage, error) {
	ns, problems, err := j.nodes(ctx)
	if err != nil {
		return nil, Coverage{Problems: problems}, err
	}
	var mu sync.Mutex
	var dumps []evidence.FRDump
	own := &owners{by: map[int]string{}}
	total := 0
	cov := j.each(ctx, ns, func(ctx context.Context, n cluster.Node) error {
		var rep node.FRReply
		if err := j.Client.Do(ctx, n, http.MethodPost, node.PathFR, node.FRRequest{Ranks: ranks, OnlyActive: onlyActive}, &rep); err != nil {
			return err
		}
		var rs []int
		for _, d := range rep.Dumps {
			rs = append(rs, d.Rank)
		}
		keep := own.kept(n, rs)
		mu.Lock()
		defer mu.Unlock()
		for _, d := range rep.Dumps {
			if !keep[d.Rank] {
				continue
			}
			if total+len(d.Data) > maxDumpBytes {
				problems = append(problems, fmt.Sprintf("rank %d's Flight Recorder left out: the dumps already hold %d MiB", d.Rank, total>>20))
				continue
			}
			total += len(d.Data)
			dumps = append(dumps, d)
		}
		for _, pr := range rep.Problems {
			problems = append(problems, nodeSaid(n, pr))
		}
		return nil
	})
	cov.Problems = append(append(append(problems, cov.Problems...), own.lies...), own.conflicts...)
	sort.Slice(dumps, func(a, b int) bool { return dumps[a].Rank < dumps[b].Rank })
	return dumps, cov, j.strict(cov)
}

// maxDumpBytes bounds the Flight Recorder dumps one fan-out holds.
const maxDumpBytes = 1 << 30

// Evidence gathers every node's bundle and merges them into one: the
// whole job's. A node that does not answer makes its ranks unreachable
// (said per rank), never a failure; the Flight Recorder dumps of every
// node are analysed together.
func (j *Job) Evidence(ctx context.Context, commPerRank int) (*evidence.Bundle, Coverage) {
	merged := &evidence.Bundle{Ranks: map[int]*evidence.RankEvidence{}, Unreachable: map[int]string{}}
	ns, problems, err := j.nodes(ctx)
	if err != nil {
		merged.Problems = append(problems, "membership: "+err.Error())
		return merged, Coverage{Problems: merged.Problems}
	}
	var mu sync.Mutex
	own := &owners{by: map[int]string{}}
	worlds := map[int]int{} // world size → ranks reporting it
	total := 0
	cov := j.each(ctx, ns, func(ctx context.Context, n cluster.Node) error {
		var rep node.EvidenceReply
		if err := j.Client.Do(ctx, n, http.MethodPost, node.PathEvidence, node.EvidenceRequest{CommPerRank: commPerRank}, &rep); err != nil {
			return err
		}
		b := rep.Bundle
		if b == nil {
			return &PeerError{Addr: n.Addr, Kind: KindGarbage, Msg: "its answer holds no evidence bundle"}
		}
		var rs []int
		for r, e := range b.Ranks {
			if e == nil || e.Rank != r || r < 0 || r >= evidence.MaxWorld {
				return &PeerError{Addr: n.Addr, Kind: KindGarbage, Msg: fmt.Sprintf("its bundle's rank %d is malformed", r)}
			}
			rs = append(rs, r)
		}
		sort.Ints(rs)
		kept := own.claim(n, rs)
		keep := map[int]bool{}
		for _, r := range kept {
			keep[r] = true
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range kept {
			e := b.Ranks[r]
			e.Node = n.Addr
			nodeText(e)
			merged.Ranks[r] = e
		}
		for _, c := range b.Comm {
			if keep[c.Rank] {
				merged.Comm = append(merged.Comm, c)
			}
		}
		if b.World > 0 {
			worlds[b.World] += len(kept)
		}
		for _, d := range b.FRDumps {
			if keep[d.Rank] && total+len(d.Data) <= maxDumpBytes {
				total += len(d.Data)
				merged.FRDumps = append(merged.FRDumps, d)
			}
		}
		for _, g := range b.GPU {
			if g.Host == "" {
				g.Host = n.Host
			}
			merged.GPU = append(merged.GPU, g)
		}
		for _, p := range b.Problems {
			merged.Problems = append(merged.Problems, nodeSaid(n, p))
		}
		for _, c := range b.Conflicts {
			merged.Conflicts = append(merged.Conflicts, nodeSaid(n, c))
		}
		return nil
	})
	for _, m := range cov.Missing {
		rs := ranksOf(m.Node)
		for _, r := range rs {
			if merged.Ranks[r] == nil {
				merged.Unreachable[r] = fmt.Sprintf("its node %s did not answer: %s: %s", nodeWords(m.Node), m.Err.Kind, m.Err.Msg)
			}
		}
		if len(rs) == 0 {
			merged.Problems = append(merged.Problems, fmt.Sprintf("%s never answered, so which ranks it holds is not known", nodeWords(m.Node)))
		}
	}
	best, n := 0, -1
	for ws, c := range worlds {
		if c > n || (c == n && ws > best) {
			best, n = ws, c
		}
	}
	if len(worlds) > 1 {
		merged.Conflicts = append(merged.Conflicts, fmt.Sprintf("the nodes report different world sizes; %d, which most ranks report, is used", best))
	}
	merged.World = best
	merged.Problems = append(append(problems, merged.Problems...), own.lies...)
	merged.Conflicts = append(merged.Conflicts, own.conflicts...)
	sort.SliceStable(merged.Comm, func(a, b int) bool {
		if merged.Comm[a].Rank != merged.Comm[b].Rank {
			return merged.Comm[a].Rank < merged.Comm[b].Rank
		}
		return merged.Comm[a].TimestampUS < merged.Comm[b].TimestampUS
	})
	evidence.AnalyzeFR(ctx, merged)
	merged.FRDumps = nil
	cov.Problems = append(cov.Problems, problems...)
	return merged, cov
}

// GPU asks every node for its GPUs. A node's report with more devices
// than a node can hold (gpu.MaxDevices) is garbage, not a node; one
// without a host is named by its node.
func (j *Job) GPU(ctx context.Context) ([]gpu.Report, Coverage, error) {
	ns, problems, err := j.nodes(ctx)
	if err != nil {
		return nil, Coverage{Problems: problems}, err
	}
	var mu sync.Mutex
	var reps []gpu.Report
	cov := j.each(ctx, ns, func(ctx context.Context, n cluster.Node) error {
		var rep node.GPUReply
		if err := j.Client.Do(ctx, n, http.MethodPost, node.PathGPU, node.GPURequest{}, &rep); err != nil {
			return err
		}
		r := rep.Report
		if len(r.Devices) > gpu.MaxDevices || len(r.Xids) > gpu.MaxXidEvents {
			return &PeerError{Addr: n.Addr, Kind: KindGarbage, Msg: fmt.Sprintf("its GPU report lists %d devices and %d Xid events (at most %d and %d)", len(r.Devices), len(r.Xids), gpu.MaxDevices, gpu.MaxXidEvents)}
		}
		if r.Source == "" && r.Status.State == "" {
			return &PeerError{Addr: n.Addr, Kind: KindGarbage, Msg: "its answer holds no GPU report"}
		}
		if r.Host == "" {
			r.Host = n.Host
		}
		mu.Lock()
		defer mu.Unlock()
		reps = append(reps, r)
		return nil
	})
	cov.Problems = append(problems, cov.Problems...)
	sort.SliceStable(reps, func(a, b int) bool { return reps[a].Host < reps[b].Host })
	return reps, cov, j.strict(cov)
}
