package diagnosis

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// hangXid: the Xids that stop a rank's work on its GPU. The GPU's own
// faults (fallen off the bus, uncorrectable memory errors, a failed
// remap, firmware that stopped answering, an NVLink error) and a
// kernel's fault that killed the rank's context (13, 31, 43: usually the
// application's bug, still the rank that stopped). 63 (a retirement
// recorded, applied at the next reset) and 92 (corrected single-bit
// errors) stop nothing and are not weighed.
func hangXid(e gpu.XidEvent) bool {
	switch e.Kind {
	case "double_bit_ecc":
		return true
	case "xid":
	default:
		return false
	}
	switch e.Xid {
	case 13, 31, 43, 48, 61, 62, 64, 74, 79, 94, 95, 119, 120:
		return true
	}
	return false
}

// gpuFault is one GPU's fault and whether it is proof.
type gpuFault struct {
	slot  gpuSlot
	ranks []int  // the ranks on that GPU (or of the event's pid)
	what  string // "Xid 79 (GPU has fallen off the bus)"
	when  string // " at 14:02:11, 40s before the stall"
	at    time.Time
	conf  string
	// notProof: why it is only a note (before the job's first record).
	notProof string
	more     int // other fault events of the same GPU
}

func (f gpuFault) line(v *gpuView) string {
	s := v.gpuName(f.ranks, f.slot) + ": " + f.what + f.when
	if f.more > 0 {
		s += fmt.Sprintf(" (and %d more fault event(s) on it)", f.more)
	}
	return s
}

// faults are the faults of every GPU that a rank of the job runs on (or
// whose event names a rank's pid), one per GPU, the strongest first; and
// notes on faults of GPUs no rank of the job is known on.
func (v *gpuView) faults(js JobState) (out []gpuFault, orphans []string) {
	for i := range v.in.GPU {
		g := &v.in.GPU[i]
		byDev := map[int][]gpuFault{}
		var devOrder []int
		add := func(f gpuFault) {
			if _, ok := byDev[f.slot.dev]; !ok {
				devOrder = append(devOrder, f.slot.dev)
			}
			byDev[f.slot.dev] = append(byDev[f.slot.dev], f)
		}
		for _, e := range g.Xids {
			if !hangXid(e) {
				continue
			}
			j := v.devOf(i, e)
			if j < 0 {
				continue
			}
			f := gpuFault{slot: gpuSlot{rep: i, dev: j}, ranks: v.ranksOfEvent(i, j, e), at: e.Time}
			f.what = e.Meaning
			if e.Kind == "xid" {
				f.what = fmt.Sprintf("Xid %d (%s)", e.Xid, e.Meaning)
			}
			v.timeFault(&f, js)
			add(f)
		}
		for j, d := range g.Devices {
			f := gpuFault{slot: gpuSlot{rep: i, dev: j}, ranks: v.onDev[[2]int{i, j}], conf: Medium}
			switch {
			case d.Lost || d.Signature == gpu.SigLost:
				f.what, f.conf = "NVML says the GPU is lost (fallen off the bus)", High
			case d.ECC != nil && d.ECC.VolatileDouble != nil && *d.ECC.VolatileDouble > 0:
				f.what = fmt.Sprintf("%d uncorrectable ECC error(s) since the driver loaded", *d.ECC.VolatileDouble)
			case d.RemappedRows != nil && d.RemappedRows.Failure:
				f.what = "its row remapping failed (the GPU should be replaced)"
			case d.RemappedRows != nil && d.RemappedRows.Pending:
				f.what = "a row remap is pending (the GPU needs a reset)"
			default:
				continue
			}
			if !g.SampledAt.IsZero() {
				f.when = " in the sample of " + clock(g.SampledAt, v.now[i])
			}
			f.when += v.ageWords(i)
			add(f)
		}
		for _, j := range devOrder {
			fs := byDev[j]
			// The strongest: proof before note, high before medium, the
			// earliest event first (the first fault is the cause).
			sort.SliceStable(fs, func(a, b int) bool {
				if (fs[a].notProof == "") != (fs[b].notProof == "") {
					return fs[a].notProof == ""
				}
				return confRank(fs[a].conf) < confRank(fs[b].conf)
			})
			f := fs[0]
			f.more = len(fs) - 1
			for _, r := range f.ranks {
				if slices.ContainsFunc(v.byRank[r], func(s gpuSlot) bool { return s.rep == i && s.dev == j && s.assumed }) {
					f.slot.assumed = true
				}
			}
			if f.slot.assumed && f.notProof == "" {
				f.conf = Medium // an assumed mapping alone never makes a verdict sure
				f.when += " (rank to GPU assumed by local rank: the GPUs list no process of it)"
			}
			if len(f.ranks) == 0 {
				orphans = append(orphans, f.line(v)+": no rank of this job is known on it")
				continue
			}
			out = append(out, f)
		}
	}
	sort.SliceStable(out, func(a, b int) bool {
		if (out[a].notProof == "") != (out[b].notProof == "") {
			return out[a].notProof == ""
		}
		return confRank(out[a].conf) < confRank(out[b].conf)
	})
	return out, orphans
}

