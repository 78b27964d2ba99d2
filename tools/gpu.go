package tools

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// GPUStatusParams are the arguments of gpu_status.
type GPUStatusParams struct {
	Detail     string `json:"detail,omitempty" jsonschema:"enum=summary,enum=devices" jsonschema_description:"summary (default), or devices: each GPU, paged"`
	Host       string `json:"host,omitempty" jsonschema_description:"Only this node"`
	MaxDevices int    `json:"max_devices,omitempty" jsonschema:"minimum=0,maximum=1024" jsonschema_description:"Devices per page (detail devices; default 64)"`
	Offset     int    `json:"offset,omitempty" jsonschema:"minimum=0" jsonschema_description:"First device (detail devices)"`
}

// GPUNode is one node's GPUs in one line.
type GPUNode struct {
	Host   string    `json:"host"`
	State  gpu.State `json:"state"`
	Source string    `json:"source"`
	// Devices counts the node's GPUs by signature ("8 spinning").
	Devices   int       `json:"devices"`
	SampledAt time.Time `json:"sampled_at,omitzero"`
	Line      string    `json:"line"`
}

// GPUDevice is one GPU's snapshot with its node.
type GPUDevice struct {
	Host string `json:"host"`
	gpu.DeviceState
}

// GPUStatusResult is the GPUs of this node or the whole job, bounded.
type GPUStatusResult struct {
	// Summary is the merged account: Xid events first, then the odd GPUs
	// with host, index and rank, then the identical ones collapsed.
	Summary string `json:"summary"`
	// Nodes is one line per node, the odd ones (no GPU data, faults, old
	// samples) first; NodesTotal counts them all.
	Nodes      []GPUNode `json:"nodes"`
	NodesTotal int       `json:"nodes_total"`
	// Devices (detail devices) is a page of the GPUs, faults first.
	Devices      []GPUDevice `json:"devices,omitempty"`
	DevicesTotal int         `json:"devices_total"`
	Truncated    bool        `json:"truncated,omitempty"`
	NextOffset   *int        `json:"next_offset,omitempty"`
	// Coverage says which nodes answered (the whole-job scope only).
	Coverage *CoverageView `json:"coverage,omitempty"`
	now      time.Time
}

// maxGPUNodes bounds the node lines of a result.
const maxGPUNodes = 64

// nodeHost names this node as the job's membership does.
func nodeHost() string { return cluster.HostName(os.Getenv) }

func gpuStatus(env *Env) Def {
	tool := mcplib.NewTool("gpu_status",
		mcplib.WithToolTitle("GPU state of the node or job"),
		mcplib.WithDescription("Use to check the GPUs (NVML): Xid errors, then the odd GPUs (lost, ECC faults, idle among spinning), then identical ones merged; live or from the rings."),
		schemas[GPUStatusParams, GPUStatusResult](env),
		hints(true, false, true, false),
	)
	h, call := typed(func(ctx context.Context, p GPUStatusParams) (GPUStatusResult, error) {
		return GPUStatus(ctx, env, p)
	})
	return Def{ServerTool: server.ServerTool{Tool: tool, Handler: h}, Call: call,
		Summary: "the GPUs' state (NVML, Xid errors): identical GPUs merged across nodes, the odd ones first with host, index and rank",
		Doc:     "What every GPU of the node (or, in the whole-job scope, of every node) is doing: Xid events first, then the GPUs that differ (lost, ECC or remap faults, idle among spinning) with host, index and rank, then identical GPUs merged across nodes with their ranges; one line per node with its NVML state. `detail: \"devices\"` pages each GPU's every field (`offset`/`max_devices`), `host` picks one node. Live from the node's sampler, else the newest round in its `gpu.*` rings (a dead job's last minutes); a node without GPUs says why."}
}

