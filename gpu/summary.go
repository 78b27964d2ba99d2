package gpu

import (
	"fmt"
	"sort"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/rankset"
)

// Signature is what a GPU's counters say it is doing.
type Signature string

const (
	// SigSpinning: utilisation pinned at or above SpinUtilPct with power
	// below IdlePowerFrac of the limit. NVML's utilisation is the time any
	// kernel was resident, not SM work: an NCCL kernel spin-waiting on a
	// peer that never arrives is resident all the time while a few warps
	// poll memory, so the GPU reads 100% at near-idle power (about 70 W on
	// an A100 of 400 W). This is the hang signature of a collective.
	SigSpinning Signature = "spinning"
	// SigIdle: no kernel ran in the last sample period (0%): the rank's
	// CPU side is stalled (data loader, a lock, a Python hang) or done.
	SigIdle Signature = "idle"
	// SigBusy: utilisation at or above BusyUtilPct and power above
	// IdlePowerFrac of the limit: real compute.
	SigBusy Signature = "busy"
	// SigActive: some utilisation, neither pinned nor busy.
	SigActive Signature = "active"
	// SigLost: NVML lost the GPU (Xid 79, fallen off the bus).
	SigLost Signature = "lost"
	// SigError: the GPU answers but reports a fault: an uncorrectable ECC
	// error since the driver loaded, a failed or pending row remap, or a
	// critical Xid.
	SigError Signature = "error"
	// SigUnknown: utilisation or power not readable (MIG mode, not supported).
	SigUnknown Signature = "unknown"
)

// Thresholds of the signatures (see the Sig* constants for why).
const (
	// SpinUtilPct: NVML's utilisation rounds a resident kernel to 100; 95
	// leaves room for the sample period catching a kernel boundary.
	SpinUtilPct = 95
	// IdlePowerFrac: compute-bound kernels draw well over half the limit
	// (an A100 training step 250–400 W of 400 W); a spinning NCCL kernel
	// draws 15–20% (70 W of 400 W; H100 about 100–150 W of 700 W). A
	// quarter separates them with margin on both sides.
	IdlePowerFrac = 0.25
	// BusyUtilPct: at least half the period with a kernel resident.
	BusyUtilPct = 50
)

// Classify gives a GPU's signature and the reason in words. xids are
// events known for this node (matched by index, UUID or bus id).
func Classify(s Snapshot, xids []XidEvent) (Signature, string) {
	if s.Lost {
		return SigLost, "NVML: GPU is lost"
	}
	for _, e := range xids {
		if matches(s, e) && critical(e) {
			return SigError, fmt.Sprintf("Xid %d: %s", e.Xid, e.Meaning)
		}
	}
	if e := s.ECC; e != nil && e.VolatileDouble != nil && *e.VolatileDouble > 0 {
		return SigError, fmt.Sprintf("%d uncorrectable (double-bit) ECC errors since the driver loaded", *e.VolatileDouble)
	}
	if r := s.RemappedRows; r != nil && (r.Failure || r.Pending) {
		if r.Failure {
			return SigError, "row remapping failed: the GPU should be replaced"
		}
		return SigError, "a row remap is pending: the GPU needs a reset"
	}
	if s.Utilization == nil {
		return SigUnknown, "utilisation not readable: " + s.Missing["utilization"]
	}
	u := s.Utilization.GPU
	if u == 0 {
		return SigIdle, "0% utilisation: no kernel ran"
	}
	if s.PowerW == nil || s.PowerLimitW == nil || *s.PowerLimitW <= 0 {
		if u >= SpinUtilPct {
			return SigUnknown, fmt.Sprintf("%d%% utilisation, power not readable: spinning or busy cannot be told", u)
		}
		return SigActive, fmt.Sprintf("%d%% utilisation", u)
	}
	frac := *s.PowerW / *s.PowerLimitW
	switch {
	case u >= SpinUtilPct && frac < IdlePowerFrac:
		return SigSpinning, fmt.Sprintf("%d%% utilisation at %.0f W of %.0f W: a kernel resident without work (NCCL waiting on a peer)", u, *s.PowerW, *s.PowerLimitW)
	case u >= BusyUtilPct && frac >= IdlePowerFrac:
		return SigBusy, fmt.Sprintf("%d%% utilisation at %.0f W of %.0f W", u, *s.PowerW, *s.PowerLimitW)
	}
	return SigActive, fmt.Sprintf("%d%% utilisation at %.0f W of %.0f W", u, *s.PowerW, *s.PowerLimitW)
}

// critical: the Xids that mean the GPU (not only one kernel) is faulty.
func critical(e XidEvent) bool {
	if e.Kind == "double_bit_ecc" || e.Kind == "gpu_lost" {
		return true
	}
	switch e.Xid {
	case 48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 61, 62:
		return true
	}
	return false
}

func matches(s Snapshot, e XidEvent) bool {
	if e.GPU >= 0 {
		return e.GPU == s.Index
	}
	if e.UUID != "" {
		return e.UUID == s.UUID
	}
	return e.PCIBusID != "" && sameBus(e.PCIBusID, s.PCIBusID)
}