// devOf is the device of an event: by index, else by UUID; -1 when
// not known (the event names only a bus no device has).
func (v *gpuView) devOf(i int, e gpu.XidEvent) int {
	for j, d := range v.in.GPU[i].Devices {
		if (e.GPU >= 0 && d.Index == e.GPU) || (e.GPU < 0 && e.UUID != "" && d.UUID == e.UUID) {
			return j
		}
	}
	return -1
}

// ranksOfEvent: the rank whose pid the event names, on that node; else
// the ranks on the GPU.
func (v *gpuView) ranksOfEvent(i, j int, e gpu.XidEvent) []int {
	if e.PID > 0 {
		for _, r := range v.homeRanks[i] {
			if v.in.Ranks[r].PID == e.PID {
				return []int{r}
			}
		}
	}
	return v.onDev[[2]int{i, j}]
}

// timeFault weighs an event's time: before the job's first record it is
// an earlier run's (a note); without a time, or without any record of
// when the job ran, it is proof of medium weight; long after the rank's
// last progress it may have followed the stall, not caused it.
func (v *gpuView) timeFault(f *gpuFault, js JobState) {
	f.conf = High
	now := v.now[f.slot.rep]
	if f.at.IsZero() {
		f.conf = Medium
		f.when = " at an unknown time (the kernel log's time since boot could not be converted)"
		return
	}
	t := f.at.UnixNano()
	f.when = " at " + clock(f.at, now)
	var start int64
	for _, r := range f.ranks {
		if s, ok := v.first[r]; ok && (start == 0 || s < start) {
			start = s
		}
	}
	if start == 0 {
		start = v.jobFirst
	}
	switch {
	case start > 0 && t < start-int64(gpuSlack):
		f.notProof = fmt.Sprintf(", before the job's first record here (%s): an earlier run's, not weighed", clock(time.Unix(0, start), now))
		return
	case start == 0 && now > 0 && time.Duration(now-t) > gpuNoStartWindow:
		f.notProof = fmt.Sprintf(", %s before the diagnosis, and when the job started is not known: not weighed", time.Duration(now-t).Round(time.Minute))
		return
	case start == 0:
		f.conf = Medium
		f.when += " (time unknown relative to the job: nothing records when it started; an event of the last 6h is taken)"
		return
	}
	if js.State != StateStalled && js.State != StateDead {
		return // a job that moves has no stall to place the event against
	}
	if s := v.jobStall; s > 0 {
		if t <= s {
			f.when += ", " + ago(s-t) + " before the stall"
		} else {
			f.when += ", " + ago(t-s) + " after the job's last progress"
		}
	}
	if last := v.stall(f.ranks); last > 0 && time.Duration(t-last) > max(js.Threshold, time.Minute) {
		f.conf = Medium
		f.when += fmt.Sprintf("; %s after %s's last progress: it may have followed the stall, not caused it", ago(t-last), rankWords(f.ranks))
	}
}

// fewOf: the faulty ranks single out a culprit when they are one, or at
// most a quarter of the job's ranks (a whole node's GPUs failing under a
// job of many nodes is still that node).
func fewOf(n, total int) bool { return n > 0 && (n == 1 || 4*n <= total) }

