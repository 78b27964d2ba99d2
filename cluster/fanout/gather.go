package fanout

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// A node's answer is its text, the job's text it passes on included: the
// coordinator quotes what a node composed (a problem line, a rank's
// ending) as a whole, so that nothing a node sends reads as the
// coordinator's own words (jobtext).

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

// ownership decides which node speaks for each rank, once every answer
// is in (never first-come): a rank belongs to the node that registered
// it; a node whose ranks are not known may speak only for ranks no other
// node registered; and a rank two nodes answer for is refused for both,
// and said.
type ownership struct {
	registered map[int][]string // rank → the nodes that registered it
	claims     map[int][]string // rank → the nodes whose answer kept it
	lies       []string
}

func newOwnership(ns []cluster.Node) *ownership {
	o := &ownership{registered: map[int][]string{}, claims: map[int][]string{}}
	for _, n := range ns {
		for _, r := range ranksOf(n) {
			o.registered[r] = append(o.registered[r], n.Addr)
		}
	}
	return o
}

// claim records what n answered for; ranks it may not speak for are
// dropped and said. Called in a fixed order after the fan-out.
func (o *ownership) claim(n cluster.Node, ranks []int) {
	ok, lies := claims(n, ranks)
	if len(lies) > 0 {
		o.lies = append(o.lies, fmt.Sprintf("%s answered for ranks %s, which membership registered to no rank of it (%s): dropped", evidence.NodeWords(n), rankset.Format(lies), evidence.RanksWords(n.Ranks)))
	}
	if ranksOf(n) == nil {
		// Its ranks are not known: those another node registered are not
		// its to speak for.
		var others []int
		keep := ok[:0]
		for _, r := range ok {
			if reg := o.registered[r]; len(reg) > 0 && !slices.Contains(reg, n.Addr) {
				others = append(others, r)
				continue
			}
			keep = append(keep, r)
		}
		ok = keep
		if len(others) > 0 {
			o.lies = append(o.lies, fmt.Sprintf("%s (%s), whose ranks membership does not know, answered for ranks %s, which other nodes registered: dropped", jobtext.Quote(n.Host, jobtext.Name), evidence.AddrWords(n.Addr), rankset.Format(others)))
		}
	}
	for _, r := range ok {
		if !slices.Contains(o.claims[r], n.Addr) {
			o.claims[r] = append(o.claims[r], n.Addr)
		}
	}
}

// resolve is the owner of each rank, and the ranks refused because more
// than one node answered for them, each with why.
func (o *ownership) resolve() (owner map[int]string, refused map[int]string) {
	owner, refused = map[int]string{}, map[int]string{}
	for r, addrs := range o.claims {
		if len(addrs) == 1 {
			owner[r] = addrs[0]
			continue
		}
		refused[r] = fmt.Sprintf("%d nodes answered for it (%s): a rank lives on one node, so no answer for it is used", len(addrs), clipList(addrs, 4))
	}
	return owner, refused
}

// conflicts are the refused ranks as lines, merged by reason.
func conflictLines(refused map[int]string) []string {
	by := map[string][]int{}
	for r, why := range refused {
		by[why] = append(by[why], r)
	}
	var out []string
	for why, rs := range by {
		out = append(out, fmt.Sprintf("ranks %s: %s", rankset.Format(rs), why))
	}
	sort.Strings(out)
	return out
}

func clipList(xs []string, n int) string {
	xs = slices.Clone(xs)
	sort.Strings(xs)
	for i := range xs {
		xs[i] = evidence.AddrWords(xs[i])
	}
	if len(xs) > n {
		return fmt.Sprintf("%s and %d more", strings.Join(xs[:n], ", "), len(xs)-n)
	}
	return strings.Join(xs, ", ")
}

// Bounds on what one node's answer may add to the data-quality lines: a
// node's own problems are a handful; thousands are noise or an attack
// (issue 23's red team: 120 MiB of them).
const maxNodeLines = 64

// nodeLines are a node's own lines, quoted after its name (clipped), and
// bounded in number (the rest counted).
func nodeLines(n cluster.Node, lines []string) []string {
	out := make([]string, 0, min(len(lines), maxNodeLines+1))
	for i, l := range lines {
		if i == maxNodeLines {
			out = append(out, fmt.Sprintf("%s: and %d more lines of its own, left out", jobtext.Quote(n.Host, jobtext.Name), len(lines)-i))
			break
		}
		out = append(out, nodeSaid(n, l)) // quoted and clipped
	}
	return out
}

// answered is one node's answer, kept until every node's is in.
type answered[T any] struct {
	n   cluster.Node
	rep T
}

