package diagnosis

// GPU evidence: which GPU each rank runs on (gpuView), the faults that
// make a rank the culprit of a stalled or dead job (gpu_fault,
// gpurules.go), and the signatures (spinning, idle, busy) that support
// or contradict the hang hypotheses. Without GPU reports, or with none
// that maps to a rank, nothing here changes the verdict.

import (
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

const (
	// gpuSlack: the kernel log's times are converted from the time since
	// boot, good to about a second; an event this close to a record is
	// not before it.
	gpuSlack = 2 * time.Second
	// gpuNoStartWindow: when nothing tells when the job started, an event
	// of this window before the diagnosis is taken (older ones are an
	// earlier run's, most likely).
	gpuNoStartWindow = 6 * time.Hour
	// gpuStaleMin, gpuStaleIntervals: a sample older than both (the
	// sampler's period) has its age said.
	gpuStaleMin       = 10 * time.Second
	gpuStaleIntervals = 3
	// maxGPULines bounds the GPU lines of one hypothesis or note, however
	// many GPUs.
	maxGPULines = 3
)

// gpuSlot is one GPU a rank runs on.
type gpuSlot struct {
	rep, dev int // indices into Input.GPU and its Devices
	mem      uint64
	// assumed: mapped by local rank = GPU index (no process listed), not
	// by the GPU's own process list.
	assumed bool
}

// gpuView is the job's GPUs as the diagnosis reads them.
type gpuView struct {
	in     Input
	byRank map[int][]gpuSlot // the GPU the rank uses most first
	onDev  map[[2]int][]int  // (report, device) → the ranks on it, sorted
	// now is, per report, the diagnosis's clock on that node (ns).
	now []int64
	// first and last are each rank's earliest and latest record (ns).
	first, last map[int]int64
	// hostIdx: reports by host; homeOf: each rank's node's reports;
	// homeRanks, repStall: each report's node's ranks, and when they last
	// made progress (ns, 0 unknown).
	hostIdx   map[string][]int
	homeOf    map[int][]int
	homeRanks [][]int
	repStall  []int64
	// jobFirst, jobStall: the job's earliest record and its last
	// progress (ns, 0 unknown).
	jobFirst, jobStall int64
	notes              []string
}

// newGPUView maps the ranks to their GPUs; nil when there are no GPU
// reports.
func newGPUView(in Input) *gpuView {
	if len(in.GPU) == 0 {
		return nil
	}
	v := &gpuView{in: in, byRank: map[int][]gpuSlot{}, onDev: map[[2]int][]int{}, now: make([]int64, len(in.GPU)),
		first: map[int]int64{}, last: map[int]int64{}}
	v.times()
	v.hostIdx, v.homeOf, v.homeRanks = map[string][]int{}, map[int][]int{}, make([][]int, len(in.GPU))
	for i, g := range in.GPU {
		if g.Host != "" {
			v.hostIdx[g.Host] = append(v.hostIdx[g.Host], i)
		}
	}
	for _, f := range sortedFacts(in.Ranks) {
		hs := v.homes(f)
		v.homeOf[f.Rank] = hs
		for _, i := range hs {
			v.homeRanks[i] = append(v.homeRanks[i], f.Rank)
		}
	}
	v.jobStall = v.stall(nil)
	for _, t := range v.first {
		if v.jobFirst == 0 || t < v.jobFirst {
			v.jobFirst = t
		}
	}
	v.repStall = make([]int64, len(in.GPU))
	for i := range in.GPU {
		v.repStall[i] = v.stall(v.homeRanks[i])
	}
	v.byProcesses()
	for i := range in.GPU {
		v.byLocalRank(i)
	}
	for r, ss := range v.byRank {
		for _, s := range ss {
			k := [2]int{s.rep, s.dev}
			v.onDev[k] = append(v.onDev[k], r)
		}
	}
	for k := range v.onDev {
		sort.Ints(v.onDev[k])
	}
	var anyNow int64
	for _, f := range in.Ranks {
		anyNow = max(anyNow, f.NowNS)
	}
	for i := range in.GPU {
		for _, r := range v.homeRanks[i] {
			v.now[i] = max(v.now[i], in.Ranks[r].NowNS)
		}
		if v.now[i] == 0 {
			v.now[i] = anyNow
		}
	}
	return v
}

// times are each rank's first and last record, on its own clock.
func (v *gpuView) times() {
	for _, c := range v.in.Comm {
		if c.TimestampUS <= 0 {
			continue
		}
		ts := c.TimestampUS * 1000
		if f, ok := v.first[c.Rank]; !ok || ts < f {
			v.first[c.Rank] = ts
		}
	}
	for r, f := range v.in.Ranks {
		a := f.Activity
		if a == nil {
			continue
		}
		last := max(a.LastComm, a.LastCommDone)
		if n := len(a.Steps); n > 0 {
			last = max(last, a.Steps[n-1])
			if fs, ok := v.first[r]; !ok || a.Steps[0]*1000 < fs {
				v.first[r] = a.Steps[0] * 1000
			}
		}
		if a.LastComm > 0 {
			if fs, ok := v.first[r]; !ok || a.LastComm*1000 < fs {
				v.first[r] = a.LastComm * 1000
			}
		}
		if last > 0 {
			v.last[r] = last * 1000
		}
	}
	for r, t := range v.first {
		if t <= 0 || v.in.Ranks[r] == nil {
			delete(v.first, r)
		}
	}
}

// nodeHost is the host of a node daemon's address.
func nodeHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// homes are the reports of the rank's node: the one whose host its
// evidence came from, or, read here (node scope), the one report.
func (v *gpuView) homes(f *RankFacts) []int {
	if f.Node != "" {
		out := v.hostIdx[nodeHost(f.Node)]
		if h := nodeHost(f.Node); h != f.Node {
			out = append(slices.Clone(out), v.hostIdx[f.Node]...)
		}
		return out
	}
	if len(v.in.GPU) == 1 {
		return []int{0}
	}
	return nil
}

// byProcesses maps each rank to the GPUs whose processes name it: those
// of its own node first, then those of its own pid; a rank listed on
// GPUs of several nodes that neither tells apart is left unmapped.
func (v *gpuView) byProcesses() {
	type cand struct {
		gpuSlot
		pid uint32
	}
	cands := map[int][]cand{}
	for i, g := range v.in.GPU {
		for j, d := range g.Devices {
			for _, p := range d.Processes {
				if p.Rank >= 0 && v.in.Ranks[p.Rank] != nil {
					cands[p.Rank] = append(cands[p.Rank], cand{gpuSlot{rep: i, dev: j, mem: p.UsedMemory}, p.PID})
				}
			}
		}
	}
	var ambiguous []int
	for r, cs := range cands {
		f := v.in.Ranks[r]
		if hs := v.homeOf[r]; len(hs) > 0 {
			// Its node's GPUs are known: a rank of that number on another
			// node is another job's.
			cs = slices.DeleteFunc(cs, func(c cand) bool { return !slices.Contains(hs, c.rep) })
			if len(cs) == 0 {
				continue
			}
		}
		if f.PID > 0 {
			if m := slices.DeleteFunc(slices.Clone(cs), func(c cand) bool { return c.pid != uint32(f.PID) }); len(m) > 0 {
				cs = m
			}
		}
		if slices.ContainsFunc(cs, func(c cand) bool { return c.rep != cs[0].rep }) {
			ambiguous = append(ambiguous, r)
			continue
		}
		var ss []gpuSlot
		for _, c := range cs {
			if !slices.ContainsFunc(ss, func(s gpuSlot) bool { return s.dev == c.dev }) {
				ss = append(ss, c.gpuSlot)
			} else if k := slices.IndexFunc(ss, func(s gpuSlot) bool { return s.dev == c.dev }); c.mem > ss[k].mem {
				ss[k].mem = c.mem
			}
		}
		// The GPU it uses most is its own (a stray context on GPU 0,
		// a common mistake, holds little memory).
		g := v.in.GPU[cs[0].rep]
		sort.SliceStable(ss, func(a, b int) bool {
			if ss[a].mem != ss[b].mem {
				return ss[a].mem > ss[b].mem
			}
			ia, ib := g.Devices[ss[a].dev].Index, g.Devices[ss[b].dev].Index
			if (ia == f.LocalRank) != (ib == f.LocalRank) {
				return ia == f.LocalRank
			}
			return ia < ib
		})
		v.byRank[r] = ss
	}
	if len(ambiguous) > 0 {
		sort.Ints(ambiguous)
		v.notes = append(v.notes, fmt.Sprintf("%s listed on the GPUs of several nodes, none of them told apart by node or pid: not mapped to a GPU", rankWords(ambiguous)))
	}
}

// byLocalRank maps the ranks of report i's node that no GPU lists by
// their local rank, as GPU index: when no GPU of the node lists any
// process (a container hides them) and the node's ranks' local ranks are
// its GPU indices one to one; or when the ranks the GPUs do list all sit
// on the GPU of their local rank and the rank's (a dead rank's process
// is no longer on its GPU) lists nobody. Either is an assumption, and
// weighs less.
func (v *gpuView) byLocalRank(i int) {
	g := v.in.GPU[i]
	if len(g.Devices) == 0 {
		return
	}
	idx := map[int]int{} // GPU index → device
	listed := false
	for j, d := range g.Devices {
		idx[d.Index] = j
		listed = listed || len(d.Processes) > 0 || d.ProcessesCut > 0
	}
	home := v.homeRanks[i]
	var unmapped []int
	confirmed := 0
	for _, r := range home {
		ss, ok := v.byRank[r]
		if !ok {
			unmapped = append(unmapped, r)
			continue
		}
		if ss[0].rep != i {
			continue
		}
		if g.Devices[ss[0].dev].Index != v.in.Ranks[r].LocalRank {
			return // the convention does not hold here
		}
		confirmed++
	}
	if len(unmapped) == 0 {
		return
	}
	claims := map[int][]int{}
	for _, r := range unmapped {
		claims[v.in.Ranks[r].LocalRank] = append(claims[v.in.Ranks[r].LocalRank], r)
	}
	if !listed {
		ok := len(home) == len(g.Devices) && len(claims) == len(home)
		for l := range claims {
			_, has := idx[l]
			ok = ok && has && l >= 0
		}
		if !ok {
			v.notes = append(v.notes, fmt.Sprintf("the GPUs%s list no processes, and the local ranks of its ranks are not its GPU indices one to one: no rank is mapped to a GPU there", onHost(g.Host)))
			return
		}
	} else if confirmed == 0 {
		return
	}
	for l, rs := range claims {
		j, has := idx[l]
		if l < 0 || !has || len(rs) != 1 || len(g.Devices[j].Processes) > 0 {
			continue
		}
		v.byRank[rs[0]] = []gpuSlot{{rep: i, dev: j, assumed: true}}
	}
}

// dev is a slot's device state and report.
func (v *gpuView) dev(s gpuSlot) (*gpu.Report, *gpu.DeviceState) {
	g := &v.in.GPU[s.rep]
	return g, &g.Devices[s.dev]
}

// primary is the rank's own GPU, if known.
func (v *gpuView) primary(r int) (gpuSlot, bool) {
	ss := v.byRank[r]
	if len(ss) == 0 {
		return gpuSlot{}, false
	}
	return ss[0], true
}

// stall is when the ranks (all when none given) last made progress (ns).
func (v *gpuView) stall(ranks []int) int64 {
	var t int64
	if len(ranks) == 0 {
		for _, l := range v.last {
			t = max(t, l)
		}
		return t
	}
	for _, r := range ranks {
		t = max(t, v.last[r])
	}
	return t
}

// age is how old report i's sample was when the diagnosis read it, when
// that is old enough to say (over gpuStaleMin and gpuStaleIntervals of
// its period); 0 otherwise.
func (v *gpuView) age(i int) time.Duration {
	g := v.in.GPU[i]
	if g.SampledAt.IsZero() || v.now[i] == 0 {
		return 0
	}
	a := time.Duration(v.now[i] - g.SampledAt.UnixNano())
	if a > gpuStaleMin && a > gpuStaleIntervals*time.Duration(g.IntervalMS)*time.Millisecond {
		return a
	}
	return 0
}

func (v *gpuView) ageWords(i int) string {
	if a := v.age(i); a > 0 {
		what := "its last sample"
		if v.in.GPU[i].Source == gpu.SourceRings {
			what = "the last sample in the rings"
		}
		return fmt.Sprintf(" (%s, %s before the diagnosis)", what, a.Round(time.Second))
	}
	return ""
}

// sigUsable: the report's sample shows the job as it is stuck, not as
// it was before it stalled (a busy GPU of a job still stepping says
// nothing of the hang).
func (v *gpuView) sigUsable(i int) bool {
	g := v.in.GPU[i]
	if g.SampledAt.IsZero() {
		return true
	}
	s := v.repStall[i]
	if s == 0 {
		s = v.jobStall
	}
	return s == 0 || g.SampledAt.UnixNano()+int64(gpuSlack) >= s
}

// gpuName is "rank 5's GPU 5 on node-b".
func (v *gpuView) gpuName(ranks []int, s gpuSlot) string {
	g, d := v.dev(s)
	if len(ranks) == 0 {
		return fmt.Sprintf("GPU %d%s", d.Index, onHost(g.Host))
	}
	return fmt.Sprintf("%s's GPU %d%s", rankWords(ranks), d.Index, onHost(g.Host))
}

func onHost(h string) string {
	if h == "" {
		return ""
	}
	return " on " + jobtext.Quote(h, jobtext.Name)
}

// sigOf is the rank's own GPU's signature when its sample is usable.
func (v *gpuView) sigOf(r int) (gpu.Signature, bool) {
	s, ok := v.primary(r)
	if !ok || !v.sigUsable(s.rep) {
		return "", false
	}
	_, d := v.dev(s)
	return d.Signature, true
}

// bySig splits ranks by their GPU's signature (ranks without one left out).
func (v *gpuView) bySig(ranks []int) map[gpu.Signature][]int {
	out := map[gpu.Signature][]int{}
	for _, r := range ranks {
		if sig, ok := v.sigOf(r); ok {
			out[sig] = append(out[sig], r)
		}
	}
	return out
}

// counted is how many of ranks have a usable signature.
func counted(by map[gpu.Signature][]int) int {
	n := 0
	for _, rs := range by {
		n += len(rs)
	}
	return n
}

// sigLine is "GPUs of ranks 0-6 spin at 100% util, 71-75 W of 700 W",
// with the samples' age when old.
func (v *gpuView) sigLine(ranks []int, verb string) string {
	var util, power, limit []float64
	oldest, oldestAge := -1, time.Duration(0)
	for _, r := range ranks {
		s, ok := v.primary(r)
		if !ok {
			continue
		}
		_, d := v.dev(s)
		if d.Utilization != nil {
			util = append(util, float64(d.Utilization.GPU))
		}
		if d.PowerW != nil {
			power = append(power, *d.PowerW)
		}
		if d.PowerLimitW != nil {
			limit = append(limit, *d.PowerLimitW)
		}
		if a := v.age(s.rep); a > oldestAge {
			oldest, oldestAge = s.rep, a
		}
	}
	var b strings.Builder
	if len(ranks) == 1 {
		s, _ := v.primary(ranks[0])
		b.WriteString(v.gpuName(ranks, s))
	} else {
		fmt.Fprintf(&b, "the GPUs of %s", rankWords(ranks))
	}
	b.WriteString(" " + verb)
	if u := spread(util); u != "" {
		b.WriteString(" at " + u + "% util")
	}
	if p := spread(power); p != "" {
		b.WriteString(", " + p + " W")
		if l := spread(limit); l != "" {
			b.WriteString(" of " + l + " W")
		}
	}
	if oldest >= 0 {
		b.WriteString(v.ageWords(oldest)) // the oldest sample among them
	}
	return b.String()
}

// spread is "70" when all agree (rounded), else "68-72".
func spread(xs []float64) string {
	if len(xs) == 0 {
		return ""
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	if fmt.Sprintf("%.0f", lo) == fmt.Sprintf("%.0f", hi) {
		return fmt.Sprintf("%.0f", lo)
	}
	return fmt.Sprintf("%.0f-%.0f", lo, hi)
}

// clock is a wall time for an evidence line: the time of day, with the
// date when it is a day or more from ref.
func clock(t time.Time, ref int64) string {
	t = t.UTC()
	if ref > 0 {
		if d := time.Duration(ref - t.UnixNano()); d > 20*time.Hour || d < -20*time.Hour {
			return t.Format("2006-01-02 15:04:05 UTC")
		}
	}
	return t.Format("15:04:05")
}

// notRead says, in one line, which nodes' GPUs could not be read: the
// verdict did not weigh GPU state there. A node without GPUs (no_device)
// is no gap and is not named, nor one without NVIDIA's library: that is
// almost always a node without NVIDIA GPUs (a CPU job), and saying so in
// every verdict would be noise (gpu_status says it when asked).
func (v *gpuView) notRead() string {
	by := map[string][]string{}
	var order []string
	n := 0
	for _, g := range v.in.GPU {
		if len(g.Devices) > 0 || g.Status.State == gpu.StateOK || g.Status.State == gpu.StateNoDevice || g.Status.State == gpu.StateNoLibrary {
			continue
		}
		k := string(g.Status.State)
		if g.Status.State == "" {
			k = g.Source
		}
		if by[k] == nil {
			order = append(order, k)
		}
		host := g.Host
		if host == "" {
			host = "this node"
		}
		by[k] = append(by[k], host)
		n++
	}
	if n == 0 {
		return ""
	}
	var parts []string
	for _, k := range order {
		hs := by[k]
		p := k + ": " + strings.Join(hs[:min(len(hs), 3)], ", ")
		if len(hs) > 3 {
			p += fmt.Sprintf(" and %d more", len(hs)-3)
		}
		parts = append(parts, p)
	}
	return fmt.Sprintf("GPUs not read on %d node(s) (%s): the verdict does not weigh their GPU state", n, strings.Join(parts, "; "))
}

// unmappedNote says when GPUs were read but no rank of the job could be
// placed on one.
func (v *gpuView) unmappedNote() string {
	devs := 0
	for _, g := range v.in.GPU {
		devs += len(g.Devices)
	}
	if devs == 0 || len(v.byRank) > 0 || len(v.notes) > 0 {
		return ""
	}
	return fmt.Sprintf("%d GPU(s) read, but no rank of the job is listed on any (their processes name no rank of it): GPU state not weighed", devs)
}

// rangesOf formats ranks for a line.
func rangesOf(rs []int) string { return shortSet(rankset.Format(rs)) }
