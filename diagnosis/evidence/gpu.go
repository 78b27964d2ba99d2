package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// GPUSource is a GPU sampler running in this process (the node daemon's,
// or serve's when no daemon runs here).
type GPUSource interface {
	Report() gpu.Report
}

// NodeGPU is this node's GPUs: the live sampler's newest round when this
// process samples, else the newest round another sampler left in the
// data dir's rings (a daemon's, or a dead job's: the minutes before it
// ended). It never fails: what could not be read is in the report.
func NodeGPU(ctx context.Context, live GPUSource, e *sqlengine.Engine, host string) gpu.Report {
	var lr gpu.Report
	if live != nil {
		if lr = live.Report(); lr.Source == gpu.SourceLive {
			lr.Host = host
			return lr
		}
	}
	r, err := ReadGPURings(ctx, e)
	if err != nil {
		r = gpu.Report{Source: gpu.SourceNone, Status: gpu.Status{State: gpu.StateNotSampled, Reason: "the GPU rings could not be read: " + err.Error()}}
	}
	r.Host = host
	failed := live != nil && lr.Status.State != gpu.StateNotSampled && lr.Status.State != ""
	switch {
	case len(r.Devices) > 0 && failed:
		// The sampler here finds no GPU now (a driver that broke since);
		// rings an earlier sampler left still tell the past.
		r.Notes = append(r.Notes, "the live sampler has no GPU now ("+string(lr.Status.State)+": "+lr.Status.Reason+"); this is the last sample found in the data dir")
	case len(r.Devices) == 0 && failed:
		// Why this node has no GPU, as NVML said it.
		lr.Host = host
		return lr
	case len(r.Devices) == 0 && live != nil && lr.Status.Reason != "" && r.Status.State == gpu.StateNotSampled:
		r.Status.Reason += "; here: " + lr.Status.Reason
	}
	return r
}

// gpuNVMLCols are read from gpu.nvml in this order.
const gpuNVMLCols = "device_id, name, uuid, pci_bus_id, util_gpu_pct, util_mem_pct, memory_used_bytes, memory_total_bytes, " +
	"power_w, power_limit_w, temperature_c, clock_sm_mhz, clock_mem_mhz, clock_events, clock_event_mask, " +
	"ecc_volatile_sbe, ecc_volatile_dbe, ecc_aggregate_sbe, ecc_aggregate_dbe, " +
	"remapped_correctable, remapped_uncorrectable, remap_pending, remap_failure, nvlink_active, nvlink_errors, nvlink_detail, " +
	"mig_enabled, mig_pending, mig_devices, lost, signature, signature_why, missing"