// withGPU weighs the GPUs under a stalled or dead job: a faulty GPU of
// one rank (or a few) makes it the culprit (gpu_fault), over an "every
// member inside" it explains and over a hypothesis on the same ranks; the
// signatures support or contradict the others. It returns the
// hypotheses and the data-quality lines.
func withGPU(hs []Hypothesis, in Input, js JobState) ([]Hypothesis, []string) {
	v := newGPUView(in)
	if v == nil {
		return hs, nil
	}
	notes := append([]string(nil), v.notes...)
	if n := v.notRead(); n != "" {
		notes = append(notes, n)
	}
	if n := v.unmappedNote(); n != "" {
		notes = append(notes, n)
	}
	fs, orphans := v.faults(js)
	var proofs, old []gpuFault
	var faulty []int
	for _, f := range fs {
		if f.notProof != "" {
			old = append(old, f)
			continue
		}
		proofs = append(proofs, f)
		for _, r := range f.ranks {
			if !slices.Contains(faulty, r) {
				faulty = append(faulty, r)
			}
		}
	}
	sort.Ints(faulty)
	switch {
	case len(proofs) > 0 && fewOf(len(faulty), len(in.Ranks)):
		hs = gpuFaultHypothesis(hs, proofs, faulty, v, in)
	case len(proofs) > 0:
		notes = append(notes, fmt.Sprintf("the GPUs of %s report faults (first: %s): too many ranks to single one out", rankWords(faulty), proofs[0].line(v)))
	}
	notes = append(notes, boundLines(func(f gpuFault) string { return f.line(v) + f.notProof }, old, "older GPU fault(s)")...)
	if len(orphans) > 0 {
		notes = append(notes, orphans[0]+moreOf(len(orphans)-1, " (and %d more such GPU fault(s))"))
	}
	for i := range hs {
		switch hs[i].Category {
		case CatAllIn:
			var suspect *Hypothesis
			hs[i], suspect = v.allInGPUs(hs[i], in)
			if suspect != nil {
				hs = append(hs, *suspect) // sorted with the rest by confidence below
			}
		case CatCPUStall, CatDeadlock, CatGILHeld, CatMissing:
			hs[i] = v.cpuSideGPU(hs[i], in)
		}
	}
	// Sort here so that a suspect found above comes before the all-in it
	// contradicts when both are equally sure (the caller sorts stably).
	sort.SliceStable(hs, func(a, b int) bool {
		if ca, cb := confRank(hs[a].Confidence), confRank(hs[b].Confidence); ca != cb {
			return ca < cb
		}
		return hs[a].Category == CatGPUFault && hs[b].Category != CatGPUFault
	})
	if stale := v.staleForSigs(); stale != "" {
		notes = append(notes, stale)
	}
	return hs, notes
}

func moreOf(n int, format string) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(format, n)
}

// boundLines renders at most two faults, then how many more.
func boundLines(line func(gpuFault) string, fs []gpuFault, what string) []string {
	var out []string
	for i, f := range fs {
		if i == 2 {
			out = append(out, fmt.Sprintf("… and %d more %s", len(fs)-i, what))
			break
		}
		out = append(out, line(f))
	}
	return out
}

