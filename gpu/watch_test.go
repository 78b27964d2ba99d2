package gpu

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// waitFor polls cond; the timeout only guards against a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWatchXid(t *testing.T) {
	srv := a100(spinningA100)
	feed := newFeed()
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return feed, nvml.SUCCESS }
	// GPU 6 cannot register, GPU 7 supports the ECC events only.
	srv.Devices[6].(*server.Device).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	srv.Devices[7].(*server.Device).GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeSingleBitEccError | nvml.EventTypeDoubleBitEccError, nvml.SUCCESS
	}
	n := OpenLib(srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := n.Watch(ctx, WatchOptions{Buffer: 3, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if notes := w.Notes(); len(notes) != 2 || !contains(notes[0], "GPU 6: events not registered: not supported") || !contains(notes[1], "GPU 7: watches [double_bit_ecc single_bit_ecc] only") {
		t.Fatalf("notes %q", notes)
	}
	feed.ch <- nvml.EventData{Device: srv.Devices[3], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	feed.ch <- nvml.EventData{Device: srv.Devices[1], EventType: nvml.EventTypeDoubleBitEccError}
	feed.ch <- nvml.EventData{Device: nil, EventType: nvml.EventTypeXidCriticalError, EventData: 13}
	feed.ch <- nvml.EventData{Device: srv.Devices[2], EventType: nvml.EventTypeSingleBitEccError}
	feed.ch <- nvml.EventData{Device: srv.Devices[2], EventType: nvml.EventTypeXidCriticalError, EventData: 94}
	waitFor(t, "five events", func() bool { evs, dropped := w.Events(); return len(evs)+dropped == 5 })
	evs, dropped := w.Events()
	if dropped != 2 || len(evs) != 3 { // the buffer keeps the newest three
		t.Fatalf("dropped %d, %+v", dropped, evs)
	}
	if evs[0].Kind != "xid" || evs[0].Xid != 13 || evs[0].GPU != -1 || evs[2].Xid != 94 || evs[2].GPU != 2 || evs[2].Source != "nvml" ||
		evs[1].Kind != "single_bit_ecc" || evs[1].UUID == "" {
		t.Fatalf("%+v", evs)
	}
	cancel()
	<-w.Done()
	feed.mu.Lock()
	freed := feed.freed
	feed.mu.Unlock()
	if freed != 1 || w.Err() != "" {
		t.Fatalf("freed %d err %q", freed, w.Err())
	}
	if err := n.Close(); err != nil { // waits for no one now
		t.Fatal(err)
	}
}

// A wait that fails for good stops the watcher with the reason; Close
// waits for it.
func TestWatchStopsOnError(t *testing.T) {
	srv := a100(spinningA100)
	feed := newFeed()
	calls := 0
	feed.WaitFunc = func(uint32) (nvml.EventData, nvml.Return) {
		calls++
		if calls <= 3 { // said once, retried at the poll period
			return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
		}
		return nvml.EventData{}, nvml.ERROR_UNKNOWN
	}
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return feed, nvml.SUCCESS }
	n := OpenLib(srv)
	w, err := n.Watch(context.Background(), WatchOptions{Poll: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	evs, _ := w.Events()
	if !contains(w.Err(), "unknown NVML error") || len(evs) != 1 || evs[0].Kind != "gpu_lost" || calls != 4 {
		t.Fatalf("%q %+v", w.Err(), evs)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestWatchNothingRegistered(t *testing.T) {
	srv := a100(spinningA100)
	feed := newFeed()
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return feed, nvml.SUCCESS }
	for _, d := range srv.Devices {
		d.(*server.Device).GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypePState, nvml.SUCCESS }
	}
	n := OpenLib(srv)
	if _, err := n.Watch(context.Background(), WatchOptions{}); err == nil || !contains(err.Error(), "no GPU could be registered") {
		t.Fatal(err)
	}
	if feed.freed != 1 {
		t.Fatal("event set not freed")
	}
	if err := n.Close(); err != nil { // must not wait for a watcher that never ran
		t.Fatal(err)
	}
}
