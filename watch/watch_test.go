package watch

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/metrics/metricstest"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// scripted is a scope whose pulse and evidence the test sets: a job of
// four ranks that steps every 100 ms until lastStep, on the test's clock.
type scripted struct {
	now      time.Time
	lastStep time.Time // the ranks' last step
	dead     map[int]bool
	none     bool // no rank found
	slowRank int  // this rank steps at 4× the others' time (-1, 0: none)
	noClock  bool // the ranks record no steps or collectives
	gpuLost  bool // GPU 3 fell off the bus
	pulses   int
	gathers  int
}

func (s *scripted) bundle() *evidence.Bundle {
	b := &evidence.Bundle{World: 4, Ranks: map[int]*evidence.RankEvidence{}}
	if s.none {
		return b
	}
	if s.gpuLost {
		b.GPU = []gpu.Report{{Host: "n1", Devices: []gpu.DeviceState{{Snapshot: gpu.Snapshot{Index: 3}, Signature: gpu.SigLost, Why: "Xid 79: fallen off the bus"}}}}
	}
	for r := 0; r < 4; r++ {
		var steps []int64
		gap := 100 * time.Millisecond
		if r == s.slowRank && r > 0 {
			gap *= 4
		}
		for i := 9; i >= 0; i-- {
			steps = append(steps, s.lastStep.Add(-time.Duration(i)*gap).UnixMicro())
		}
		b.Ranks[r] = &evidence.RankEvidence{Rank: r, PID: 100 + r, Alive: !s.dead[r], NowNS: s.now.UnixNano(),
			Activity: &evidence.RankActivity{Rank: r, Steps: steps}}
		if s.noClock {
			b.Ranks[r].Activity = nil
		}
	}
	return b
}

func (s *scripted) Pulse(context.Context) (*evidence.Bundle, *evidence.Coverage, error) {
	s.pulses++
	return s.bundle(), nil, nil
}

func (s *scripted) Evidence(context.Context, int) (*evidence.Bundle, *evidence.Coverage, error) {
	s.gathers++
	b := s.bundle()
	for r := range b.Ranks {
		b.Ranks[r].Threads = []stacks.Thread{{IsMain: true, Name: "MainThread", Frames: []stacks.Frame{{Function: "step", File: "train.py", Line: 3}}}}
		b.Ranks[r].Main = &b.Ranks[r].Threads[0]
	}
	b.FRDumps = []evidence.FRDump{{Rank: 1, PID: 101, Host: "n", Data: []byte("not a real dump"), Format: "pickle"}}
	return b, nil, nil
}

func (s *scripted) Stacks(context.Context, evidence.Selection) (*evidence.StacksAnswer, error) {
	return &evidence.StacksAnswer{}, nil
}

func (s *scripted) FlightRecorder(context.Context, evidence.Selection, bool) (*evidence.FRAnswer, error) {
	return &evidence.FRAnswer{}, nil
}

func (s *scripted) Samples(context.Context, int, time.Duration) map[int][]*stacks.Thread { return nil }
func (s *scripted) GPU(context.Context) ([]gpu.Report, *evidence.Coverage, error) {
	return nil, nil, nil
}
func (s *scripted) Query(context.Context, string, int) (*sqlengine.Result, error) {
	return &sqlengine.Result{}, nil
}
func (s *scripted) Peers(context.Context) (int, error) { return 0, nil }

func newScripted(t *testing.T, min time.Duration) (*scripted, *Watcher, *[]Event) {
	t.Helper()
	t0 := time.Unix(1_800_000_000, 0)
	s := &scripted{now: t0, lastStep: t0}
	var evs []Event
	w, err := New(Options{Scope: s, State: diagnosis.StateOptions{MinStall: min}, Interval: time.Second, BlindAfter: 10 * time.Second,
		Now: func() time.Time { return s.now }, Notify: func(e Event) { evs = append(evs, e) }})
	if err != nil {
		t.Fatal(err)
	}
	return s, w, &evs
}

// advance moves the clock by d in ticks of one second, the job stepping
// while moving is true, one pulse per tick.
func (s *scripted) advance(w *Watcher, d time.Duration, moving bool) {
	for end := s.now.Add(d); s.now.Before(end); {
		s.now = s.now.Add(time.Second)
		if moving {
			s.lastStep = s.now
		}
		w.Tick(context.Background())
	}
}

func kinds(evs []Event) string {
	var k []string
	for _, e := range evs {
		k = append(k, string(e.Kind))
	}
	return strings.Join(k, ",")
}

func TestWatchMovingSaysNothingAndReadsOnlyPulses(t *testing.T) {
	s, w, evs := newScripted(t, 30*time.Second)
	s.advance(w, 2*time.Minute, true)
	if len(*evs) != 0 || s.gathers != 0 || s.pulses != 120 {
		t.Fatalf("a moving job: events %q, %d gathers (want 0: no rank is asked while it moves), %d pulses", kinds(*evs), s.gathers, s.pulses)
	}
}

