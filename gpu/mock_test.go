package gpu

import (
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// load is what a mock GPU reports.
type load struct {
	util, memUtil uint32
	powerMW       uint32
	limitMW       uint32
	tempC         uint32
	events        uint64
	procs         []nvml.ProcessInfo
	links         int // active NVLinks
}

var spinningA100 = load{util: 100, memUtil: 0, powerMW: 70_000, limitMW: 400_000, tempC: 45, links: 12}

// machine is a DGX mock server whose devices answer every call this
// package makes (go-nvml's servers answer identity, memory and MIG only).
func machine(srv *server.Server, l load) *server.Server {
	for _, d := range srv.Devices {
		fill(d.(*server.Device), l)
	}
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return &mock.EventSet{}, nvml.SUCCESS }
	return srv
}

func a100(l load) *server.Server { return machine(dgxa100.New(), l) }
func h100(l load) *server.Server { return machine(dgxh100.New(), l) }

func fill(d *server.Device, l load) {
	d.MemoryInfo.Used = d.MemoryInfo.Total / 2
	d.MemoryInfo.Free = d.MemoryInfo.Total - d.MemoryInfo.Used
	bus := d.PciBusID
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		var p nvml.PciInfo
		for i := range min(len(bus), len(p.BusId)-1) {
			p.BusId[i] = int8(bus[i])
		}
		return p, nvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		d.RLock()
		defer d.RUnlock()
		if d.MigMode == nvml.DEVICE_MIG_ENABLE {
			return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.Utilization{Gpu: l.util, Memory: l.memUtil}, nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return l.powerMW, nvml.SUCCESS }
	d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return l.limitMW, nvml.SUCCESS }
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return l.tempC, nvml.SUCCESS }
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		if c == nvml.CLOCK_SM {
			return 1410, nvml.SUCCESS
		}
		return 1215, nvml.SUCCESS
	}
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return l.events, nvml.SUCCESS }
	d.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
		return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		if t == nvml.MEMORY_ERROR_TYPE_CORRECTED && c == nvml.AGGREGATE_ECC {
			return 3, nvml.SUCCESS
		}
		return 0, nvml.SUCCESS
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		if link >= 12 {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if link < l.links {
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_DISABLED, nvml.SUCCESS
	}
	d.GetNvLinkErrorCounterFunc = func(int, nvml.NvLinkErrorCounter) (uint64, nvml.Return) { return 0, nvml.SUCCESS }
	procs := append([]nvml.ProcessInfo(nil), l.procs...)
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS }
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		d.RLock()
		defer d.RUnlock()
		if d.MigMode != nvml.DEVICE_MIG_ENABLE {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if i >= 2 { // a partial configuration: two instances of seven
			return nil, nvml.ERROR_NOT_FOUND
		}
		md := &mock.Device{
			GetUUIDFunc:           func() (string, nvml.Return) { return "MIG-" + d.UUID[4:] + "-" + string(rune('0'+i)), nvml.SUCCESS },
			IsMigDeviceHandleFunc: func() (bool, nvml.Return) { return true, nvml.SUCCESS },
			// GetMemoryInfoFunc left nil: the mock panics, as a binding bug would.
		}
		return md, nvml.SUCCESS
	}
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeAll, nvml.SUCCESS }
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
}

// eventFeed is a mock event set that delivers what the test sends.
type eventFeed struct {
	mock.EventSet
	ch    chan nvml.EventData
	mu    sync.Mutex
	freed int
}

func newFeed() *eventFeed {
	f := &eventFeed{ch: make(chan nvml.EventData, 16)}
	f.WaitFunc = func(ms uint32) (nvml.EventData, nvml.Return) {
		select {
		case e := <-f.ch:
			return e, nvml.SUCCESS
		case <-time.After(time.Duration(ms) * time.Millisecond):
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
	f.FreeFunc = func() nvml.Return {
		f.mu.Lock()
		f.freed++
		f.mu.Unlock()
		return nvml.SUCCESS
	}
	return f
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
