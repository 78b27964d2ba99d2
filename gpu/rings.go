package gpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/internal/safefile"
	"github.com/probing-mcp/probing-mcp/storage/memt"
)

// The ring tables a sampler writes, in <data dir>/<its pid>/. Probing's
// own gpu.utilization keeps its contract columns, so Probing's skills and
// queries read ours; the gpu.nvml, gpu.processes, gpu.xid and gpu.sampler
// tables carry what NVML tells beyond it.
const (
	TableUtilization = "gpu.utilization"
	TableNVML        = "gpu.nvml"
	TableProcesses   = "gpu.processes"
	TableXid         = "gpu.xid"
	TableSampler     = "gpu.sampler"
)

// AgentNode marks the sampler's pid directory (procfacts.AgentNode).
const AgentNode = procfacts.AgentNode

type ringDef struct {
	name   string
	cols   []memt.Column
	chunk  int
	chunks int
}

func c(name string, t memt.DType) memt.Column { return memt.Column{Name: name, Type: t} }

// Geometries: at 8 GPUs and one sample a second gpu.nvml holds about 15
// minutes, gpu.utilization about 10, gpu.processes (8 ranks) about 30.
var ringDefs = []ringDef{
	{TableUtilization, []memt.Column{
		c("ts", memt.I64), c("backend", memt.Str), c("device_id", memt.I32), c("name", memt.Str),
		c("memory_model", memt.Str), c("chip", memt.Str), c("free_bytes", memt.I64), c("total_bytes", memt.I64),
		c("used_bytes", memt.I64), c("mem_used_pct", memt.F32), c("gpu_util_pct", memt.F32),
		c("mem_controller_util_pct", memt.F32), c("renderer_util_pct", memt.F32), c("tiler_util_pct", memt.F32),
		c("driver_mem_bytes", memt.I64), c("wall_ns", memt.I64), c("vector_util_pct", memt.F32),
		c("mem_bandwidth_util_pct", memt.F32), c("temperature_c", memt.F32), c("power_w", memt.F32),
	}, 64 << 10, 16},
	{TableNVML, []memt.Column{
		c("ts", memt.I64), c("device_id", memt.I32), c("name", memt.Str), c("uuid", memt.Str), c("pci_bus_id", memt.Str),
		c("util_gpu_pct", memt.I32), c("util_mem_pct", memt.I32), c("memory_used_bytes", memt.I64), c("memory_total_bytes", memt.I64),
		c("power_w", memt.F32), c("power_limit_w", memt.F32), c("temperature_c", memt.I32),
		c("clock_sm_mhz", memt.I32), c("clock_mem_mhz", memt.I32), c("clock_events", memt.Str), c("clock_event_mask", memt.I64),
		c("ecc_volatile_sbe", memt.I64), c("ecc_volatile_dbe", memt.I64), c("ecc_aggregate_sbe", memt.I64), c("ecc_aggregate_dbe", memt.I64),
		c("remapped_correctable", memt.I32), c("remapped_uncorrectable", memt.I32), c("remap_pending", memt.I32), c("remap_failure", memt.I32),
		c("nvlink_active", memt.I32), c("nvlink_errors", memt.I64), c("nvlink_detail", memt.Str),
		c("mig_enabled", memt.I32), c("mig_pending", memt.I32), c("mig_devices", memt.I32),
		c("processes", memt.I32), c("lost", memt.I32), c("signature", memt.Str), c("signature_why", memt.Str), c("missing", memt.Str),
	}, 64 << 10, 32},
	{TableProcesses, []memt.Column{
		c("ts", memt.I64), c("device_id", memt.I32), c("pid", memt.I64), c("used_memory_bytes", memt.I64),
		c("gpu_instance", memt.I32), c("rank", memt.I32), c("local_rank", memt.I32), c("role", memt.Str), c("rank_why", memt.Str),
	}, 64 << 10, 16},
	{TableXid, []memt.Column{
		c("ts", memt.I64), c("kind", memt.Str), c("xid", memt.I64), c("meaning", memt.Str), c("device_id", memt.I32),
		c("uuid", memt.Str), c("pci_bus_id", memt.Str), c("pid", memt.I64), c("process", memt.Str), c("message", memt.Str),
		c("source", memt.Str), c("event_ts", memt.I64), c("since_boot_ns", memt.I64),
	}, 32 << 10, 16},
	{TableSampler, []memt.Column{
		c("ts", memt.I64), c("state", memt.Str), c("reason", memt.Str), c("driver", memt.Str), c("devices", memt.I32),
		c("interval_ms", memt.I32), c("notes", memt.Str),
	}, 8 << 10, 8},
}