func TestWatchYoungStallCapturedAtOnceConfirmedAfterMinStall(t *testing.T) {
	s, w, evs := newScripted(t, 30*time.Second)
	s.advance(w, 10*time.Second, true)
	// The job stops: past the threshold (5 s: a 100 ms step's 10× is
	// under the floor) the evidence is captured at once.
	s.advance(w, 6*time.Second, false)
	if kinds(*evs) != "captured" || s.gathers != 1 {
		t.Fatalf("events %q after 6 s idle, %d gathers; want one capture", kinds(*evs), s.gathers)
	}
	cap := (*evs)[0]
	if cap.StalledFor < 5*time.Second || cap.Headline().Threshold != "5s" || cap.Headline().Step != "100ms" {
		t.Errorf("capture: stalled for %s, headline %+v", cap.StalledFor, cap.Headline())
	}
	// Young and no culprit at high confidence: not confirmed before
	// MinStall; rechecked meanwhile, not on every tick.
	s.advance(w, 20*time.Second, false)
	if kinds(*evs) != "captured" || s.gathers > 1+20/5 {
		t.Fatalf("events %q, %d gathers before MinStall", kinds(*evs), s.gathers)
	}
	s.advance(w, 15*time.Second, false)
	if kinds(*evs) != "captured,stalled" {
		t.Fatalf("events %q past MinStall; want the stall confirmed", kinds(*evs))
	}
	st := (*evs)[1]
	if st.Level != LevelError || st.Incident != cap.Incident || st.StalledFor < 30*time.Second {
		t.Errorf("confirmed: %+v (stalled for %s)", st, st.StalledFor)
	}
	// Confirmed once: no repeat while it stays stalled.
	s.advance(w, time.Minute, false)
	if kinds(*evs) != "captured,stalled" {
		t.Fatalf("events %q; one alert per incident", kinds(*evs))
	}
	s.advance(w, 3*time.Second, true)
	if kinds(*evs) != "captured,stalled,moving" || (*evs)[2].Incident != cap.Incident {
		t.Fatalf("events %q after the job moved again", kinds(*evs))
	}
}

func TestWatchShortPauseSaysNoMoreThanTheCapture(t *testing.T) {
	s, w, evs := newScripted(t, 30*time.Second)
	s.advance(w, 10*time.Second, true)
	s.advance(w, 12*time.Second, false) // a checkpoint: 12 s, under MinStall
	s.advance(w, 10*time.Second, true)
	if kinds(*evs) != "captured" {
		t.Fatalf("events %q; a pause shorter than MinStall is captured, never alerted", kinds(*evs))
	}
}

func TestWatchDeadRank(t *testing.T) {
	s, w, evs := newScripted(t, 30*time.Second)
	s.advance(w, 10*time.Second, true)
	s.dead = map[int]bool{2: true}
	s.advance(w, 8*time.Second, false)
	if k := kinds(*evs); k != "captured,dead" {
		t.Fatalf("events %q; a dead rank holding the others is confirmed at once", k)
	}
	if h := (*evs)[1].Headline(); h.State != diagnosis.StateDead {
		t.Errorf("headline %+v", h)
	}
}

func TestWatchBlindIsSaidOnceThenSeeing(t *testing.T) {
	s, w, evs := newScripted(t, 30*time.Second)
	s.none = true
	s.advance(w, 30*time.Second, false)
	if k := kinds(*evs); k != "blind" || (*evs)[0].Level != LevelInfo {
		t.Fatalf("events %q; a watcher started before its job says so once, at info (nothing was lost)", k)
	}
	s.none = false
	s.lastStep = s.now
	s.advance(w, 3*time.Second, true)
	if k := kinds(*evs); k != "blind,seeing" {
		t.Fatalf("events %q", k)
	}
	s.none = true // the job vanishes from the watcher's sight: the dead-man alert
	s.advance(w, 30*time.Second, false)
	if k := kinds(*evs); k != "blind,seeing,blind" || (*evs)[2].Level != LevelError {
		t.Fatalf("events %q; losing sight of a job it saw is an error", k)
	}
}

func TestWatchStragglerOnlyWhenItLasts(t *testing.T) {
	s, w, evs := newScripted(t, 30*time.Second)
	slow := func(on bool) {
		s.slowRank = -1
		if on {
			s.slowRank = 3
		}
	}
	slow(true)
	s.advance(w, 30*time.Second, true) // a warm-up's slow rank: not yet
	slow(false)
	s.advance(w, 5*time.Second, true)
	slow(true)
	s.advance(w, 59*time.Second, true)
	if len(*evs) != 0 {
		t.Fatalf("events %q; a straggler is said only past SlowFor without a break", kinds(*evs))
	}
	s.advance(w, 2*time.Second, true)
	if k := kinds(*evs); k != "slow" || (*evs)[0].Headline().Culprits != "3" || (*evs)[0].Headline().Category != diagnosis.CatStraggler {
		t.Fatalf("events %q %+v", k, (*evs)[0].Headline())
	}
	s.advance(w, time.Minute, true)
	if len(*evs) != 1 {
		t.Fatalf("events %q; said once per streak", kinds(*evs))
	}
}