// gpuFaultHypothesis makes the faulty ranks the culprit. It takes in the
// hypotheses it explains: an all-in collective with a faulty member (the
// collective cannot finish without that GPU), and any other on the faulty
// ranks alone (a dead rank whose GPU failed died of it); a death of
// another rank after the fault is said to be likely its consequence.
func gpuFaultHypothesis(hs []Hypothesis, proofs []gpuFault, faulty []int, v *gpuView, in Input) []Hypothesis {
	h := Hypothesis{Category: CatGPUFault, culprits: faulty, Confidence: Medium}
	allAssumed := true
	for i, f := range proofs {
		if f.conf == High {
			h.Confidence = High
		}
		allAssumed = allAssumed && f.slot.assumed
		if i == maxGPULines {
			h.Evidence = append(h.Evidence, Evidence{"gpu", fmt.Sprintf("and %d more faulty GPU(s) of %s", len(proofs)-i, rankWords(faulty))})
			break
		}
		h.Evidence = append(h.Evidence, Evidence{"gpu", f.line(v)})
	}
	if allAssumed {
		h.Confidence = Medium
	}
	coll := map[int]bool{}
	said := map[string]bool{}
	for _, e := range h.Evidence {
		said[e.Text] = true
	}
	absorb := func(es []Evidence, n int) {
		for _, e := range es {
			if n == 0 {
				return
			}
			if !said[e.Text] {
				said[e.Text] = true
				h.Evidence = append(h.Evidence, e)
				n--
			}
		}
	}
	var kept []Hypothesis
	for _, o := range hs {
		switch {
		case o.Category == CatAllIn && slices.ContainsFunc(o.culprits, func(r int) bool { return slices.Contains(faulty, r) }):
			absorb(o.Evidence[:min(len(o.Evidence), 1)], 1)
			for _, r := range o.culprits {
				coll[r] = true
			}
		case o.Category != CatMismatch && subset(o.culprits, faulty):
			absorb(o.Evidence, 3)
			for _, r := range o.collateral {
				coll[r] = true
			}
			for _, r := range rankset.Known(o.Collateral) {
				coll[r] = true
			}
			if h.whereThread == nil {
				h.whereThread = o.whereThread
			}
		default:
			kept = append(kept, o)
		}
	}
	first := proofs[0]
	for _, f := range proofs {
		if !f.at.IsZero() && (first.at.IsZero() || f.at.Before(first.at)) {
			first = f
		}
	}
	for i, o := range kept {
		if (o.Category != CatDeadRank && o.Category != CatMainThreadDead) || len(o.culprits) != 1 || first.at.IsZero() {
			continue
		}
		if d := in.Ranks[o.culprits[0]]; d != nil && d.EndedNS > first.at.UnixNano() {
			kept[i].Evidence = append(kept[i].Evidence, Evidence{"gpu", fmt.Sprintf("but %s failed at %s, %s before rank %d died: its death may follow from that",
				v.gpuName(first.ranks, first.slot), clock(first.at, d.EndedNS), ago(d.EndedNS-first.at.UnixNano()), o.culprits[0])})
			kept[i].Confidence = lower(kept[i].Confidence)
		}
	}
	for _, r := range faulty {
		delete(coll, r)
	}
	var cs []int
	for r := range coll {
		cs = append(cs, r)
	}
	sort.Ints(cs)
	h.collateral, h.Collateral = cs, rankset.Format(cs)
	g, d := v.dev(first.slot)
	h.Confirm = fmt.Sprintf("on %s: nvidia-smi -q -i %d and the kernel log (dmesg | grep -i xid): the fault is there, and the GPU needs a reset or replacing", hostOr(g.Host), d.Index)
	h.Refute = "the GPU answers without an error, and the event belongs to another process or an earlier run"
	h = finish(h, in)
	return append([]Hypothesis{h}, kept...)
}

func hostOr(h string) string {
	if h == "" {
		return "this node"
	}
	return jobtext.Quote(h, jobtext.Name)
}

// lower is one confidence step down.
func lower(c string) string {
	switch c {
	case High:
		return Medium
	}
	return Low
}

// allInGPUs weighs the members' GPUs of an "every member inside": their
// NCCL kernels spinning confirm the wait is below the ranks (said, the
// confidence unchanged: the rings already say every member entered).
// A member whose GPU is idle while the rest spin never launched the
// collective's kernel: it is a suspect on the CPU side, the rings and
// the GPUs disagree, and the all-in is held one step lower.
func (v *gpuView) allInGPUs(h Hypothesis, in Input) (Hypothesis, *Hypothesis) {
	by := v.bySig(h.culprits)
	spin, idle := by[gpu.SigSpinning], by[gpu.SigIdle]
	if len(spin) == 0 || 2*len(spin) < counted(by) {
		return h, nil
	}
	if len(idle) == 0 || !fewOf(len(idle), len(h.culprits)) {
		h.Evidence = append(h.Evidence, Evidence{"gpu", v.sigLine(spin, "spin") + ": NCCL kernels resident, waiting for data that never arrives: the network or a peer GPU"})
		return h, nil
	}
	h.Confidence = lower(h.Confidence)
	h.Evidence = append(h.Evidence, Evidence{"gpu", fmt.Sprintf("but %s's GPU is idle while %s: it never launched the collective's kernel; the rings and the GPUs disagree (confidence lowered)",
		rankWords(idle), v.sigLine(spin, "spin"))})
	s := Hypothesis{Category: CatCPUStall, culprits: idle, collateral: spin, Collateral: rankset.Format(spin), Confidence: Medium,
		Evidence: []Evidence{{"gpu", v.sigLine(idle, "is idle") + " while " + v.sigLine(spin, "spin") + ": it never launched the collective's kernel the others wait in"},
			{"comm_rings", fmt.Sprintf("but the rings record %s inside the collective with every member: they disagree, so this is a suspect, not proof", rankWords(idle))}},
		Confirm: fmt.Sprintf("get_stacks {\"ranks\":\"%s\"} twice, a few seconds apart: the same frame outside the collective", rankset.Format(idle)),
		Refute:  "a new sample shows its GPU spinning like the others'"}
	if f := in.Ranks[idle[0]]; f != nil && f.Main != nil {
		s.Evidence = append(s.Evidence, Evidence{"stacks", mainWords(in, idle[0], f.Main)})
	}
	if v.anyAssumed(idle) {
		s.Confidence = Low
	}
	s = finish(s, in)
	return h, &s
}

