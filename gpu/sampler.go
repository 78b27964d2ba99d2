package gpu

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// SamplerOptions shape a Sampler. Zero values take the defaults.
type SamplerOptions struct {
	// Interval is the sampling period (PROBING_GPU_SAMPLE_MS; default 1 s).
	Interval time.Duration
	// Library is the NVML library to load (DefaultLibrary when empty);
	// Open, when set, replaces loading it (tests pass a mock server).
	Library string
	Open    func() *NVML
	// KmsgPath is the kernel log ("/dev/kmsg" when empty), KmsgEvery how
	// often it is read again (default 30 s): NVML's events cover the time
	// since the watcher registered, the log covers the time before and
	// GPUs whose events NVML does not support.
	KmsgPath  string
	KmsgEvery time.Duration
	// ProcRoot is where process environments are read (procfacts.Proc);
	// DataDir holds the agents' identity files, asked first.
	ProcRoot string
	DataDir  string
	Host     string
	// Sink receives every tick (the rings); nil keeps only the newest in
	// memory.
	Sink   Sink
	Logger *slog.Logger
}

// Tick is one sampling round.
type Tick struct {
	Report Report
	// New are the Xid events first seen in this round.
	New []XidEvent
	// Took is how long the round's NVML calls took.
	Took time.Duration
}

// Sink stores ticks. A failing sink is said in the report's notes; the
// sampler keeps sampling.
type Sink interface {
	Write(Tick) error
}

// Sampler samples every GPU of the node at a fixed period, watches for
// Xid events and keeps the newest Report.
type Sampler struct {
	opts  SamplerOptions
	n     *NVML
	watch *Watcher
	done  chan struct{}

	mu      sync.Mutex
	latest  Report
	kmsg    []XidEvent // from the kernel log, deduplicated
	kmsgKey map[string]bool
	unsent  int // the newest kmsg events not passed to the sink yet
	dropped int
	seenNV  int // watcher events already reported as New
	sinkErr string
	kmsgMsg string
}

// DefaultInterval is the sampling period without PROBING_GPU_SAMPLE_MS
// (Probing's GPU sampler uses the same).
const DefaultInterval = time.Second

// StartSampler opens NVML and samples until ctx ends. It never fails:
// without NVML the report says why and no sampling happens.
func StartSampler(ctx context.Context, opts SamplerOptions) *Sampler {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.KmsgEvery <= 0 {
		opts.KmsgEvery = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sampler{opts: opts, done: make(chan struct{}), kmsgKey: map[string]bool{}}
	if opts.Open != nil {
		s.n = opts.Open()
	} else {
		s.n = Open(opts.Library)
	}
	st := s.n.Status()
	s.latest = Report{Host: opts.Host, Status: st, Source: SourceLive, IntervalMS: int(opts.Interval.Milliseconds()), SamplerPID: os.Getpid()}
	if st.State != StateOK {
		s.latest.Source = SourceNone
		opts.Logger.Info("no GPU sampling on this node", "state", st.State, "reason", st.Reason)
		if opts.Sink != nil {
			if err := opts.Sink.Write(Tick{Report: s.latest}); err != nil {
				opts.Logger.Warn("GPU rings", "err", err)
			}
		}
		close(s.done)
		return s
	}
	s.readKmsg()
	if w, err := s.n.Watch(ctx, WatchOptions{}); err != nil {
		s.mu.Lock()
		s.latest.Notes = append(s.latest.Notes, "Xid events are not watched: "+err.Error())
		s.mu.Unlock()
	} else {
		s.watch = w
	}
	opts.Logger.Info("GPU sampling", "devices", st.Devices, "driver", st.Driver, "interval", opts.Interval)
	go s.run(ctx)
	return s
}

// Report is the newest round.
func (s *Sampler) Report() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.latest
	r.Devices = append([]DeviceState(nil), r.Devices...)
	r.Xids = append([]XidEvent(nil), r.Xids...)
	r.Notes = append([]string(nil), r.Notes...)
	return r
}

// Done is closed once sampling stopped and NVML was shut down.
func (s *Sampler) Done() <-chan struct{} { return s.done }

func (s *Sampler) run(ctx context.Context) {
	defer close(s.done)
	defer func() {
		if err := s.n.Close(); err != nil {
			s.opts.Logger.Warn("NVML", "err", err)
		}
	}()
	lastKmsg := time.Now()
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		s.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Since(lastKmsg) >= s.opts.KmsgEvery {
			s.readKmsg()
			lastKmsg = time.Now()
		}
	}
}

// roundLimit bounds one round's NVML calls: a wedged GPU makes the round
// say so instead of stopping the sampler.
func (s *Sampler) roundLimit() time.Duration {
	return max(s.opts.Interval, 2*time.Second)
}