// TestWatchMetrics: the job's state, idle time and threshold, and the
// events, are on the metrics endpoint for a Prometheus to page on.
func TestWatchMetrics(t *testing.T) {
	before := metricstest.Value(t, "probing_mcp_watch_events_total", map[string]string{"kind": "captured", "level": "info"})
	s, w, _ := newScripted(t, 30*time.Second)
	s.advance(w, 10*time.Second, true)
	if v := metricstest.Value(t, "probing_mcp_watch_job_state", map[string]string{"state": "healthy"}); v != 1 {
		t.Errorf("healthy gauge %v", v)
	}
	s.advance(w, 7*time.Second, false)
	if v := metricstest.Value(t, "probing_mcp_watch_job_state", map[string]string{"state": "stalled"}); v != 1 {
		t.Errorf("stalled gauge %v", v)
	}
	if v := metricstest.Value(t, "probing_mcp_watch_job_state", map[string]string{"state": "healthy"}); v != 0 {
		t.Errorf("healthy gauge %v while stalled", v)
	}
	if v := metricstest.Value(t, "probing_mcp_watch_idle_seconds", nil); v < 6 {
		t.Errorf("idle %v s after 7 s without progress", v)
	}
	if v := metricstest.Value(t, "probing_mcp_watch_group_idle_seconds", map[string]string{"ranks": "0-3"}); v < 6 {
		t.Errorf("ranks 0-3 idle %v s", v)
	}
	if v := metricstest.Value(t, "probing_mcp_watch_stall_threshold_seconds", nil); v != 5 {
		t.Errorf("threshold %v", v)
	}
	if v := metricstest.Value(t, "probing_mcp_watch_events_total", map[string]string{"kind": "captured", "level": "info"}); v != before+1 {
		t.Errorf("captured events %v, want %v", v, before+1)
	}
}

// TestWatchKeepsTheCapture: the capture's stacks, Flight Recorder dumps,
// verdict and events are in the history.
func TestWatchKeepsTheCapture(t *testing.T) {
	h, err := history.Open(filepath.Join(t.TempDir(), "h.db"), history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s, w, _ := newScripted(t, 30*time.Second)
	w.opt.History = h
	s.advance(w, 10*time.Second, true)
	s.advance(w, 7*time.Second, false)
	caps, _ := h.StackCaptures(history.ListOptions{})
	snaps, _ := h.Snapshots(history.ListOptions{})
	diags, _ := h.Diagnoses(history.ListOptions{})
	alerts, _ := h.Alerts(history.ListOptions{}, time.Time{})
	if len(caps) != 4 || len(snaps) != 1 || snaps[0].Source != "watch" || len(diags) != 1 || diags[0].Kind != "watch" ||
		len(alerts) != 1 || alerts[0].Kind != "captured" || alerts[0].DiagnosisID != diags[0].ID {
		t.Fatalf("kept: %d stack captures, %d snapshots %+v, %d verdicts, alerts %+v", len(caps), len(snaps), snaps, len(diags), alerts)
	}
}

func TestWatchGPUFaultWhileMoving(t *testing.T) {
	s, w, evs := newScripted(t, 30*time.Second)
	s.advance(w, 10*time.Second, true)
	s.gpuLost = true
	s.advance(w, 10*time.Second, true)
	if k := kinds(*evs); k != "gpu_fault" || s.gathers != 1 || !strings.Contains((*evs)[0].Text, "GPU 3 lost: Xid 79") || (*evs)[0].Level != LevelError {
		t.Fatalf("events %q (%d gathers): %+v", k, s.gathers, *evs)
	}
}

func TestWatchActsOncePerConfirmedIncident(t *testing.T) {
	s, w, evs := newScripted(t, 30*time.Second)
	var acted []Kind
	w.opt.Act = func(_ context.Context, e Event) string { acted = append(acted, e.Kind); return "asked torch to dump" }
	s.advance(w, 10*time.Second, true)
	s.advance(w, 25*time.Second, false)
	if len(acted) != 0 {
		t.Fatalf("acted before the stall was confirmed: %v", acted)
	}
	s.advance(w, 20*time.Second, false)
	if len(acted) != 1 || acted[0] != KindStalled || !strings.Contains((*evs)[len(*evs)-1].Text, "Acted (--act): asked torch to dump") {
		t.Fatalf("acted %v; events %q", acted, kinds(*evs))
	}
	s.advance(w, time.Minute, false)
	if len(acted) != 1 {
		t.Fatalf("acted %d times for one incident", len(acted))
	}
}

func TestWatchSaysItCannotTimeAClocklessJob(t *testing.T) {
	s, w, evs := newScripted(t, 30*time.Second)
	s.noClock = true
	s.advance(w, 5*time.Second, false) // BlindAfter is 10 s here
	if len(*evs) != 0 {
		t.Fatalf("events %q before BlindAfter", kinds(*evs))
	}
	s.advance(w, 2*time.Minute, false)
	if k := kinds(*evs); k != "blind" || (*evs)[0].Level != LevelWarn || !strings.Contains((*evs)[0].Title, "cannot time") || s.gathers != 0 {
		t.Fatalf("events %q %+v (%d gathers)", k, *evs, s.gathers)
	}
}
