package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

func TestSampleDGXA100(t *testing.T) {
	l := spinningA100
	l.procs = []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 1 << 30, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}}
	l.events = nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwPowerBrakeSlowdown
	n := OpenLib(a100(l))
	if st := n.Status(); st.State != StateOK || st.Devices != 8 || st.Driver != "550.54.15" {
		t.Fatalf("status %+v", st)
	}
	snaps, err := n.Sample(context.Background())
	if err != nil || len(snaps) != 8 {
		t.Fatalf("Sample: %d, %v", len(snaps), err)
	}
	s := snaps[3]
	if s.Index != 3 || s.Name != "Mock NVIDIA A100-SXM4-40GB" || s.UUID == "" || s.PCIBusID != "0000:03:00.0" {
		t.Fatalf("identity %+v", s)
	}
	if s.Utilization == nil || s.Utilization.GPU != 100 || *s.PowerW != 70 || *s.PowerLimitW != 400 || *s.TempC != 45 ||
		*s.ClockSMMHz != 1410 || *s.ClockMemMHz != 1215 || *s.MemoryTotal != 40960<<20 || *s.MemoryUsed != 20480<<20 {
		t.Fatalf("counters %+v", s)
	}
	if len(s.ClockEvents) != 2 || s.ClockEvents[0] != "sw_power_cap" || s.ClockEvents[1] != "hw_power_brake_slowdown" {
		t.Fatalf("clock events %v", s.ClockEvents)
	}
	if s.ECC == nil || *s.ECC.AggregateSingle != 3 || *s.ECC.VolatileDouble != 0 || s.RemappedRows == nil {
		t.Fatalf("ecc %+v remap %+v", s.ECC, s.RemappedRows)
	}
	if len(s.NVLink) != 12 || len(s.Processes) != 1 || s.Processes[0].PID != 4242 || s.Processes[0].GPUInstance != -1 {
		t.Fatalf("links %d procs %+v", len(s.NVLink), s.Processes)
	}
	if s.MIG == nil || s.MIG.Enabled || len(s.Missing) != 0 {
		t.Fatalf("mig %+v missing %v", s.MIG, s.Missing)
	}
	if _, err := json.Marshal(snaps); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Sample(context.Background()); !errors.Is(err, ErrNotReady) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestSampleDGXH100(t *testing.T) {
	n := OpenLib(h100(load{util: 100, powerMW: 120_000, limitMW: 700_000, tempC: 40, links: 18}))
	snaps, err := n.Sample(context.Background())
	if err != nil || len(snaps) != 8 || !contains(snaps[0].Name, "H100") {
		t.Fatalf("%v %+v", err, snaps)
	}
	if sig, _ := Classify(snaps[0], nil); sig != SigSpinning {
		t.Fatalf("H100 at 100%% and 120 W of 700 W: %s", sig)
	}
}

// A field NVML refuses says why; the rest is reported.
func TestSampleMissingFields(t *testing.T) {
	srv := a100(spinningA100)
	d := srv.Devices[1].(*server.Device)
	d.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_NO_PERMISSION }
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_FUNCTION_NOT_FOUND }
	d.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksThrottleReasonHwSlowdown, nvml.SUCCESS }
	d.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	d.GetRemappedRowsFunc = nil // the mock panics: a binding bug must not take the daemon down
	snaps, _ := OpenLib(srv).Sample(context.Background())
	s := snaps[1]
	if s.Missing["ecc"] != Reason(nvml.ERROR_NOT_SUPPORTED) || s.ECC != nil {
		t.Fatalf("ecc: %q", s.Missing["ecc"])
	}
	if s.Missing["temperature_c"] != Reason(nvml.ERROR_NO_PERMISSION) || s.TempC != nil {
		t.Fatalf("temperature: %v", s.Missing)
	}
	if !contains(s.Missing["remapped_rows"], "panicked") || s.Missing["nvlink"] != Reason(nvml.ERROR_NOT_SUPPORTED) {
		t.Fatalf("missing %v", s.Missing)
	}
	if len(s.ClockEvents) != 1 || s.ClockEvents[0] != "hw_slowdown" { // the old API answered
		t.Fatalf("clock events %v", s.ClockEvents)
	}
	if s.PowerW == nil || s.Utilization == nil || s.Lost {
		t.Fatalf("the rest must be reported: %+v", s)
	}
	if len(snaps[0].Missing) != 0 {
		t.Fatalf("GPU 0 untouched: %v", snaps[0].Missing)
	}
}

