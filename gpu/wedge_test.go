package gpu

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// A GPU whose NVML call never returns: Sample answers at its deadline
// with what it has, and Close does not hang on the stuck call.
func TestSampleWedgedGPU(t *testing.T) {
	srv := a100(spinningA100)
	release := make(chan struct{})
	entered := make(chan struct{})
	srv.Devices[4].(*server.Device).GetPowerUsageFunc = func() (uint32, nvml.Return) {
		close(entered)
		<-release
		return 1, nvml.SUCCESS
	}
	n := OpenLib(srv)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	snaps, err := n.Sample(ctx)
	if err != nil || len(snaps) != 8 {
		t.Fatal(err)
	}
	if snaps[3].PowerW == nil || !contains(snaps[4].Missing["all"], "did not answer") || !contains(snaps[5].Missing["all"], "not sampled: context canceled") {
		t.Fatalf("%v / %v / %v", snaps[3].Missing, snaps[4].Missing, snaps[5].Missing)
	}
	old := closeWait
	closeWait = time.Millisecond // the call is stuck until released: no race on this value
	defer func() { closeWait = old }()
	if err := n.Close(); err == nil || !contains(err.Error(), "has not returned") {
		t.Fatalf("Close with a stuck call: %v", err)
	}
	close(release)
}

// Close stops a watcher whose context is still live.
func TestCloseStopsWatcher(t *testing.T) {
	srv := a100(spinningA100)
	feed := newFeed()
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return feed, nvml.SUCCESS }
	n := OpenLib(srv)
	w, err := n.Watch(context.Background(), WatchOptions{Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	if len(srv.ShutdownCalls()) != 1 {
		t.Fatal("no Shutdown")
	}
}

func TestAssignGPUs(t *testing.T) {
	snaps := []Snapshot{{Index: 0, PCIBusID: "00000000:3B:00.0", UUID: "GPU-a"}, {Index: 1, PCIBusID: "00000000:AF:00.0", UUID: "GPU-b"}}
	evs := []XidEvent{{GPU: -1, PCIBusID: "0000:af:00"}, {GPU: -1, PCIBusID: "0000:01:00"}, {GPU: 0}}
	AssignGPUs(evs, snaps)
	if evs[0].GPU != 1 || evs[0].UUID != "GPU-b" || evs[1].GPU != -1 || evs[2].GPU != 0 {
		t.Fatalf("%+v", evs)
	}
}

// While a wedged GPU holds a round in NVML, later rounds do not start
// another sampling behind it: they say an earlier one is still waiting.
func TestSampleDoesNotPileUpOnAWedgedGPU(t *testing.T) {
	srv := a100(spinningA100)
	release := make(chan struct{})
	var calls atomic.Int32
	entered := make(chan struct{})
	srv.Devices[2].(*server.Device).GetPowerUsageFunc = func() (uint32, nvml.Return) {
		if calls.Add(1) == 1 {
			close(entered)
		}
		<-release
		return 1, nvml.SUCCESS
	}
	n := OpenLib(srv)
	// Round 0 ends once the call is stuck in NVML.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	if _, err := n.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 5; i++ {
		snaps, err := n.Sample(context.Background())
		if err != nil || len(snaps) != 8 {
			t.Fatal(err)
		}
		if !contains(snaps[0].Missing["all"], "an earlier sample is still waiting") {
			t.Fatalf("round %d: %v", i, snaps[0].Missing)
		}
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("the wedged call was entered %d times, want once", c)
	}
	close(release)
	waitFor(t, "sampling to resume", func() bool {
		snaps, _ := n.Sample(context.Background())
		return snaps[0].Missing["all"] == "" && snaps[0].PowerW != nil
	})
}
