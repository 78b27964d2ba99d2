package gpu

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Snapshot is one GPU at one moment. A field NVML did not answer is
// absent and Missing says why, under the field's JSON name.
type Snapshot struct {
	Index    int    `json:"index"`
	Name     string `json:"name,omitempty"`
	UUID     string `json:"uuid,omitempty"`
	PCIBusID string `json:"pci_bus_id,omitempty"`

	// Utilization in percent over NVML's last sample period (1/6 s to 1 s):
	// GPU is the time any kernel ran (not the SMs busy), Memory the time
	// memory was read or written.
	Utilization *Utilization `json:"utilization,omitempty"`
	MemoryUsed  *uint64      `json:"memory_used_bytes,omitempty"`
	MemoryTotal *uint64      `json:"memory_total_bytes,omitempty"`
	PowerW      *float64     `json:"power_w,omitempty"`
	PowerLimitW *float64     `json:"power_limit_w,omitempty"`
	TempC       *uint32      `json:"temperature_c,omitempty"`
	ClockSMMHz  *uint32      `json:"clock_sm_mhz,omitempty"`
	ClockMemMHz *uint32      `json:"clock_mem_mhz,omitempty"`
	// ClockEvents are the reasons clocks are held down now, decoded
	// (ClockEventNames); ClockEventMask is NVML's bit mask.
	ClockEvents    []string      `json:"clock_events,omitempty"`
	ClockEventMask *uint64       `json:"clock_event_mask,omitempty"`
	ECC            *ECC          `json:"ecc,omitempty"`
	RemappedRows   *RemappedRows `json:"remapped_rows,omitempty"`
	// NVLink lists the active links, with their error counters (read back
	// from the rings: only the links with errors or a missing counter);
	// NVLinkActive counts the active links.
	NVLink       []LinkErrors `json:"nvlink,omitempty"`
	NVLinkActive int          `json:"nvlink_active,omitempty"`
	MIG          *MIG         `json:"mig,omitempty"`
	Processes    []Process    `json:"processes,omitempty"`
	// ProcessesCut: processes past MaxProcesses, not listed.
	ProcessesCut int `json:"processes_cut,omitempty"`

	// Lost: NVML said GPU_IS_LOST (or the handle is gone); what was not read
	// before is in Missing.
	Lost    bool              `json:"lost,omitempty"`
	Missing map[string]string `json:"missing,omitempty"`
	Time    time.Time         `json:"time"`
}

type Utilization struct {
	GPU    uint32 `json:"gpu_pct"`
	Memory uint32 `json:"memory_pct"`
}

// ECC counts memory errors: volatile since the driver loaded, aggregate
// over the GPU's life. Single-bit errors are corrected, double-bit not.
type ECC struct {
	VolatileSingle  *uint64 `json:"volatile_single_bit,omitempty"`
	VolatileDouble  *uint64 `json:"volatile_double_bit,omitempty"`
	AggregateSingle *uint64 `json:"aggregate_single_bit,omitempty"`
	AggregateDouble *uint64 `json:"aggregate_double_bit,omitempty"`
}

// RemappedRows is the row-remapping state (A100 and later): rows remapped
// for correctable and uncorrectable errors, a remap waiting for a GPU
// reset, and a remap that failed (the GPU should be replaced).
type RemappedRows struct {
	Correctable   int  `json:"correctable"`
	Uncorrectable int  `json:"uncorrectable"`
	Pending       bool `json:"pending"`
	Failure       bool `json:"failure"`
}

// LinkErrors are one NVLink's data-link error counters since the driver loaded.
type LinkErrors struct {
	Link     int    `json:"link"`
	Replay   uint64 `json:"replay"`
	Recovery uint64 `json:"recovery"`
	CRCFlit  uint64 `json:"crc_flit"`
	CRCData  uint64 `json:"crc_data"`
	// Missing names a counter this link did not answer, with the reason.
	Missing string `json:"missing,omitempty"`
}

// Errors: any counter above zero.
func (l LinkErrors) Errors() uint64 { return l.Replay + l.Recovery + l.CRCFlit + l.CRCData }