// RingSink writes ticks into the GPU ring tables. One process, one
// goroutine (MEMT has a single writer).
type RingSink struct {
	Dir string
	w   map[string]*memt.Writer
	// last sampler row written, and when: it is written again on a change
	// and every samplerEvery.
	lastState string
	lastAt    time.Time
}

const samplerEvery = time.Minute

// OpenRings creates the GPU tables in dataDir/<this pid>/ with an
// identity file that places them on host, as no rank. A table that
// cannot be created fails the whole sink (nothing half-written).
func OpenRings(dataDir, host string) (*RingSink, error) {
	pid := os.Getpid()
	dir := filepath.Join(dataDir, strconv.Itoa(pid))
	// The data dir is shared: a directory planted under this pid (or a
	// link in it) would have the sampler write where another user chose.
	if err := safefile.OwnDir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("GPU rings: %w", err)
	}
	s := &RingSink{Dir: dir, w: map[string]*memt.Writer{}}
	if err := writeIdentity(dir, pid, host); err != nil {
		return nil, fmt.Errorf("GPU rings: %w", err)
	}
	for _, d := range ringDefs {
		cols := append([]memt.Column(nil), d.cols...)
		w, err := memt.Create(filepath.Join(dir, d.name), cols, memt.Options{ChunkSize: d.chunk, NumChunks: d.chunks})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("GPU rings: %s: %w", d.name, err)
		}
		s.w[d.name] = w
	}
	return s, nil
}

func writeIdentity(dir string, pid int, host string) error {
	st, err := procfacts.StartTime(pid)
	if err != nil {
		return err
	}
	id := procfacts.Identity{Agent: AgentNode, PID: pid, StartTime: st, Host: host, Rank: -1, WorldSize: -1,
		LocalRank: -1, LocalWorldSize: -1, NodeRank: -1, Role: "node", Argv: os.Args}
	b, err := json.Marshal(id)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ".identity.json.tmp")
	os.Remove(tmp) // a leftover of a crash: a new file, never one reused
	f, err := safefile.Open(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, procfacts.IdentityFile))
}

// Close releases the tables (the files stay: they are the history).
func (s *RingSink) Close() error {
	var errs []error
	for _, w := range s.w {
		errs = append(errs, w.Close())
	}
	return errors.Join(errs...)
}

// Write appends one tick to every table.
func (s *RingSink) Write(t Tick) error {
	r := t.Report
	now := time.Now()
	ts := now.UnixMicro()
	if !r.SampledAt.IsZero() {
		ts = r.SampledAt.UnixMicro()
	}
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	state := fmt.Sprint(r.Status, r.Notes)
	if state != s.lastState || now.Sub(s.lastAt) >= samplerEvery {
		add(s.w[TableSampler].Row().I64(ts).Str(string(r.Status.State)).Str(r.Status.Reason).Str(r.Status.Driver).
			I32(int32(r.Status.Devices)).I32(int32(r.IntervalMS)).Str(strings.Join(r.Notes, "; ")).Commit())
		s.lastState, s.lastAt = state, now
	}
	for _, d := range r.Devices {
		add(s.utilRow(ts, d, t.Took))
		add(s.nvmlRow(ts, d))
		for _, p := range d.Processes {
			add(s.w[TableProcesses].Row().I64(ts).I32(int32(d.Index)).I64(int64(p.PID)).I64(int64(p.UsedMemory)).
				I32(int32(p.GPUInstance)).I32(int32(p.Rank)).I32(int32(p.LocalRank)).Str(p.Role).Str(p.RankWhy).Commit())
		}
	}
	for _, e := range t.New {
		var evTS int64
		if !e.Time.IsZero() {
			evTS = e.Time.UnixMicro()
		}
		add(s.w[TableXid].Row().I64(ts).Str(e.Kind).I64(int64(e.Xid)).Str(e.Meaning).I32(int32(e.GPU)).Str(e.UUID).
			Str(e.PCIBusID).I64(int64(e.PID)).Str(e.Process).Str(e.Message).Str(e.Source).I64(evTS).I64(int64(e.Boot)).Commit())
	}
	return errors.Join(errs...)
}