// GPUStatus answers gpu_status.
func GPUStatus(ctx context.Context, env *Env, p GPUStatusParams) (GPUStatusResult, error) {
	if p.MaxDevices == 0 {
		p.MaxDevices = 64
	}
	res := GPUStatusResult{now: time.Now()}
	reps, cov, err := env.scope().GPU(ctx)
	if err != nil {
		return GPUStatusResult{}, scopeError(err)
	}
	res.Coverage = coverageView(cov)
	if p.Host != "" {
		var sel []gpu.Report
		var hosts []string
		for _, r := range reps {
			if r.Host == p.Host {
				sel = append(sel, r)
			}
			hosts = append(hosts, hostText(r.Host))
		}
		if len(sel) == 0 {
			if len(hosts) > 20 {
				hosts = append(hosts[:20], fmt.Sprintf("and %d more", len(hosts)-20))
			}
			return GPUStatusResult{}, userErrorf("host %q: no node of that name answered; the hosts: %s", p.Host, strings.Join(hosts, ", "))
		}
		reps = sel
	}
	res.Summary = mergeGPUs(reps, res.now, gpu.MaxSummary)
	res.Nodes, res.NodesTotal = gpuNodes(reps, res.now)
	devs := oddFirst(reps)
	res.DevicesTotal = len(devs)
	if p.Detail == "devices" {
		end := min(len(devs), p.Offset+p.MaxDevices)
		if p.Offset < end {
			res.Devices = devs[p.Offset:end]
		}
		if end < len(devs) {
			res.Truncated, res.NextOffset = true, &end
		}
	}
	return res, nil
}

// gpuNodes is one line per node, the odd ones first, bounded.
func gpuNodes(reps []gpu.Report, now time.Time) ([]GPUNode, int) {
	type keyed struct {
		n   GPUNode
		odd int // 0 a fault, 1 no GPU data, 2 odd otherwise, 3 as the rest
	}
	var ks []keyed
	for _, r := range reps {
		n := GPUNode{Host: r.Host, State: r.Status.State, Source: r.Source, Devices: len(r.Devices), SampledAt: r.SampledAt}
		count := map[gpu.Signature]int{}
		var order []gpu.Signature
		odd := 3
		if r.Status.State != gpu.StateOK || len(r.Devices) == 0 {
			odd = 1
		}
		if len(r.Xids) > 0 {
			odd = 0
		}
		for _, d := range r.Devices {
			if count[d.Signature] == 0 {
				order = append(order, d.Signature)
			}
			count[d.Signature]++
			if d.Signature == gpu.SigLost || d.Signature == gpu.SigError {
				odd = 0
			}
		}
		var parts []string
		for _, s := range order {
			parts = append(parts, fmt.Sprintf("%d %s", count[s], s))
		}
		if len(order) > 1 {
			odd = min(odd, 2)
		}
		switch {
		case len(r.Devices) == 0:
			n.Line = fmt.Sprintf("%s: %s", jobtext.Word(string(r.Status.State)), jobtext.Quote(r.Status.Reason, jobtext.Message))
		default:
			n.Line = fmt.Sprintf("%d GPU(s): %s", len(r.Devices), strings.Join(parts, ", "))
		}
		if len(r.Xids) > 0 {
			n.Line += fmt.Sprintf("; %d Xid event(s)", len(r.Xids))
		}
		if age := r.Stale(now); age != "" {
			n.Line += "; " + age
			odd = min(odd, 2)
		}
		ks = append(ks, keyed{n, odd})
	}
	sort.SliceStable(ks, func(a, b int) bool { return ks[a].odd < ks[b].odd })
	out := make([]GPUNode, 0, min(len(ks), maxGPUNodes))
	for i, k := range ks {
		if i == maxGPUNodes {
			break
		}
		out = append(out, k.n)
	}
	return out, len(ks)
}

// howToSample says how a node gets a GPU sampler.
const howToSample = "to sample, run the node daemon (probing-mcp node, which the agent starts on local rank 0) or serve in the node scope, with PROBING_GPU not 0"

// devRanks are the ranks whose processes use a GPU.
func devRanks(s gpu.Snapshot) []int {
	var rs []int
	for _, pr := range s.Processes {
		if pr.Rank >= 0 {
			rs = append(rs, pr.Rank)
		}
	}
	sort.Ints(rs)
	return rs
}