func (v *gpuView) anyAssumed(ranks []int) bool {
	for _, r := range ranks {
		if s, ok := v.primary(r); ok && s.assumed {
			return true
		}
	}
	return false
}

// cpuSideGPU weighs the GPU of a culprit the rings found outside the
// collective (or in another one, missing_from_collective). Idle while
// the ranks waiting for it spin supports it, and with a stack makes a
// medium verdict high; a CPU-side culprit whose GPU computes, or spins
// like the waiters', contradicts it (one step lower). A rank missing from
// a collective waits in another one, so its GPU spinning is expected and
// not held against it.
func (v *gpuView) cpuSideGPU(h Hypothesis, in Input) Hypothesis {
	if len(h.culprits) == 0 {
		return h
	}
	c := h.culprits[0]
	sig, ok := v.sigOf(c)
	if !ok {
		return h
	}
	by := v.bySig(h.collateral)
	spin := by[gpu.SigSpinning]
	othersSpin := len(spin) > 0 && 2*len(spin) >= counted(by)
	one := []int{c}
	switch {
	case sig == gpu.SigIdle && othersSpin:
		h.Evidence = append(h.Evidence, Evidence{"gpu", v.sigLine(one, "is idle") + " while " + v.sigLine(spin, "spin") + ": it never launched the collective they wait in"})
		if f := in.Ranks[c]; h.Confidence == Medium && f != nil && f.Main != nil && !v.anyAssumed(one) {
			h.Confidence = High
		}
	case h.Category == CatMissing:
	case sig == gpu.SigBusy:
		h.Confidence = lower(h.Confidence)
		h.Evidence = append(h.Evidence, Evidence{"gpu", "but " + v.sigLine(one, "computes") + ": a long GPU computation, not a CPU-side stall, may be what holds it (confidence lowered)"})
	case sig == gpu.SigSpinning && othersSpin:
		h.Confidence = lower(h.Confidence)
		h.Evidence = append(h.Evidence, Evidence{"gpu", "but " + v.sigLine(one, "spins") + " like the GPUs waiting for it: an NCCL kernel is resident, so it may be inside a collective the rings did not record (confidence lowered)"})
	}
	return h
}

// staleForSigs says, once, which nodes' samples predate the stall: their
// utilisation was not weighed.
func (v *gpuView) staleForSigs() string {
	var hosts []string
	n := 0
	for i, g := range v.in.GPU {
		if len(g.Devices) == 0 || v.sigUsable(i) {
			continue
		}
		n++
		if len(hosts) < 3 {
			hosts = append(hosts, hostOr(g.Host)+" (sampled "+clock(g.SampledAt, v.now[i])+")")
		}
	}
	if n == 0 {
		return ""
	}
	s := fmt.Sprintf("the GPU samples of %d node(s) predate the stall: their utilisation is not weighed: %s", n, strings.Join(hosts, ", "))
	if n > len(hosts) {
		s += fmt.Sprintf(" and %d more", n-len(hosts))
	}
	return s
}

// gpuMoving: a GPU fault under a job that still moves is a warning, never
// a culprit.
func gpuMoving(in Input) []string {
	v := newGPUView(in)
	if v == nil {
		return nil
	}
	fs, _ := v.faults(JobState{})
	var proofs []gpuFault
	for _, f := range fs {
		if f.notProof == "" {
			proofs = append(proofs, f)
		}
	}
	return boundLines(func(f gpuFault) string {
		return "GPU fault while the job moves (no hang: the GPU needs attention): " + f.line(v)
	}, proofs, "GPU fault(s) while the job moves")
}
