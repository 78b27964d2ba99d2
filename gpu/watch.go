package gpu

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// WatchedEvents are the NVML events the watcher registers for.
const WatchedEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError

// WatchOptions bound a watcher. Zero values take the defaults.
type WatchOptions struct {
	// Buffer is how many events are kept (the newest; default MaxXidEvents).
	Buffer int
	// Poll is how long one NVML wait lasts (default 1 s): the longest
	// Stop waits after the context ends.
	Poll time.Duration
}

// Watcher collects NVML's Xid and ECC events while it runs.
type Watcher struct {
	n    *NVML
	set  nvml.EventSet
	uuid map[string]int // device UUID → index
	opts WatchOptions

	mu      sync.Mutex
	events  []XidEvent
	dropped int
	notes   []string
	err     string
	done    chan struct{}
}

// Watch registers every GPU for WatchedEvents and collects them until ctx
// ends or the session is closed. GPUs that cannot be registered (not supported, lost) are said in
// Notes; the watcher runs for the others. NVML reports only events after
// registration: backfill with ReadKmsg.
func (n *NVML) Watch(ctx context.Context, opts WatchOptions) (*Watcher, error) {
	if opts.Buffer <= 0 {
		opts.Buffer = MaxXidEvents
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	devs, err := n.acquire()
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	n.mu.Lock()
	lib := n.lib
	n.stops = append(n.stops, stop)
	n.mu.Unlock()
	set, ret, perr := call2(lib.EventSetCreate)
	if perr != nil || ret != nvml.SUCCESS {
		stop()
		n.refs.Done()
		return nil, fmt.Errorf("gpu: NVML event set: %s", why(ret, perr))
	}
	w := &Watcher{n: n, set: set, uuid: map[string]int{}, opts: opts, done: make(chan struct{})}
	registered := 0
	for i, d := range devs {
		if d == nil {
			w.notes = append(w.notes, fmt.Sprintf("GPU %d: no handle, not watched", i))
			continue
		}
		if u, r, perr := call2(d.GetUUID); perr == nil && r == nvml.SUCCESS {
			w.uuid[u] = i
		}
		want := uint64(WatchedEvents)
		if sup, r, perr := call2(d.GetSupportedEventTypes); perr == nil && r == nvml.SUCCESS {
			want &= sup
		}
		if want == 0 {
			w.notes = append(w.notes, fmt.Sprintf("GPU %d: supports none of the Xid/ECC events", i))
			continue
		}
		r, perr := call(func() nvml.Return { return d.RegisterEvents(want, set) })
		if perr != nil || r != nvml.SUCCESS {
			w.notes = append(w.notes, fmt.Sprintf("GPU %d: events not registered: %s", i, why(r, perr)))
			continue
		}
		if want != WatchedEvents {
			w.notes = append(w.notes, fmt.Sprintf("GPU %d: watches %s only", i, eventKinds(want)))
		}
		registered++
	}
	if registered == 0 {
		_, _ = call(set.Free)
		stop()
		n.refs.Done()
		return nil, fmt.Errorf("gpu: no GPU could be registered for events: %v", w.notes)
	}
	go w.run(ctx)
	return w, nil
}

func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	defer w.n.refs.Done()
	defer func() { _, _ = call(w.set.Free) }()
	ms := uint32(min(w.opts.Poll.Milliseconds(), 60_000))
	lost := false
	for ctx.Err() == nil {
		data, ret, perr := call2(func() (nvml.EventData, nvml.Return) { return w.set.Wait(ms) })
		switch {
		case perr != nil:
			w.stop("NVML event wait " + perr.Error())
			return
		case ret == nvml.ERROR_TIMEOUT:
			continue
		case ret == nvml.ERROR_GPU_IS_LOST:
			// A registered GPU fell off. Said once; the wait may answer
			// this at once from now on, so it is retried at the poll
			// period, not in a tight loop.
			if !lost {
				lost = true
				w.add(XidEvent{Kind: "gpu_lost", Meaning: "NVML's event wait says a GPU is lost (fallen off the bus? see Xid 79 in the kernel log)", GPU: -1, Source: "nvml", Time: time.Now()})
			}
			select {
			case <-ctx.Done():
			case <-time.After(w.opts.Poll):
			}
			continue
		case ret != nvml.SUCCESS:
			w.stop("NVML event wait: " + Reason(ret))
			return
		}
		w.add(w.event(data))
	}
}

func (w *Watcher) event(d nvml.EventData) XidEvent {
	ev := XidEvent{GPU: -1, Source: "nvml", Time: time.Now()}
	switch {
	case d.EventType&nvml.EventTypeXidCriticalError != 0:
		ev.Kind, ev.Xid, ev.Meaning = "xid", d.EventData, XidMeaning(d.EventData)
	case d.EventType&nvml.EventTypeDoubleBitEccError != 0:
		ev.Kind, ev.Meaning = "double_bit_ecc", "double-bit ECC error: uncorrectable GPU memory error"
	case d.EventType&nvml.EventTypeSingleBitEccError != 0:
		ev.Kind, ev.Meaning = "single_bit_ecc", "single-bit ECC error (corrected)"
	default:
		ev.Kind, ev.Meaning = "other", fmt.Sprintf("NVML event type %#x", d.EventType)
	}
	if d.Device != nil {
		if u, r, perr := call2(d.Device.GetUUID); perr == nil && r == nvml.SUCCESS {
			ev.UUID = u
			if i, ok := w.uuid[u]; ok {
				ev.GPU = i
			}
		}
	}
	return ev
}

func (w *Watcher) add(ev XidEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.events) >= w.opts.Buffer {
		copy(w.events, w.events[1:])
		w.events = w.events[:len(w.events)-1]
		w.dropped++
	}
	w.events = append(w.events, ev)
}

func (w *Watcher) stop(why string) {
	w.mu.Lock()
	w.err = why
	w.mu.Unlock()
}

// Events returns a copy of the events kept, oldest first, and how many
// older ones the buffer dropped.
func (w *Watcher) Events() ([]XidEvent, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]XidEvent(nil), w.events...), w.dropped
}

// Notes says which GPUs are not (fully) watched, and why.
func (w *Watcher) Notes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.notes...)
}

// Err says why the watcher stopped on its own ("" while it runs or after
// its context ended).
func (w *Watcher) Err() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Done is closed once the watcher stopped and freed its event set.
func (w *Watcher) Done() <-chan struct{} { return w.done }

func eventKinds(mask uint64) string {
	var s []string
	if mask&nvml.EventTypeXidCriticalError != 0 {
		s = append(s, "xid")
	}
	if mask&nvml.EventTypeDoubleBitEccError != 0 {
		s = append(s, "double_bit_ecc")
	}
	if mask&nvml.EventTypeSingleBitEccError != 0 {
		s = append(s, "single_bit_ecc")
	}
	return fmt.Sprint(s)
}