// ReadGPURings reads the newest sampling round from the data dir's GPU
// rings (gpu.nvml, gpu.processes, gpu.xid, gpu.sampler). No rings is a
// report of state not_sampled, not an error.
func ReadGPURings(ctx context.Context, e *sqlengine.Engine) (gpu.Report, error) {
	none := gpu.Report{Source: gpu.SourceNone, Status: gpu.Status{State: gpu.StateNotSampled,
		Reason: "no GPU sampler has written to this data dir (no node daemon ran here, or PROBING_GPU=0)"}}
	if e == nil {
		none.Status.Reason = "no data dir to read GPU rings from"
		return none, nil
	}
	// The sampler's newest state: it says why there are no devices.
	var st gpu.Status
	var stPID int
	var stTS int64
	var notes []string
	interval := 0
	err := rows(ctx, e, "SELECT _pid, ts, state, reason, driver, devices, interval_ms, notes FROM gpu.sampler ORDER BY ts DESC LIMIT 1", func(v []any) {
		stPID, stTS = int(jsonrow.Int(v[0])), jsonrow.Int(v[1])
		st = gpu.Status{State: gpu.State(jsonrow.String(v[2])), Reason: jsonrow.String(v[3]), Driver: jsonrow.String(v[4]), Devices: int(jsonrow.Int(v[5]))}
		interval = int(jsonrow.Int(v[6]))
		if n := jsonrow.String(v[7]); n != "" {
			notes = strings.Split(n, "; ")
		}
	})
	if err != nil {
		return none, err
	}
	var pid int
	var ts int64
	if err := rows(ctx, e, "SELECT _pid, ts FROM gpu.nvml ORDER BY ts DESC LIMIT 1", func(v []any) {
		pid, ts = int(jsonrow.Int(v[0])), jsonrow.Int(v[1])
	}); err != nil {
		return none, err
	}
	if ts == 0 {
		if stTS != 0 {
			none.Status, none.SamplerPID, none.IntervalMS = st, stPID, interval
			none.Notes = notes
		}
		return none, nil
	}
	if stPID != pid {
		// The newest status is another sampler's (one that found no GPU
		// after this one stopped); the devices' own sampler's is wanted.
		st, notes = gpu.Status{State: gpu.StateOK, Devices: 0}, nil
		_ = rows(ctx, e, fmt.Sprintf("SELECT state, reason, driver, devices, interval_ms, notes FROM gpu.sampler WHERE _pid = %d ORDER BY ts DESC LIMIT 1", pid), func(v []any) {
			st = gpu.Status{State: gpu.State(jsonrow.String(v[0])), Reason: jsonrow.String(v[1]), Driver: jsonrow.String(v[2]), Devices: int(jsonrow.Int(v[3]))}
			interval = int(jsonrow.Int(v[4]))
			if n := jsonrow.String(v[5]); n != "" {
				notes = strings.Split(n, "; ")
			}
		})
	}
	at := time.UnixMicro(ts)
	var snaps []gpu.Snapshot
	var sigs []gpu.DeviceState
	err = rows(ctx, e, fmt.Sprintf("SELECT %s FROM gpu.nvml WHERE _pid = %d AND ts = %d ORDER BY device_id LIMIT %d", gpuNVMLCols, pid, ts, gpu.MaxDevices), func(v []any) {
		s := snapshotFromRow(v)
		s.Time = at
		snaps = append(snaps, s)
		sigs = append(sigs, gpu.DeviceState{Signature: gpu.Signature(jsonrow.String(v[30])), Why: jsonrow.String(v[31])})
	})
	if err != nil {
		return none, err
	}
	byIndex := map[int]int{}
	for i, s := range snaps {
		byIndex[s.Index] = i
	}
	err = rows(ctx, e, fmt.Sprintf("SELECT device_id, pid, used_memory_bytes, gpu_instance, rank, local_rank, role, rank_why FROM gpu.processes WHERE _pid = %d AND ts = %d LIMIT %d", pid, ts, gpu.MaxDevices*gpu.MaxProcesses), func(v []any) {
		i, ok := byIndex[int(jsonrow.Int(v[0]))]
		if !ok {
			return
		}
		snaps[i].Processes = append(snaps[i].Processes, gpu.Process{PID: uint32(jsonrow.Int(v[1])), UsedMemory: uint64(max(jsonrow.Int(v[2]), 0)),
			GPUInstance: int(jsonrow.Int(v[3])), Rank: int(jsonrow.Int(v[4])), LocalRank: int(jsonrow.Int(v[5])), Role: jsonrow.String(v[6]), RankWhy: jsonrow.String(v[7])})
	})
	if err != nil {
		return none, err
	}
	var xids []gpu.XidEvent
	err = rows(ctx, e, fmt.Sprintf("SELECT kind, xid, meaning, device_id, uuid, pci_bus_id, pid, process, message, source, event_ts, since_boot_ns FROM gpu.xid ORDER BY ts DESC LIMIT %d", gpu.MaxXidEvents), func(v []any) {
		x := gpu.XidEvent{Kind: jsonrow.String(v[0]), Xid: uint64(max(jsonrow.Int(v[1]), 0)), Meaning: jsonrow.String(v[2]), GPU: int(jsonrow.Int(v[3])), UUID: jsonrow.String(v[4]),
			PCIBusID: jsonrow.String(v[5]), PID: int(jsonrow.Int(v[6])), Process: jsonrow.String(v[7]), Message: jsonrow.String(v[8]), Source: jsonrow.String(v[9]),
			Boot: time.Duration(jsonrow.Int(v[11]))}
		if t := jsonrow.Int(v[10]); t > 0 {
			x.Time = time.UnixMicro(t)
		}
		xids = append(xids, x)
	})
	if err != nil {
		return none, err
	}
	for i, j := 0, len(xids)-1; i < j; i, j = i+1, j-1 {
		xids[i], xids[j] = xids[j], xids[i]
	}
	r := gpu.NewReport("", st, snaps, xids, 0)
	// The signatures as the sampler saw them (with the events it knew
	// then); a device the sampler left unclassified is classified now.
	for i := range r.Devices {
		if i < len(sigs) && sigs[i].Signature != "" {
			r.Devices[i].Signature, r.Devices[i].Why = sigs[i].Signature, sigs[i].Why
		}
	}
	r.Source, r.SampledAt, r.IntervalMS, r.SamplerPID, r.Notes = gpu.SourceRings, at, interval, pid, notes
	return r, nil
}

