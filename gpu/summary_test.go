package gpu

import (
	"context"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

func snap(util uint32, w, limit float64) Snapshot {
	return Snapshot{Name: "G", Utilization: &Utilization{GPU: util}, PowerW: &w, PowerLimitW: &limit}
}

func TestClassify(t *testing.T) {
	dbe := uint64(2)
	cases := []struct {
		s    Snapshot
		xids []XidEvent
		want Signature
	}{
		{snap(100, 70, 400), nil, SigSpinning},
		{snap(95, 99, 400), nil, SigSpinning},
		{snap(94, 70, 400), nil, SigActive}, // not pinned
		{snap(100, 100, 400), nil, SigBusy}, // a quarter of the limit: real work
		{snap(100, 350, 400), nil, SigBusy},
		{snap(60, 200, 400), nil, SigBusy},
		{snap(30, 200, 400), nil, SigActive},
		{snap(0, 60, 400), nil, SigIdle},
		{Snapshot{Lost: true}, nil, SigLost},
		{Snapshot{Missing: map[string]string{"utilization": "x"}}, nil, SigUnknown},
		{Snapshot{Utilization: &Utilization{GPU: 100}}, nil, SigUnknown}, // no power: cannot tell
		{Snapshot{Index: 2, Utilization: &Utilization{GPU: 100}}, []XidEvent{{Kind: "xid", Xid: 79, GPU: 2}}, SigError},
		{Snapshot{Index: 2, PCIBusID: "00000000:3B:00.0", Utilization: &Utilization{}}, []XidEvent{{Kind: "xid", Xid: 48, GPU: -1, PCIBusID: "0000:3b:00"}}, SigError},
		{Snapshot{Index: 2, Utilization: &Utilization{}}, []XidEvent{{Kind: "xid", Xid: 13, GPU: 2}}, SigIdle}, // an application fault, not the GPU
		{Snapshot{Utilization: &Utilization{}, ECC: &ECC{VolatileDouble: &dbe}}, nil, SigError},
		{Snapshot{Utilization: &Utilization{}, RemappedRows: &RemappedRows{Pending: true}}, nil, SigError},
	}
	for i, c := range cases {
		if got, why := Classify(c.s, c.xids); got != c.want || why == "" {
			t.Errorf("case %d: %s (%s), want %s", i, got, why, c.want)
		}
	}
}

// Eight A100s, one odd one out and one lost, with an Xid: the Xid first,
// the lost GPU, the odd one, then the seven alike in one line.
func TestSummarize(t *testing.T) {
	srv := a100(spinningA100)
	srv.Devices[5].(*server.Device).GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
	busy := srv.Devices[2].(*server.Device)
	busy.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 380_000, nvml.SUCCESS }
	busy.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return []nvml.ProcessInfo{{Pid: 1 << 30}}, nvml.SUCCESS
	}
	snaps, err := OpenLib(srv).Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range snaps {
		for j := range snaps[i].Processes {
			snaps[i].Processes[j].Rank = 2
		}
	}
	xids := []XidEvent{{Kind: "xid", Xid: 79, Meaning: XidMeaning(79), GPU: -1, PCIBusID: "0000:05:00", PID: 12, Process: "python", Source: "kmsg"},
		{Kind: "xid", Xid: 79, Meaning: XidMeaning(79), GPU: 5, Source: "nvml"}}
	text := Summarize(Status{State: StateOK, Devices: 8}, snaps, xids, 0)
	lines := strings.Split(text, "\n")
	want := []string{
		"GPU errors (2 events):",
		"  GPU 5: Xid 79: GPU has fallen off the bus (pid 12 python) ×2 [kmsg]",
		"GPU 5 (Mock NVIDIA A100-SXM4-40GB) lost: NVML: GPU is lost, 100% util, 20 GiB used",
		"GPU 2 (Mock NVIDIA A100-SXM4-40GB) busy: 100% util, 380 W of 400 W, 45 °C, 20 GiB used, ranks 2",
		"GPUs 0-1,3-4,6-7 (Mock NVIDIA A100-SXM4-40GB) spinning: 100% util, 70 W of 400 W, 45 °C, 20 GiB used",
	}
	if len(lines) != len(want) {
		t.Fatalf("got\n%s", text)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d:\n got %q\nwant %q", i, lines[i], want[i])
		}
	}
}

func TestSummarizeBounded(t *testing.T) {
	var snaps []Snapshot
	for i := range 64 {
		s := snap(uint32(i%3)*50, float64(70+i), 400)
		s.Index, s.Name, s.Lost = i, "G", i%2 == 0
		s.Missing = map[string]string{"x": strings.Repeat("y", i)}
		snaps = append(snaps, s)
	}
	var xids []XidEvent
	for i := range 64 {
		xids = append(xids, XidEvent{Kind: "xid", Xid: uint64(i), Meaning: XidMeaning(uint64(i)), GPU: i, Source: "nvml"})
	}
	text := Summarize(Status{State: StateOK}, snaps, xids, 500)
	if len(text) > 500 || !strings.HasSuffix(text, "more lines cut") || !strings.HasPrefix(text, "GPU errors (64 events):\n  GPU 0: Xid 0") {
		t.Fatalf("%d bytes:\n%s", len(text), text)
	}
	if got := Summarize(Status{State: StateNoLibrary, Reason: "no lib"}, nil, nil, 0); got != "GPUs: no_library: no lib" {
		t.Fatal(got)
	}
}