// sameBus compares the kernel's "0000:3b:00" with NVML's
// "00000000:3B:00.0": domain widths and the function differ.
func sameBus(a, b string) bool {
	norm := func(s string) string {
		s = strings.ToLower(s)
		if i := strings.LastIndexByte(s, '.'); i >= 0 {
			s = s[:i]
		}
		parts := strings.Split(s, ":")
		if len(parts) == 3 {
			parts[0] = strings.TrimLeft(parts[0], "0")
		}
		return strings.Join(parts, ":")
	}
	return a != "" && b != "" && norm(a) == norm(b)
}

// MaxSummary is the default byte bound of Summarize.
const MaxSummary = 4000

// Summarize renders many GPUs for an LLM, within max bytes (MaxSummary
// when ≤ 0): Xid events first, then the GPUs that differ from the rest,
// then the identical ones collapsed ("GPUs 0-7 (NVIDIA H100 80GB HBM3)
// spinning: 100% util, 70 W of 700 W, 45 °C"). Every cut is said.
func Summarize(status Status, snaps []Snapshot, xids []XidEvent, max int) string {
	if max <= 0 {
		max = MaxSummary
	}
	var lines []string
	if status.State != StateOK && len(snaps) == 0 {
		lines = append(lines, fmt.Sprintf("GPUs: %s: %s", status.State, status.Reason))
	}
	lines = append(lines, xidLines(xids, snaps)...)
	type group struct {
		key  string
		sig  Signature
		why  string
		idx  []int
		snap []Snapshot
	}
	groups := map[string]*group{}
	var order []string
	for _, s := range snaps {
		sig, why := Classify(s, xids)
		key := s.Name + "\x00" + string(sig)
		if sig == SigLost || sig == SigError || sig == SigUnknown {
			key += "\x00" + why // a fault is never merged with another fault
		}
		g, ok := groups[key]
		if !ok {
			g = &group{key: key, sig: sig, why: why}
			groups[key] = g
			order = append(order, key)
		}
		g.idx = append(g.idx, s.Index)
		g.snap = append(g.snap, s)
	}
	gs := make([]*group, 0, len(order))
	for _, k := range order {
		gs = append(gs, groups[k])
	}
	// Faults, then the smaller groups (the odd ones out), then the rest.
	rank := func(g *group) int {
		switch g.sig {
		case SigLost:
			return 0
		case SigError:
			return 1
		}
		return 2
	}
	sort.SliceStable(gs, func(i, j int) bool {
		if rank(gs[i]) != rank(gs[j]) {
			return rank(gs[i]) < rank(gs[j])
		}
		return len(gs[i].idx) < len(gs[j].idx)
	})
	for _, g := range gs {
		lines = append(lines, groupLine(g.idx, g.snap, g.sig, g.why))
	}
	return bound(lines, max)
}

func xidLines(xids []XidEvent, snaps []Snapshot) []string {
	if len(xids) == 0 {
		return nil
	}
	type k struct {
		gpu  string
		kind string
		xid  uint64
	}
	count := map[k]int{}
	first := map[k]XidEvent{}
	var order []k
	for _, e := range xids {
		where := e.PCIBusID
		if e.GPU >= 0 {
			where = fmt.Sprint(e.GPU)
		} else {
			for _, s := range snaps {
				if matches(s, e) {
					where = fmt.Sprint(s.Index)
				}
			}
		}
		key := k{where, e.Kind, e.Xid}
		if count[key] == 0 {
			order = append(order, key)
			first[key] = e
		}
		count[key]++
	}
	out := []string{fmt.Sprintf("GPU errors (%d events):", len(xids))}
	for _, key := range order {
		e := first[key]
		what := e.Meaning
		if e.Kind == "xid" {
			what = fmt.Sprintf("Xid %d: %s", e.Xid, e.Meaning)
		}
		line := fmt.Sprintf("  GPU %s: %s", key.gpu, what)
		if e.PID > 0 {
			line += fmt.Sprintf(" (pid %d %s)", e.PID, e.Process)
		}
		if n := count[key]; n > 1 {
			line += fmt.Sprintf(" ×%d", n)
		}
		out = append(out, line+" ["+e.Source+"]")
	}
	return out
}

func groupLine(idx []int, snaps []Snapshot, sig Signature, why string) string {
	name := snaps[0].Name
	if name == "" {
		name = "unnamed GPU"
	}
	noun := "GPU"
	if len(idx) > 1 {
		noun = "GPUs"
	}
	head := fmt.Sprintf("%s %s (%s) %s", noun, rankset.Short(rankset.Format(idx)), name, sig)
	if st := Stats(snaps, sig, why); st != "" {
		return head + ": " + st
	}
	return head
}