// devGroup is identical GPUs across nodes.
type devGroup struct {
	sig   gpu.Signature
	why   string
	name  string
	devs  []GPUDevice
	hosts map[string]bool
}

// groupDevices merges identical GPUs across nodes (name and signature;
// a fault with its reason), faults first, then the smaller groups.
func groupDevices(reps []gpu.Report) []*devGroup {
	by := map[string]*devGroup{}
	var order []string
	for _, r := range reps {
		for _, d := range r.Devices {
			key := d.Name + "\x00" + string(d.Signature)
			if d.Signature == gpu.SigLost || d.Signature == gpu.SigError || d.Signature == gpu.SigUnknown {
				key += "\x00" + d.Why
			}
			g := by[key]
			if g == nil {
				g = &devGroup{sig: d.Signature, why: d.Why, name: d.Name, hosts: map[string]bool{}}
				by[key] = g
				order = append(order, key)
			}
			g.devs = append(g.devs, GPUDevice{Host: r.Host, DeviceState: d})
			g.hosts[r.Host] = true
		}
	}
	gs := make([]*devGroup, 0, len(order))
	for _, k := range order {
		gs = append(gs, by[k])
	}
	fault := func(g *devGroup) int {
		switch g.sig {
		case gpu.SigLost:
			return 0
		case gpu.SigError:
			return 1
		}
		return 2
	}
	sort.SliceStable(gs, func(a, b int) bool {
		if fault(gs[a]) != fault(gs[b]) {
			return fault(gs[a]) < fault(gs[b])
		}
		return len(gs[a].devs) < len(gs[b].devs)
	})
	return gs
}

// oddFirst is every GPU, the groups' order (faults, odd ones, the rest).
func oddFirst(reps []gpu.Report) []GPUDevice {
	var out []GPUDevice
	for _, g := range groupDevices(reps) {
		out = append(out, g.devs...)
	}
	return out
}

// devWhere is "node-3 GPU 5 (rank 29)".
func devWhere(d GPUDevice) string {
	s := fmt.Sprintf("%s GPU %d", hostText(d.Host), d.Index)
	if rs := devRanks(d.Snapshot); len(rs) > 0 {
		s += " (rank " + rankset.Short(rankset.Format(rs)) + ")"
	}
	return s
}

// maxOddListed bounds the GPUs named in one odd group's line.
const maxOddListed = 8