// A GPU that falls off mid-sample gives what was read before, the
// reason, and no further reads.
func TestSampleLostMidSample(t *testing.T) {
	srv := a100(spinningA100)
	d := srv.Devices[5].(*server.Device)
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
	d.GetNvLinkStateFunc = func(int) (nvml.EnableState, nvml.Return) {
		t.Error("NVLink read after the GPU was lost")
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	snaps, _ := OpenLib(srv).Sample(context.Background())
	s := snaps[5]
	if !s.Lost || s.Utilization == nil || s.MemoryTotal == nil || s.PowerW != nil {
		t.Fatalf("partial snapshot %+v", s)
	}
	if s.Missing["power_w"] != Reason(nvml.ERROR_GPU_IS_LOST) || !contains(s.Missing["temperature_c"], "lost while it was being sampled (power_w)") ||
		!contains(s.Missing["processes"], "not read") {
		t.Fatalf("missing %v", s.Missing)
	}
	if sig, why := Classify(s, nil); sig != SigLost {
		t.Fatalf("%s %s", sig, why)
	}
	if snaps[6].Lost || snaps[6].PowerW == nil {
		t.Fatal("GPU 6 sampled as usual")
	}
}

// MIG on some devices: the mode, the MIG devices (a partial setup; one
// whose memory read panics), no utilisation, no crash.
func TestSampleMIG(t *testing.T) {
	srv := a100(spinningA100)
	for _, i := range []int{2, 3} {
		d := srv.Devices[i].(*server.Device)
		d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	}
	pend := srv.Devices[4].(*server.Device)
	pend.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
	noMIG := srv.Devices[0].(*server.Device)
	noMIG.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	snaps, _ := OpenLib(srv).Sample(context.Background())
	s := snaps[2]
	if s.MIG == nil || !s.MIG.Enabled || len(s.MIG.Devices) != 2 || s.MIG.Devices[0].UUID == "" || !contains(s.MIG.Devices[0].Missing, "panicked") {
		t.Fatalf("mig %+v", s.MIG)
	}
	if s.Utilization != nil || !contains(s.Missing["utilization"], "not supported") {
		t.Fatalf("utilization %v / %v", s.Utilization, s.Missing)
	}
	if sig, _ := Classify(s, nil); sig != SigUnknown {
		t.Fatalf("MIG GPU: %s", sig)
	}
	if !snaps[4].MIG.Pending || snaps[4].MIG.Enabled {
		t.Fatalf("pending %+v", snaps[4].MIG)
	}
	if snaps[0].MIG != nil || snaps[0].Missing["mig"] != "" {
		t.Fatalf("no MIG on GPU 0: %+v %v", snaps[0].MIG, snaps[0].Missing)
	}
	text := Summarize(Status{State: StateOK}, snaps, nil, 0)
	if !contains(text, "GPU 4 MIG change pending a reset") || !contains(text, "MIG with 2 devices") {
		t.Fatal(text)
	}
}

func TestSampleContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	snaps, err := OpenLib(a100(spinningA100)).Sample(ctx)
	if err != nil || len(snaps) != 8 || !contains(snaps[0].Missing["all"], "canceled") {
		t.Fatalf("%v %+v", err, snaps)
	}
}

func TestClockEventNames(t *testing.T) {
	got := ClockEventNames(nvml.ClocksThrottleReasonHwThermalSlowdown | nvml.ClocksEventReasonSwThermalSlowdown | 1<<40)
	if len(got) != 3 || got[0] != "sw_thermal_slowdown" || got[1] != "hw_thermal_slowdown" || got[2] != "bit_40" {
		t.Fatal(got)
	}
	if ClockEventNames(0) != nil {
		t.Fatal("none")
	}
}

// A GPU NVML gives no handle for at Init keeps its entry with the reason.
func TestSampleNoHandle(t *testing.T) {
	srv := a100(spinningA100)
	devs := srv.Devices
	srv.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 6 {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return devs[i], nvml.SUCCESS
	}
	snaps, err := OpenLib(srv).Sample(context.Background())
	if err != nil || len(snaps) != 8 || !contains(snaps[6].Missing["all"], "no handle for this GPU at Init: GPU is lost") || snaps[7].PowerW == nil {
		t.Fatalf("%v %+v", err, snaps[6])
	}
}