// MIG is the GPU's MIG mode and its MIG devices.
type MIG struct {
	Enabled bool `json:"enabled"`
	// Pending: the mode after the next GPU reset differs (a half-applied
	// reconfiguration).
	Pending bool        `json:"pending,omitempty"`
	Devices []MIGDevice `json:"devices,omitempty"`
}

type MIGDevice struct {
	Index       int     `json:"index"`
	UUID        string  `json:"uuid,omitempty"`
	MemoryUsed  *uint64 `json:"memory_used_bytes,omitempty"`
	MemoryTotal *uint64 `json:"memory_total_bytes,omitempty"`
	Missing     string  `json:"missing,omitempty"`
}

// Process is a compute process on the GPU. Rank is filled by AttachRanks
// (-1: unknown, RankWhy says why).
type Process struct {
	PID        uint32 `json:"pid"`
	UsedMemory uint64 `json:"used_memory_bytes"`
	// GPUInstance is the MIG GPU instance, -1 without MIG.
	GPUInstance int    `json:"gpu_instance"`
	Rank        int    `json:"rank"`
	LocalRank   int    `json:"local_rank"`
	Role        string `json:"role,omitempty"`
	RankWhy     string `json:"rank_why,omitempty"`
}

// Bounds on what one snapshot holds.
const (
	MaxProcesses  = 64
	MaxLinks      = nvml.NVLINK_MAX_LINKS // 36, NVML's own bound
	MaxMIGDevices = 8                     // 7 on A100/H100
)

