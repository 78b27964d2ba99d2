package evidence

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

func p[T any](v T) *T { return &v }

// twoGPUs: GPU 0 answers every field (rank 3 on it), GPU 1 is lost.
func twoGPUs(at time.Time, util uint32) []gpu.Snapshot {
	return []gpu.Snapshot{{
		Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-aaaa", PCIBusID: "00000000:18:00.0",
		Utilization: &gpu.Utilization{GPU: util, Memory: 2}, MemoryUsed: p(uint64(40 << 30)), MemoryTotal: p(uint64(80 << 30)),
		PowerW: p(112.5), PowerLimitW: p(700.0), TempC: p(uint32(51)), ClockSMMHz: p(uint32(1980)), ClockMemMHz: p(uint32(2619)),
		ClockEvents: []string{"sw_power_cap", "hw_slowdown"}, ClockEventMask: p(uint64(0x0c)),
		ECC:          &gpu.ECC{VolatileSingle: p(uint64(0)), VolatileDouble: p(uint64(0)), AggregateSingle: p(uint64(3)), AggregateDouble: p(uint64(0))},
		RemappedRows: &gpu.RemappedRows{Correctable: 1, Pending: true},
		NVLink:       []gpu.LinkErrors{{Link: 4, Replay: 7, CRCData: 1}, {Link: 9, Missing: "crc_flit: not supported"}},
		NVLinkActive: 18,
		MIG:          &gpu.MIG{Enabled: false},
		Processes: []gpu.Process{{PID: 4242, UsedMemory: 30 << 30, GPUInstance: -1, Rank: 3, LocalRank: 3, Role: "worker"},
			{PID: 77, UsedMemory: 1 << 20, GPUInstance: -1, Rank: -1, LocalRank: -1, RankWhy: "pid 77 is not in this PID namespace"}},
		Time: at,
	}, {
		Index: 1, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-bbbb", PCIBusID: "00000000:2a:00.0", Lost: true,
		Missing: map[string]string{"utilization": "GPU is lost", "power": "GPU is lost"}, Time: at,
	}}
}

func TestGPURingsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	rings, err := gpu.OpenRings(dir, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	defer rings.Close()
	old := time.Now().Add(-5 * time.Second).Truncate(time.Microsecond)
	now := old.Add(time.Second)
	st := gpu.Status{State: gpu.StateOK, Driver: "550.54.15", Devices: 2}
	xid := gpu.XidEvent{Kind: "xid", Xid: 79, Meaning: gpu.XidMeaning(79), GPU: -1, PCIBusID: "0000:2a:00", PID: 4242, Process: "python",
		Message: "GPU has fallen off the bus.", Source: "kmsg", Boot: 1234 * time.Second, Time: old.Add(-time.Minute)}
	first := gpu.NewReport("node-a", st, twoGPUs(old, 100), []gpu.XidEvent{xid}, 0)
	first.IntervalMS = 1000
	if err := rings.Write(gpu.Tick{Report: first, New: []gpu.XidEvent{xid}}); err != nil {
		t.Fatal(err)
	}
	want := gpu.NewReport("node-a", st, twoGPUs(now, 0), []gpu.XidEvent{xid}, 0)
	want.IntervalMS = 1000
	if err := rings.Write(gpu.Tick{Report: want}); err != nil {
		t.Fatal(err)
	}
	e, err := sqlengine.New(sqlengine.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadGPURings(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	if got.Source != gpu.SourceRings || !got.SampledAt.Equal(now) || got.IntervalMS != 1000 || got.Status != st {
		t.Fatalf("report: source %s at %v (want %v) interval %d status %+v", got.Source, got.SampledAt, now, got.IntervalMS, got.Status)
	}
	// What the rings keep of each device is what was sampled.
	for i := range want.Devices {
		want.Devices[i].Time = now
		g, _ := json.Marshal(got.Devices[i])
		w, _ := json.Marshal(want.Devices[i])
		if string(g) != string(w) {
			t.Errorf("GPU %d from the rings:\n got %s\nwant %s", i, g, w)
		}
	}
	if len(got.Xids) != 1 {
		t.Fatalf("xids %+v", got.Xids)
	}
	gx := got.Xids[0]
	if gx.Xid != 79 || gx.GPU != 1 || gx.UUID != "GPU-bbbb" || !gx.Time.Equal(xid.Time) || gx.Boot != xid.Boot || gx.Message != xid.Message {
		t.Errorf("xid from the rings: %+v", gx)
	}
	if got.Devices[1].Signature != gpu.SigLost || got.Devices[0].Signature != gpu.SigError { // a row remap pending
		t.Errorf("signatures %s, %s", got.Devices[0].Signature, got.Devices[1].Signature)
	}
	// The same table through SQL as Probing's skills read it.
	res, err := e.Query(context.Background(), "SELECT device_id, gpu_util_pct, power_w, backend FROM gpu.utilization ORDER BY ts DESC, device_id LIMIT 2", 10)
	if err != nil {
		t.Fatal(err)
	}
	if v := res.Rows[0].Values(); jsonrow.Int(v[0]) != 0 || jsonrow.Float(v[1]) != 0 || jsonrow.Float(v[2]) != 112.5 || jsonrow.String(v[3]) != "cuda" {
		t.Errorf("gpu.utilization row %v", v)
	}
	if v := res.Rows[1].Values(); jsonrow.Float(v[1]) != -1 || jsonrow.Float(v[2]) != -1 {
		t.Errorf("a lost GPU's utilization must read -1 (n/a), got %v", v)
	}
}

func TestGPUNotSampled(t *testing.T) {
	e, err := sqlengine.New(sqlengine.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r := NodeGPU(context.Background(), nil, e, "node-b")
	if r.Source != gpu.SourceNone || r.Status.State != gpu.StateNotSampled || r.Host != "node-b" || !strings.Contains(r.Status.Reason, "PROBING_GPU=0") {
		t.Fatalf("%+v", r)
	}
	// A live sampler's report wins over the rings.
	live := gpu.NewReport("", gpu.Status{State: gpu.StateOK, Devices: 2}, twoGPUs(time.Now(), 100), nil, 0)
	live.Source = gpu.SourceLive
	r = NodeGPU(context.Background(), fixedGPU(live), e, "node-b")
	if r.Source != gpu.SourceLive || len(r.Devices) != 2 || r.Host != "node-b" {
		t.Fatalf("%+v", r)
	}
	if !reflect.DeepEqual(r.Devices[0].Processes, live.Devices[0].Processes) {
		t.Fatal("live processes changed")
	}
}

type fixedGPU gpu.Report

func (f fixedGPU) Report() gpu.Report { return gpu.Report(f) }