// settle runs ownership over the answers in a fixed order (by address).
func settle[T any](ns []cluster.Node, as []answered[T], ranks func(T) []int) (owner map[int]string, refused map[int]string, lies []string) {
	sort.Slice(as, func(a, b int) bool { return as[a].n.Addr < as[b].n.Addr })
	o := newOwnership(ns)
	for _, a := range as {
		o.claim(a.n, ranks(a.rep))
	}
	owner, refused = o.resolve()
	return owner, refused, o.lies
}

// Stacks captures every rank's threads through its node's daemon.
func (j *Job) Stacks(ctx context.Context, ranks string) ([]stacks.Process, evidence.Coverage, error) {
	ns, problems, err := j.nodes(ctx)
	if err != nil {
		return nil, evidence.Coverage{Problems: problems}, err
	}
	var mu sync.Mutex
	var as []answered[node.StacksReply]
	cov := j.each(ctx, ns, func(ctx context.Context, n cluster.Node) error {
		var rep node.StacksReply
		if err := j.Client.Do(ctx, n, http.MethodPost, node.PathStacks, node.StacksRequest{Ranks: ranks}, &rep); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		as = append(as, answered[node.StacksReply]{n, rep})
		return nil
	})
	owner, refused, lies := settle(ns, as, func(rep node.StacksReply) []int {
		var rs []int
		for _, p := range rep.Processes {
			if p.Rank >= 0 {
				rs = append(rs, p.Rank)
			}
		}
		return rs
	})
	var procs []stacks.Process
	for _, a := range as {
		for _, p := range a.rep.Processes {
			if p.Rank >= 0 && owner[p.Rank] != a.n.Addr {
				continue
			}
			if p.Host == "" {
				p.Host = a.n.Host
			}
			procs = append(procs, p)
		}
		problems = append(problems, nodeLines(a.n, a.rep.Problems)...)
	}
	cov.Problems = append(append(append(problems, cov.Problems...), lies...), conflictLines(refused)...)
	sort.Slice(procs, func(a, b int) bool {
		if procs[a].Rank != procs[b].Rank {
			return procs[a].Rank < procs[b].Rank
		}
		return procs[a].PID < procs[b].PID
	})
	return procs, cov, j.strict(cov)
}

// FlightRecorder snapshots every torch rank through its node's daemon.
func (j *Job) FlightRecorder(ctx context.Context, ranks string, onlyActive bool) ([]evidence.FRDump, evidence.Coverage, error) {
	ns, problems, err := j.nodes(ctx)
	if err != nil {
		return nil, evidence.Coverage{Problems: problems}, err
	}
	var mu sync.Mutex
	var as []answered[node.FRReply]
	cov := j.each(ctx, ns, func(ctx context.Context, n cluster.Node) error {
		var rep node.FRReply
		if err := j.Client.Do(ctx, n, http.MethodPost, node.PathFR, node.FRRequest{Ranks: ranks, OnlyActive: onlyActive}, &rep); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		as = append(as, answered[node.FRReply]{n, rep})
		return nil
	})
	owner, refused, lies := settle(ns, as, func(rep node.FRReply) []int {
		var rs []int
		for _, d := range rep.Dumps {
			rs = append(rs, d.Rank)
		}
		return rs
	})
	var dumps []evidence.FRDump
	total := 0
	for _, a := range as {
		for _, d := range a.rep.Dumps {
			if owner[d.Rank] != a.n.Addr {
				continue
			}
			if total+len(d.Data) > maxDumpBytes {
				problems = append(problems, fmt.Sprintf("rank %d's Flight Recorder left out: the dumps already hold %d MiB", d.Rank, total>>20))
				continue
			}
			total += len(d.Data)
			dumps = append(dumps, d)
		}
		problems = append(problems, nodeLines(a.n, a.rep.Problems)...)
	}
	cov.Problems = append(append(append(problems, cov.Problems...), lies...), conflictLines(refused)...)
	sort.Slice(dumps, func(a, b int) bool { return dumps[a].Rank < dumps[b].Rank })
	return dumps, cov, j.strict(cov)
}

// maxDumpBytes bounds the Flight Recorder dumps one fan-out holds.
const maxDumpBytes = 1 << 30

// Evidence gathers every node's bundle and merges them into one: the
// whole job's. A node that does not answer makes its ranks unreachable
// (said per rank), never a failure; the Flight Recorder dumps of every
// node are analysed together.
func (j *Job) Evidence(ctx context.Context, commPerRank int) (*evidence.Bundle, evidence.Coverage) {
	return j.evidence(ctx, node.EvidenceRequest{CommPerRank: commPerRank})
}