func (s *Sampler) round(ctx context.Context) {
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, s.roundLimit())
	snaps, err := s.n.Sample(rctx)
	cancel()
	took := time.Since(start)
	metrics.GPURound(err != nil)
	if err != nil {
		if ctx.Err() == nil {
			s.opts.Logger.Warn("GPU sample", "err", err)
		}
		return
	}
	if ctx.Err() != nil {
		// Stopped mid-round: its GPUs say "not sampled: context canceled",
		// which is the sampler's end, not the GPUs' state; the last whole
		// round stays the report.
		return
	}
	AttachRanksFrom(snaps, s.opts.ProcRoot, s.opts.DataDir)
	s.mu.Lock()
	var nv []XidEvent
	var nvDropped int
	var notes []string
	if s.watch != nil {
		nv, nvDropped = s.watch.Events()
		notes = append(notes, s.watch.Notes()...)
		if e := s.watch.Err(); e != "" {
			notes = append(notes, "the Xid watcher stopped: "+e+"; the kernel log is still read every "+s.opts.KmsgEvery.String())
		}
	}
	// Watcher events are oldest first and only ever dropped from the
	// front; seenNV counts those already passed on.
	firstNew := max(s.seenNV-nvDropped, 0)
	if firstNew > len(nv) {
		firstNew = len(nv)
	}
	newNV := nv[firstNew:]
	s.seenNV = nvDropped + len(nv)
	all := append(append([]XidEvent(nil), s.kmsg...), nv...)
	if len(all) > MaxXidEvents {
		all = all[len(all)-MaxXidEvents:]
	}
	newK := s.takeNewKmsg()
	if s.kmsgMsg != "" {
		notes = append(notes, s.kmsgMsg)
	}
	if s.sinkErr != "" {
		notes = append(notes, "the GPU rings are not written: "+s.sinkErr)
	}
	rep := NewReport(s.opts.Host, s.n.Status(), snaps, all, s.dropped+nvDropped)
	rep.Source, rep.IntervalMS, rep.SamplerPID, rep.Notes = SourceLive, int(s.opts.Interval.Milliseconds()), os.Getpid(), notes
	s.latest = rep
	s.mu.Unlock()
	if s.opts.Sink == nil {
		return
	}
	fresh := append(newK, newNV...)
	AssignGPUs(fresh, snaps)
	err = s.opts.Sink.Write(Tick{Report: rep, New: fresh, Took: took})
	s.mu.Lock()
	prev := s.sinkErr
	s.sinkErr = ""
	if err != nil {
		s.sinkErr = err.Error()
	}
	s.mu.Unlock()
	if err != nil && prev == "" {
		s.opts.Logger.Warn("GPU rings not written", "err", err)
	}
}

// readKmsg reads the kernel log and keeps the Xid lines not seen before.
func (s *Sampler) readKmsg() {
	res := readKmsgTimed(s.opts.KmsgPath)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kmsgMsg = res.Note
	for _, e := range res.Events {
		k := kmsgID(e)
		if s.kmsgKey[k] {
			continue
		}
		s.kmsgKey[k] = true
		s.kmsg = append(s.kmsg, e)
		s.unsent++
	}
	if over := len(s.kmsg) - MaxXidEvents; over > 0 {
		s.kmsg = s.kmsg[over:]
		s.dropped += over
		s.unsent = min(s.unsent, len(s.kmsg))
	}
	if len(s.kmsgKey) > 4*MaxXidEvents {
		// Keys of events no longer kept: a log that scrolled past them
		// will not show them again.
		s.kmsgKey = map[string]bool{}
		for _, e := range s.kmsg {
			s.kmsgKey[kmsgID(e)] = true
		}
	}
}

// kmsgID tells kernel-log records apart across reads of the log.
func kmsgID(e XidEvent) string {
	return fmt.Sprintf("%d/%s/%d/%s", e.Boot, e.Kind, e.Xid, e.PCIBusID)
}

// takeNewKmsg returns the kernel-log events not passed on yet (s.mu held).
func (s *Sampler) takeNewKmsg() []XidEvent {
	if s.unsent == 0 {
		return nil
	}
	out := append([]XidEvent(nil), s.kmsg[len(s.kmsg)-s.unsent:]...)
	s.unsent = 0
	return out
}

// readKmsgTimed is ReadKmsg with each record's wall-clock time.
func readKmsgTimed(path string) KmsgResult {
	res := ReadKmsg(path)
	boot := bootTime()
	for i := range res.Events {
		if e := &res.Events[i]; e.Time.IsZero() && !boot.IsZero() && e.Boot > 0 {
			e.Time = boot.Add(e.Boot)
		}
	}
	return res
}

// bootTime is the wall-clock time of the kernel log's zero, or zero when
// it cannot be read. The log stamps records with the monotonic clock
// (which stops while suspended), so that clock, not CLOCK_BOOTTIME.
func bootTime() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Time{}
	}
	return time.Now().Add(-time.Duration(ts.Nano()))
}

// SampleOnce opens NVML, samples every GPU once (within limit), reads
// the kernel log's Xids, attaches ranks and closes NVML: the CLI's view
// of a node where no sampler runs. It never fails; the report says what
// could not be read.
func SampleOnce(ctx context.Context, library, host string, limit time.Duration) Report {
	n := Open(library)
	defer n.Close()
	st := n.Status()
	if st.State != StateOK {
		return Report{Host: host, Status: st, Source: SourceNone}
	}
	sctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	snaps, err := n.Sample(sctx)
	if err != nil {
		return Report{Host: host, Status: st, Source: SourceNone, Notes: []string{err.Error()}}
	}
	AttachRanks(snaps, "")
	k := readKmsgTimed("")
	r := NewReport(host, st, snaps, k.Events, k.Dropped)
	r.Source = SourceLive
	if k.Note != "" {
		r.Notes = append(r.Notes, k.Note)
	}
	return r
}

// Once is a GPU source for a one-shot command (the CLI's diagnose): NVML
// sampled on the first Report (SampleOnce), that report kept. It writes
// no rings and holds no lock.
type Once struct {
	Library, Host string
	Limit         time.Duration
	once          sync.Once
	r             Report
}

// Report samples on the first call.
func (o *Once) Report() Report {
	o.once.Do(func() {
		o.r = SampleOnce(context.Background(), o.Library, o.Host, max(o.Limit, time.Second))
	})
	return o.r
}