// Sample snapshots every GPU, in index order. A GPU that fails (lost,
// panicking, a handle that never came) still has its entry with the
// reasons. When ctx ends first (an NVML call can block for long on a
// wedged GPU or driver) it returns at once: the GPUs not sampled say so,
// and the sampling goes on in the background until NVML answers.
func (n *NVML) Sample(ctx context.Context) ([]Snapshot, error) {
	devs, noHandle, err := n.acquireWhy()
	if err != nil {
		return nil, err
	}
	// One sampling at a time: a round still stuck in NVML (a wedged GPU)
	// is not joined by another each period, which would pile up
	// goroutines blocked in the driver without bound.
	if !n.sampling.CompareAndSwap(false, true) {
		n.refs.Done()
		out := make([]Snapshot, len(devs))
		for i := range out {
			out[i] = Snapshot{Index: i, Time: time.Now(), Missing: map[string]string{"all": "not sampled: an earlier sample is still waiting for NVML (the GPU or its driver may be wedged)"}}
		}
		return out, nil
	}
	var mu sync.Mutex
	res := make([]Snapshot, len(devs))
	done := make([]bool, len(devs))
	current := -1
	fin := make(chan struct{})
	go func() {
		defer n.refs.Done()
		defer n.sampling.Store(false)
		defer close(fin)
		for i, d := range devs {
			if ctx.Err() != nil {
				return
			}
			mu.Lock()
			current = i
			mu.Unlock()
			var s Snapshot
			if d == nil {
				s = Snapshot{Index: i, Time: time.Now(), Missing: map[string]string{"all": noHandle[i]}}
			} else {
				s = SampleDevice(i, d)
			}
			mu.Lock()
			res[i], done[i] = s, true
			mu.Unlock()
		}
	}()
	select {
	case <-fin:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	out := make([]Snapshot, len(devs))
	for i := range out {
		switch {
		case done[i]:
			out[i] = res[i]
		case i == current:
			observeNVML(nvml.ERROR_TIMEOUT, nil)
			out[i] = Snapshot{Index: i, Time: time.Now(), Missing: map[string]string{"all": "not sampled: NVML did not answer before the deadline (the GPU or its driver may be wedged)"}}
		default:
			out[i] = Snapshot{Index: i, Time: time.Now(), Missing: map[string]string{"all": "not sampled: " + context.Cause(ctx).Error()}}
		}
	}
	return out, nil
}

// sampler reads one device, field by field.
type sampler struct {
	s    *Snapshot
	lost string
}

// get runs one read. A failed read marks field missing with the reason;
// once the GPU is lost, the reads left are not made.
func (sp *sampler) get(field string, f func() nvml.Return) bool {
	if sp.lost != "" {
		sp.miss(field, "not read: "+sp.lost)
		return false
	}
	ret, perr := call(f)
	if perr != nil || ret != nvml.SUCCESS {
		observeNVML(ret, perr) // metrics.go
	}
	switch {
	case perr != nil:
		sp.miss(field, perr.Error())
		return false
	case ret == nvml.SUCCESS:
		return true
	case ret == nvml.ERROR_GPU_IS_LOST:
		sp.s.Lost = true
		sp.lost = "the GPU was lost while it was being sampled (" + field + ")"
		sp.miss(field, Reason(ret))
		return false
	}
	sp.miss(field, Reason(ret))
	return false
}

func (sp *sampler) miss(field, why string) {
	if sp.s.Missing == nil {
		sp.s.Missing = map[string]string{}
	}
	sp.s.Missing[field] = why
}

// SampleDevice snapshots one device handle. It never panics: each read
// is guarded, and a lost GPU gives what was read before it went.
func SampleDevice(index int, d Device) Snapshot {
	s := Snapshot{Index: index, Time: time.Now()}
	sp := &sampler{s: &s}
	var r nvml.Return
	sp.get("name", func() nvml.Return { s.Name, r = d.GetName(); return r })
	sp.get("uuid", func() nvml.Return { s.UUID, r = d.GetUUID(); return r })
	sp.get("pci_bus_id", func() nvml.Return {
		p, r := d.GetPciInfo()
		s.PCIBusID = busID(p)
		return r
	})
	sp.get("mig", func() nvml.Return {
		cur, pend, r := d.GetMigMode()
		if r == nvml.SUCCESS {
			s.MIG = &MIG{Enabled: cur == nvml.DEVICE_MIG_ENABLE, Pending: pend != cur}
		}
		return r
	})
	// Missing means not-supported for GPUs without MIG: not a problem.
	if s.Missing["mig"] == Reason(nvml.ERROR_NOT_SUPPORTED) {
		delete(s.Missing, "mig")
	}
	var u nvml.Utilization
	if sp.get("utilization", func() nvml.Return { u, r = d.GetUtilizationRates(); return r }) {
		s.Utilization = &Utilization{GPU: u.Gpu, Memory: u.Memory}
	} else if s.MIG != nil && s.MIG.Enabled && !s.Lost {
		sp.miss("utilization", s.Missing["utilization"]+" (in MIG mode NVML reports no utilisation for the whole GPU)")
	}
	var m nvml.Memory
	if sp.get("memory", func() nvml.Return { m, r = d.GetMemoryInfo(); return r }) {
		s.MemoryUsed, s.MemoryTotal = &m.Used, &m.Total
	}
	var mw uint32
	if sp.get("power_w", func() nvml.Return { mw, r = d.GetPowerUsage(); return r }) {
		s.PowerW = ptr(float64(mw) / 1000)
	}
	if sp.get("power_limit_w", func() nvml.Return { mw, r = d.GetEnforcedPowerLimit(); return r }) {
		s.PowerLimitW = ptr(float64(mw) / 1000)
	}
	var v uint32
	if sp.get("temperature_c", func() nvml.Return { v, r = d.GetTemperature(nvml.TEMPERATURE_GPU); return r }) {
		s.TempC = ptr(v)
	}
	if sp.get("clock_sm_mhz", func() nvml.Return { v, r = d.GetClockInfo(nvml.CLOCK_SM); return r }) {
		s.ClockSMMHz = ptr(v)
	}
	if sp.get("clock_mem_mhz", func() nvml.Return { v, r = d.GetClockInfo(nvml.CLOCK_MEM); return r }) {
		s.ClockMemMHz = ptr(v)
	}
	var mask uint64
	if sp.get("clock_events", func() nvml.Return {
		mask, r = d.GetCurrentClocksEventReasons()
		if r == nvml.ERROR_FUNCTION_NOT_FOUND { // drivers before 535 know the old name only
			mask, r = d.GetCurrentClocksThrottleReasons()
		}
		return r
	}) {
		s.ClockEventMask, s.ClockEvents = ptr(mask), ClockEventNames(mask)
	}
	sampleECC(sp, d)
	var corr, unc int
	var pend, fail bool
	if sp.get("remapped_rows", func() nvml.Return { corr, unc, pend, fail, r = d.GetRemappedRows(); return r }) {
		s.RemappedRows = &RemappedRows{Correctable: corr, Uncorrectable: unc, Pending: pend, Failure: fail}
	}
	sampleNVLink(sp, d)
	sampleProcesses(sp, d)
	if s.MIG != nil && s.MIG.Enabled {
		sampleMIG(sp, d)
	}
	return s
}

func sampleECC(sp *sampler, d Device) {
	var cur nvml.EnableState
	var r nvml.Return
	if !sp.get("ecc", func() nvml.Return { cur, _, r = d.GetEccMode(); return r }) {
		return
	}
	if cur != nvml.FEATURE_ENABLED {
		sp.miss("ecc", "ECC is disabled on this GPU")
		return
	}
	e := &ECC{}
	read := func(field string, t nvml.MemoryErrorType, c nvml.EccCounterType) *uint64 {
		var n uint64
		if sp.get(field, func() nvml.Return { n, r = d.GetTotalEccErrors(t, c); return r }) {
			return ptr(n)
		}
		return nil
	}
	e.VolatileSingle = read("ecc.volatile_single_bit", nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
	e.VolatileDouble = read("ecc.volatile_double_bit", nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	e.AggregateSingle = read("ecc.aggregate_single_bit", nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC)
	e.AggregateDouble = read("ecc.aggregate_double_bit", nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC)
	if e.VolatileSingle != nil || e.VolatileDouble != nil || e.AggregateSingle != nil || e.AggregateDouble != nil {
		sp.s.ECC = e
	}
}

func sampleNVLink(sp *sampler, d Device) {
	counters := []struct {
		name string
		c    nvml.NvLinkErrorCounter
	}{{"replay", nvml.NVLINK_ERROR_DL_REPLAY}, {"recovery", nvml.NVLINK_ERROR_DL_RECOVERY},
		{"crc_flit", nvml.NVLINK_ERROR_DL_CRC_FLIT}, {"crc_data", nvml.NVLINK_ERROR_DL_CRC_DATA}}
	for link := 0; link < MaxLinks && sp.lost == ""; link++ {
		st, r, perr := call2(func() (nvml.EnableState, nvml.Return) { return d.GetNvLinkState(link) })
		if perr != nil {
			sp.miss("nvlink", perr.Error())
			return
		}
		if r == nvml.ERROR_GPU_IS_LOST {
			sp.get("nvlink", func() nvml.Return { return r })
			return
		}
		if r != nvml.SUCCESS {
			// Past the last link NVML answers INVALID_ARGUMENT (or NOT_SUPPORTED):
			// only the first link's failure says the GPU has no NVLink.
			if link == 0 {
				sp.miss("nvlink", Reason(r))
			}
			return
		}
		if st != nvml.FEATURE_ENABLED {
			continue
		}
		le := LinkErrors{Link: link}
		vals := []*uint64{&le.Replay, &le.Recovery, &le.CRCFlit, &le.CRCData}
		var missing []string
		for i, c := range counters {
			v, r, perr := call2(func() (uint64, nvml.Return) { return d.GetNvLinkErrorCounter(link, c.c) })
			switch {
			case perr != nil:
				missing = append(missing, c.name+": "+perr.Error())
			case r == nvml.SUCCESS:
				*vals[i] = v
			case r == nvml.ERROR_GPU_IS_LOST:
				sp.get(fmt.Sprintf("nvlink.%d", link), func() nvml.Return { return r })
			default:
				missing = append(missing, c.name+": "+Reason(r))
			}
		}
		le.Missing = strings.Join(missing, "; ")
		sp.s.NVLink = append(sp.s.NVLink, le)
		sp.s.NVLinkActive++
	}
}

func sampleProcesses(sp *sampler, d Device) {
	var ps []nvml.ProcessInfo
	var r nvml.Return
	if !sp.get("processes", func() nvml.Return { ps, r = d.GetComputeRunningProcesses(); return r }) {
		return
	}
	if len(ps) > MaxProcesses {
		sp.s.ProcessesCut = len(ps) - MaxProcesses
		ps = ps[:MaxProcesses]
	}
	for _, p := range ps {
		gi := -1
		if p.GpuInstanceId != 0xFFFFFFFF && sp.s.MIG != nil && sp.s.MIG.Enabled {
			gi = int(p.GpuInstanceId)
		}
		sp.s.Processes = append(sp.s.Processes, Process{PID: p.Pid, UsedMemory: p.UsedGpuMemory, GPUInstance: gi, Rank: -1, LocalRank: -1})
	}
}

// sampleMIG lists the MIG devices of a MIG-enabled GPU. A slot without an
// instance answers NOT_FOUND; a half-configured GPU has few or none.
func sampleMIG(sp *sampler, d Device) {
	var maxn int
	var r nvml.Return
	if !sp.get("mig.devices", func() nvml.Return { maxn, r = d.GetMaxMigDeviceCount(); return r }) {
		return
	}
	for i := 0; i < min(maxn, MaxMIGDevices) && sp.lost == ""; i++ {
		md, r, perr := call2(func() (nvml.Device, nvml.Return) { return d.GetMigDeviceHandleByIndex(i) })
		if r == nvml.ERROR_GPU_IS_LOST {
			sp.get("mig.devices", func() nvml.Return { return r })
			return
		}
		if perr != nil || r == nvml.ERROR_NOT_FOUND || r == nvml.ERROR_INVALID_ARGUMENT || (r == nvml.SUCCESS && md == nil) {
			continue
		}
		m := MIGDevice{Index: i}
		if r != nvml.SUCCESS {
			m.Missing = Reason(r)
			sp.s.MIG.Devices = append(sp.s.MIG.Devices, m)
			continue
		}
		var miss []string
		if u, r, perr := call2(md.GetUUID); perr == nil && r == nvml.SUCCESS {
			m.UUID = u
		} else {
			miss = append(miss, "uuid: "+why(r, perr))
		}
		if mem, r, perr := call2(md.GetMemoryInfo); perr == nil && r == nvml.SUCCESS {
			m.MemoryUsed, m.MemoryTotal = ptr(mem.Used), ptr(mem.Total)
		} else {
			miss = append(miss, "memory: "+why(r, perr))
		}
		m.Missing = strings.Join(miss, "; ")
		sp.s.MIG.Devices = append(sp.s.MIG.Devices, m)
	}
}

func why(r nvml.Return, perr error) string {
	if perr != nil {
		return perr.Error()
	}
	return Reason(r)
}

// busID reads NVML's NUL-terminated bus id ("00000000:3B:00.0"), bounded
// by its array.
func busID(p nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

func ptr[T any](v T) *T { return &v }

// clockEvents are NVML's clock event (throttle) reasons, by bit.
var clockEvents = []struct {
	bit  uint64
	name string
}{
	{nvml.ClocksEventReasonGpuIdle, "gpu_idle"},
	{nvml.ClocksEventReasonApplicationsClocksSetting, "applications_clocks_setting"},
	{nvml.ClocksEventReasonSwPowerCap, "sw_power_cap"},
	{nvml.ClocksThrottleReasonHwSlowdown, "hw_slowdown"},
	{nvml.ClocksEventReasonSyncBoost, "sync_boost"},
	{nvml.ClocksEventReasonSwThermalSlowdown, "sw_thermal_slowdown"},
	{nvml.ClocksThrottleReasonHwThermalSlowdown, "hw_thermal_slowdown"},
	{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
	{nvml.ClocksEventReasonDisplayClockSetting, "display_clock_setting"},
	{0x200, "board_limit"},
	{0x400, "reliability"},
}

// ClockEventNames decodes a clock event mask; bits NVML has not named
// here are listed as "bit_N".
func ClockEventNames(mask uint64) []string {
	var out []string
	for _, e := range clockEvents {
		if mask&e.bit != 0 {
			out = append(out, e.name)
			mask &^= e.bit
		}
	}
	for b := 0; b < 64 && mask != 0; b++ {
		if mask&(1<<b) != 0 {
			out = append(out, fmt.Sprintf("bit_%d", b))
			mask &^= 1 << b
		}
	}
	return out
}