// Pulse is every node's liveness and ring progress, merged as Evidence is.
func (j *Job) Pulse(ctx context.Context) (*evidence.Bundle, evidence.Coverage) {
	return j.evidence(ctx, node.EvidenceRequest{Pulse: true, CommPerRank: evidence.PulseCommPerRank})
}

func (j *Job) evidence(ctx context.Context, req node.EvidenceRequest) (*evidence.Bundle, evidence.Coverage) {
	merged := &evidence.Bundle{Ranks: map[int]*evidence.RankEvidence{}, Unreachable: map[int]string{}}
	ns, problems, err := j.nodes(ctx)
	if err != nil {
		merged.Problems = append(problems, "membership: "+err.Error())
		return merged, evidence.Coverage{Problems: merged.Problems}
	}
	var mu sync.Mutex
	var as []answered[*evidence.Bundle]
	cov := j.each(ctx, ns, func(ctx context.Context, n cluster.Node) error {
		var rep node.EvidenceReply
		if err := j.Client.Do(ctx, n, http.MethodPost, node.PathEvidence, req, &rep); err != nil {
			return err
		}
		b := rep.Bundle
		if b == nil {
			return &evidence.PeerError{Addr: n.Addr, Kind: KindGarbage, Msg: "its answer holds no evidence bundle"}
		}
		for r, e := range b.Ranks {
			if e == nil || e.Rank != r || r < 0 || r >= evidence.MaxWorld {
				return &evidence.PeerError{Addr: n.Addr, Kind: KindGarbage, Msg: fmt.Sprintf("its bundle's rank %d is malformed", r)}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		as = append(as, answered[*evidence.Bundle]{n, b})
		return nil
	})
	owner, refused, lies := settle(ns, as, func(b *evidence.Bundle) []int {
		rs := make([]int, 0, len(b.Ranks))
		for r := range b.Ranks {
			rs = append(rs, r)
		}
		sort.Ints(rs)
		return rs
	})
	worlds := map[int]int{} // world size → ranks reporting it
	total := 0
	for _, a := range as {
		n, b := a.n, a.rep
		kept := 0
		for r, e := range b.Ranks {
			if owner[r] == n.Addr {
				e.Node = n.Addr
				nodeText(e)
				merged.Ranks[r] = e
				kept++
			}
		}
		for _, c := range b.Comm {
			if owner[c.Rank] == n.Addr {
				merged.Comm = append(merged.Comm, c)
			}
		}
		if b.World > 0 {
			worlds[b.World] += kept
		}
		for _, d := range b.FRDumps {
			if owner[d.Rank] == n.Addr && total+len(d.Data) <= maxDumpBytes {
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
		merged.Problems = append(merged.Problems, nodeLines(n, b.Problems)...)
		merged.Conflicts = append(merged.Conflicts, nodeLines(n, b.Conflicts)...)
		b.Problems, b.Conflicts = nil, nil
	}
	// A rank more than one node answered for is known to exist, but none
	// of what was said of it is believed.
	for r, why := range refused {
		merged.Unreachable[r] = why
	}
	for _, m := range cov.Missing {
		rs := ranksOf(m.Node)
		for _, r := range rs {
			if merged.Ranks[r] == nil {
				merged.Unreachable[r] = fmt.Sprintf("its node %s did not answer: %s: %s", evidence.NodeWords(m.Node), m.Err.Kind, m.Err.Msg)
			}
		}
		if len(rs) == 0 {
			merged.Problems = append(merged.Problems, fmt.Sprintf("%s never answered, so which ranks it holds is not known", evidence.NodeWords(m.Node)))
		}
	}
	best := evidence.MajorityWorld(worlds)
	if len(worlds) > 1 {
		merged.Conflicts = append(merged.Conflicts, fmt.Sprintf("the nodes report different world sizes; %d, which most ranks report, is used", best))
	}
	merged.World = best
	merged.Problems = append(append(problems, merged.Problems...), lies...)
	merged.Conflicts = append(merged.Conflicts, conflictLines(refused)...)
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
func (j *Job) GPU(ctx context.Context) ([]gpu.Report, evidence.Coverage, error) {
	ns, problems, err := j.nodes(ctx)
	if err != nil {
		return nil, evidence.Coverage{Problems: problems}, err
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
			return &evidence.PeerError{Addr: n.Addr, Kind: KindGarbage, Msg: fmt.Sprintf("its GPU report lists %d devices and %d Xid events (at most %d and %d)", len(r.Devices), len(r.Xids), gpu.MaxDevices, gpu.MaxXidEvents)}
		}
		if r.Source == "" && r.Status.State == "" {
			return &evidence.PeerError{Addr: n.Addr, Kind: KindGarbage, Msg: "its answer holds no GPU report"}
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