// snapshotFromRow rebuilds a Snapshot from a gpu.nvml row (gpuNVMLCols);
// -1 is a field NVML did not answer, and missing says why.
func snapshotFromRow(v []any) gpu.Snapshot {
	s := gpu.Snapshot{Index: int(jsonrow.Int(v[0])), Name: jsonrow.String(v[1]), UUID: jsonrow.String(v[2]), PCIBusID: jsonrow.String(v[3])}
	u64 := func(i int) *uint64 {
		if x := jsonrow.Int(v[i]); x >= 0 {
			y := uint64(x)
			return &y
		}
		return nil
	}
	u32 := func(i int) *uint32 {
		if x := jsonrow.Int(v[i]); x >= 0 {
			y := uint32(x)
			return &y
		}
		return nil
	}
	f := func(i int) *float64 {
		if x := jsonrow.Float(v[i]); x >= 0 {
			return &x
		}
		return nil
	}
	if g, m := jsonrow.Int(v[4]), jsonrow.Int(v[5]); g >= 0 {
		s.Utilization = &gpu.Utilization{GPU: uint32(g), Memory: uint32(max(m, 0))}
	}
	s.MemoryUsed, s.MemoryTotal = u64(6), u64(7)
	s.PowerW, s.PowerLimitW = f(8), f(9)
	s.TempC, s.ClockSMMHz, s.ClockMemMHz = u32(10), u32(11), u32(12)
	if ev := jsonrow.String(v[13]); ev != "" {
		s.ClockEvents = strings.Split(ev, ",")
	}
	s.ClockEventMask = u64(14)
	if ecc := (gpu.ECC{VolatileSingle: u64(15), VolatileDouble: u64(16), AggregateSingle: u64(17), AggregateDouble: u64(18)}); ecc != (gpu.ECC{}) {
		s.ECC = &ecc
	}
	if jsonrow.Int(v[19]) >= 0 {
		s.RemappedRows = &gpu.RemappedRows{Correctable: int(jsonrow.Int(v[19])), Uncorrectable: int(max(jsonrow.Int(v[20]), 0)),
			Pending: jsonrow.Int(v[21]) == 1, Failure: jsonrow.Int(v[22]) == 1}
	}
	if n := jsonrow.Int(v[23]); n >= 0 {
		s.NVLinkActive = int(min(n, gpu.MaxLinks))
		for _, d := range strings.Split(jsonrow.String(v[25]), "; ") {
			var l gpu.LinkErrors
			if _, err := fmt.Sscanf(d, "link %d: replay %d recovery %d crc_flit %d crc_data %d", &l.Link, &l.Replay, &l.Recovery, &l.CRCFlit, &l.CRCData); err == nil {
				if _, why, ok := strings.Cut(d, " ("); ok {
					l.Missing = strings.TrimSuffix(why, ")")
				}
				s.NVLink = append(s.NVLink, l)
			}
		}
	}
	if jsonrow.Int(v[26]) >= 0 {
		s.MIG = &gpu.MIG{Enabled: jsonrow.Int(v[26]) == 1, Pending: jsonrow.Int(v[27]) == 1}
		for i := 0; i < int(min(max(jsonrow.Int(v[28]), 0), gpu.MaxMIGDevices)); i++ {
			s.MIG.Devices = append(s.MIG.Devices, gpu.MIGDevice{Index: i})
		}
	}
	s.Lost = jsonrow.Int(v[29]) == 1
	if m := jsonrow.String(v[32]); m != "" {
		_ = json.Unmarshal([]byte(m), &s.Missing)
	}
	return s
}

// rows runs one bounded query; a table no process wrote is no rows.
func rows(ctx context.Context, e *sqlengine.Engine, q string, row func([]any)) error {
	res, err := e.Query(ctx, q, sqlengine.MaxLimit)
	if err != nil {
		if noTable(err) {
			return nil
		}
		return err
	}
	for _, r := range res.Rows {
		row(r.Values())
	}
	return nil
}

// noTable: the statement names a table no process wrote (no rows, not a
// failure).
func noTable(err error) bool {
	var se *sqlengine.Error
	return errors.As(err, &se) && strings.Contains(se.Msg, "no such table")
}