// mergeGPUs is the whole account within limit bytes: Xid events first,
// then the nodes without GPU data, then the GPU groups (faults, odd ones
// with host, index and rank, the largest collapsed). Every cut is said.
func mergeGPUs(reps []gpu.Report, now time.Time, limit int) string {
	devices := 0
	for _, r := range reps {
		devices += len(r.Devices)
	}
	var lines []string
	// Xid events: one line per kind of event, where it happened (host
	// and GPU, repeats counted) listed.
	type xk struct {
		kind string
		xid  uint64
	}
	type at struct{ host, gpu string }
	first := map[xk]gpu.XidEvent{}
	where := map[xk][]at{}
	times := map[xk]map[at]int{}
	var xorder []xk
	nx := 0
	for _, r := range reps {
		for _, e := range r.Xids {
			g := e.PCIBusID
			if e.GPU >= 0 {
				g = fmt.Sprint(e.GPU)
			}
			k, a := xk{e.Kind, e.Xid}, at{hostText(r.Host), jobtext.Word(g)}
			if _, ok := first[k]; !ok {
				xorder = append(xorder, k)
				first[k] = e
				times[k] = map[at]int{}
			}
			if times[k][a] == 0 {
				where[k] = append(where[k], a)
			}
			times[k][a]++
			nx++
		}
	}
	if nx > 0 {
		lines = append(lines, fmt.Sprintf("GPU errors (%d events):", nx))
		for _, k := range xorder {
			e := first[k]
			what := e.Meaning
			if e.Kind == "xid" {
				what = fmt.Sprintf("Xid %d: %s", e.Xid, e.Meaning)
			}
			var ws []string
			for _, a := range where[k] {
				w := a.host + " GPU " + a.gpu
				if len(where[k]) == 1 && e.PID > 0 {
					w += fmt.Sprintf(" (pid %d %s)", e.PID, jobtext.Quote(e.Process, jobtext.Name))
				}
				if n := times[k][a]; n > 1 {
					w += fmt.Sprintf(" ×%d", n)
				}
				ws = append(ws, w)
			}
			lines = append(lines, fmt.Sprintf("  %s on %s [%s]", what, shortList(ws, maxOddListed, "host= shows one node's"), e.Source))
		}
	}
	// Nodes without GPU data, by state and reason.
	type nk struct {
		state  gpu.State
		reason string
	}
	noData := map[nk][]string{}
	var norder []nk
	notSampled := false
	for _, r := range reps {
		if len(r.Devices) > 0 {
			continue
		}
		k := nk{r.Status.State, r.Status.Reason}
		if noData[k] == nil {
			norder = append(norder, k)
		}
		noData[k] = append(noData[k], hostText(r.Host))
		notSampled = notSampled || r.Status.State == gpu.StateNotSampled
	}
	for _, k := range norder {
		hs := noData[k]
		lines = append(lines, fmt.Sprintf("%d node(s) without GPU data, %s: %s: %s", len(hs), jobtext.Word(string(k.state)), jobtext.Quote(k.reason, jobtext.Message), shortList(hs, maxOddListed, "the nodes list has them")))
	}
	if notSampled {
		lines = append(lines, "To get GPU data: "+howToSample+".")
	}
	gs := groupDevices(reps)
	for i, g := range gs {
		name := "unnamed GPU"
		if g.name != "" {
			name = jobtext.Quote(g.name, jobtext.Name)
		}
		snaps := make([]gpu.Snapshot, len(g.devs))
		for j, d := range g.devs {
			snaps[j] = d.Snapshot
		}
		l := fmt.Sprintf("%d GPU(s) on %d node(s) (%s) %s", len(g.devs), len(g.hosts), name, g.sig)
		if len(g.devs) == 1 || i < len(gs)-1 {
			// An odd group: where each GPU is.
			var ws []string
			for _, d := range g.devs {
				ws = append(ws, devWhere(d))
			}
			l = fmt.Sprintf("%d GPU(s) (%s) %s on %s", len(g.devs), name, g.sig, shortList(ws, maxOddListed, "detail=devices lists them"))
		}
		if st := gpu.Stats(snaps, g.sig, g.why); st != "" {
			l += ": " + st
		}
		lines = append(lines, l)
	}
	var stales []string
	for _, r := range reps {
		if s := r.Stale(now); s != "" {
			stales = append(stales, hostText(r.Host)+" "+s)
		}
	}
	if len(stales) > 0 {
		lines = append(lines, "Old samples: "+shortList(stales, 4, "the nodes list has them"))
	}
	head := fmt.Sprintf("%d GPU(s) on %d node(s)", devices, len(reps))
	if nx > 0 {
		head += fmt.Sprintf("; %d Xid event(s)", nx)
	}
	return boundLines(append([]string{head + "."}, lines...), limit)
}

// hostText is a node's host name in a line: quoted (membership and the
// node say it).
func hostText(h string) string { return jobtext.Quote(h, jobtext.Name) }

// shortList joins at most n items, saying how many more and where they
// are.
func shortList(xs []string, n int, where string) string {
	if len(xs) <= n {
		return strings.Join(xs, ", ")
	}
	return strings.Join(xs[:n], ", ") + fmt.Sprintf(", and %d more (%s)", len(xs)-n, where)
}

// boundLines joins lines within limit bytes, saying how many were cut.
func boundLines(lines []string, limit int) string {
	var b strings.Builder
	for i, l := range lines {
		if len(l) > limit/4 {
			l = jobtext.Cut(l, limit/4) + " (line cut)"
		}
		tail := fmt.Sprintf("… %d more lines cut (narrow with host=, or detail=devices)", len(lines)-i)
		if b.Len()+len(l)+1 > limit-len(tail)-1 {
			b.WriteString(tail + "\n")
			return b.String()
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}