// Stats are a group's counters in words ("100% util, 70-75 W of 700 W,
// 45 °C, ranks 0-7"): what groupLine says after the GPUs' names; the
// whole-job view (tools) heads them with hosts.
func Stats(snaps []Snapshot, sig Signature, why string) string {
	var parts []string
	if sig == SigLost || sig == SigError || sig == SigUnknown {
		parts = append(parts, why)
	}
	u := spread(snaps, func(s Snapshot) (float64, bool) {
		if s.Utilization == nil {
			return 0, false
		}
		return float64(s.Utilization.GPU), true
	})
	if u != "" {
		parts = append(parts, u+"% util")
	}
	p := spread(snaps, func(s Snapshot) (float64, bool) {
		if s.PowerW == nil {
			return 0, false
		}
		return *s.PowerW, true
	})
	l := spread(snaps, func(s Snapshot) (float64, bool) {
		if s.PowerLimitW == nil {
			return 0, false
		}
		return *s.PowerLimitW, true
	})
	if p != "" {
		if l != "" {
			p += " W of " + l
		}
		parts = append(parts, p+" W")
	}
	if t := spread(snaps, func(s Snapshot) (float64, bool) {
		if s.TempC == nil {
			return 0, false
		}
		return float64(*s.TempC), true
	}); t != "" {
		parts = append(parts, t+" °C")
	}
	if m := spread(snaps, func(s Snapshot) (float64, bool) {
		if s.MemoryUsed == nil {
			return 0, false
		}
		return float64(*s.MemoryUsed) / (1 << 30), true
	}); m != "" {
		parts = append(parts, m+" GiB used")
	}
	ev := map[string]bool{}
	var evs []string
	var ranks []int
	var notes []string
	for _, s := range snaps {
		for _, e := range s.ClockEvents {
			if e != "gpu_idle" && !ev[e] {
				ev[e] = true
				evs = append(evs, e)
			}
		}
		for _, pr := range s.Processes {
			if pr.Rank >= 0 {
				ranks = append(ranks, pr.Rank)
			}
		}
		if s.MIG != nil && s.MIG.Enabled {
			notes = append(notes, fmt.Sprintf("GPU %d MIG with %d devices", s.Index, len(s.MIG.Devices)))
		}
		if s.MIG != nil && s.MIG.Pending {
			notes = append(notes, fmt.Sprintf("GPU %d MIG change pending a reset", s.Index))
		}
		if r := s.RemappedRows; r != nil && r.Uncorrectable > 0 {
			notes = append(notes, fmt.Sprintf("GPU %d %d rows remapped for uncorrectable errors", s.Index, r.Uncorrectable))
		}
		for _, le := range s.NVLink {
			if le.Errors() > 0 {
				notes = append(notes, fmt.Sprintf("GPU %d NVLink %d errors replay %d recovery %d crc %d", s.Index, le.Link, le.Replay, le.Recovery, le.CRCFlit+le.CRCData))
			}
		}
	}
	if len(evs) > 0 {
		sort.Strings(evs)
		parts = append(parts, "clocks held by "+strings.Join(evs, ","))
	}
	if len(ranks) > 0 {
		sort.Ints(ranks)
		parts = append(parts, "ranks "+rankset.Short(rankset.Format(dedup(ranks))))
	}
	if len(notes) > 4 {
		notes = append(notes[:4], fmt.Sprintf("%d more notes", len(notes)-4))
	}
	parts = append(parts, notes...)
	return strings.Join(parts, ", ")
}

// spread is "70" when all agree (rounded), else "68-72".
func spread(snaps []Snapshot, f func(Snapshot) (float64, bool)) string {
	lo, hi, n := 0.0, 0.0, 0
	for _, s := range snaps {
		v, ok := f(s)
		if !ok {
			continue
		}
		if n == 0 || v < lo {
			lo = v
		}
		if n == 0 || v > hi {
			hi = v
		}
		n++
	}
	if n == 0 {
		return ""
	}
	if fmt.Sprintf("%.0f", lo) == fmt.Sprintf("%.0f", hi) {
		return fmt.Sprintf("%.0f", lo)
	}
	return fmt.Sprintf("%.0f-%.0f", lo, hi)
}

func dedup(xs []int) []int {
	out := xs[:0:0]
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// bound joins lines within max bytes, saying how many were cut.
func bound(lines []string, max int) string {
	var b strings.Builder
	for i, l := range lines {
		tail := fmt.Sprintf("… %d more lines cut", len(lines)-i)
		if b.Len()+len(l)+1 > max-len(tail)-1 {
			b.WriteString(tail)
			return b.String()
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}

// AssignGPUs sets the GPU index (and UUID) of events that name only a bus
// id (the kernel log's), from the snapshots' bus ids.
func AssignGPUs(events []XidEvent, snaps []Snapshot) {
	for i := range events {
		e := &events[i]
		if e.GPU >= 0 || e.PCIBusID == "" {
			continue
		}
		for _, s := range snaps {
			if sameBus(e.PCIBusID, s.PCIBusID) {
				e.GPU, e.UUID = s.Index, s.UUID
				break
			}
		}
	}
}