func (s *RingSink) utilRow(ts int64, d DeviceState, took time.Duration) error {
	var used, total, free int64 = -1, -1, -1
	usedPct, util, memUtil := float32(-1), float32(-1), float32(-1)
	if d.MemoryUsed != nil && d.MemoryTotal != nil {
		used, total = int64(*d.MemoryUsed), int64(*d.MemoryTotal)
		free = total - used
		if total > 0 {
			usedPct = float32(100 * float64(used) / float64(total))
		}
	}
	if d.Utilization != nil {
		util, memUtil = float32(d.Utilization.GPU), float32(d.Utilization.Memory)
	}
	return s.w[TableUtilization].Row().I64(ts).Str("cuda").I32(int32(d.Index)).Str(d.Name).Str("discrete").Str("").
		I64(free).I64(total).I64(used).F32(usedPct).F32(util).F32(memUtil).F32(-1).F32(-1).I64(0).I64(took.Nanoseconds()).
		F32(-1).F32(-1).F32(f32(u32f(d.TempC))).F32(f32(d.PowerW)).Commit()
}

func (s *RingSink) nvmlRow(ts int64, d DeviceState) error {
	utilG, utilM := int32(-1), int32(-1)
	if d.Utilization != nil {
		utilG, utilM = int32(d.Utilization.GPU), int32(d.Utilization.Memory)
	}
	var sbeV, dbeV, sbeA, dbeA int64 = -1, -1, -1, -1
	if e := d.ECC; e != nil {
		sbeV, dbeV, sbeA, dbeA = i64(e.VolatileSingle), i64(e.VolatileDouble), i64(e.AggregateSingle), i64(e.AggregateDouble)
	}
	rc, ru, rp, rf := int32(-1), int32(-1), int32(-1), int32(-1)
	if rr := d.RemappedRows; rr != nil {
		rc, ru, rp, rf = int32(rr.Correctable), int32(rr.Uncorrectable), b32(rr.Pending), b32(rr.Failure)
	}
	links, linkErr := int32(-1), int64(-1)
	var detail []string
	if _, miss := d.Missing["nvlink"]; !miss {
		links, linkErr = int32(d.NVLinkActive), 0
		for _, l := range d.NVLink {
			linkErr += int64(l.Errors())
			if l.Errors() > 0 || l.Missing != "" {
				detail = append(detail, linkText(l))
			}
		}
	}
	migOn, migPend, migN := int32(-1), int32(-1), int32(-1)
	if m := d.MIG; m != nil {
		migOn, migPend, migN = b32(m.Enabled), b32(m.Pending), int32(len(m.Devices))
	}
	mask := int64(-1)
	if d.ClockEventMask != nil {
		mask = int64(*d.ClockEventMask)
	}
	missing := ""
	if len(d.Missing) > 0 {
		b, _ := json.Marshal(d.Missing)
		missing = string(b)
	}
	return s.w[TableNVML].Row().I64(ts).I32(int32(d.Index)).Str(d.Name).Str(d.UUID).Str(d.PCIBusID).
		I32(utilG).I32(utilM).I64(i64(d.MemoryUsed)).I64(i64(d.MemoryTotal)).
		F32(f32(d.PowerW)).F32(f32(d.PowerLimitW)).I32(i32(d.TempC)).
		I32(i32(d.ClockSMMHz)).I32(i32(d.ClockMemMHz)).Str(strings.Join(d.ClockEvents, ",")).I64(mask).
		I64(sbeV).I64(dbeV).I64(sbeA).I64(dbeA).I32(rc).I32(ru).I32(rp).I32(rf).
		I32(links).I64(linkErr).Str(strings.Join(detail, "; ")).I32(migOn).I32(migPend).I32(migN).
		I32(int32(len(d.Processes) + d.ProcessesCut)).I32(b32(d.Lost)).Str(string(d.Signature)).Str(d.Why).Str(missing).Commit()
}

// linkText is one NVLink's counters as gpu.nvml's nvlink_detail holds them
// ("link 3: replay 2 recovery 0 crc_flit 0 crc_data 0").
func linkText(l LinkErrors) string {
	s := fmt.Sprintf("link %d: replay %d recovery %d crc_flit %d crc_data %d", l.Link, l.Replay, l.Recovery, l.CRCFlit, l.CRCData)
	if l.Missing != "" {
		s += " (" + l.Missing + ")"
	}
	return s
}

func i64[T uint64 | uint32](p *T) int64 {
	if p == nil {
		return -1
	}
	return int64(*p)
}

func i32(p *uint32) int32 {
	if p == nil {
		return -1
	}
	return int32(*p)
}

func f32(p *float64) float32 {
	if p == nil {
		return -1
	}
	return float32(*p)
}

func u32f(p *uint32) *float64 {
	if p == nil {
		return nil
	}
	v := float64(*p)
	return &v
}

func b32(b bool) int32 {
	if b {
		return 1
	}
	return 0
}
