// Package watch follows a training job while nobody is asking: every
// tick it reads the job's pulse (liveness and the rings' progress, which
// costs the job nothing: no rank is asked or signalled), judges it by the
// rule every verdict's state follows (the stall threshold learned from the
// job's own steps), and on a transition — moving to stalled, a rank dead,
// a straggler — captures the evidence once, before a watchdog can kill
// the job, keeps it in the history, diagnoses it and hands the event on.
// No MCP imports: the CLI, the node daemon and the server run the same
// watcher.
package watch

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/gpu"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/metrics"
	"github.com/probing-mcp/probing-mcp/internal/rankset"
	"github.com/probing-mcp/probing-mcp/storage/history"
)

// Options configure a watcher; zero values take the defaults.
type Options struct {
	// Scope is this node or the whole job.
	Scope evidence.Scope
	// State is the stall rule (the diagnosis' own: a multiple of the
	// job's typical step above a floor; MinStall holds a young stall).
	State diagnosis.StateOptions
	// Interval between pulses (default 1 s).
	Interval time.Duration
	// PulseTimeout bounds one pulse (default 10 s, or the interval if
	// longer); Capture one capture and diagnosis (default 60 s).
	PulseTimeout, CaptureTimeout time.Duration
	// SlowFor: a straggler is said once the job has been slow for this
	// long without a break (default 60 s): a warm-up step, a rank that
	// checkpoints now and then, is no straggler.
	SlowFor time.Duration
	// BlindAfter: the watcher says it is blind after this long without
	// a pulse that shows any rank (default 60 s): a dead-man signal, so
	// that a watcher that cannot see the job is not taken for a quiet one.
	BlindAfter time.Duration
	// History keeps the captures and verdicts (nil: not kept).
	History *history.Store
	// Job and Host name what is watched, in events.
	Job, Host string
	Logger    *slog.Logger
	// Notify gets every event, in order, from the watcher's goroutine;
	// it must not block for long.
	Notify func(Event)
	// Alerts delivers events to the alert sinks (nil: none); it queues
	// and returns at once what it did, which the history keeps.
	Alerts Sender
	// Act, when set (watch --act, off by default), runs once per
	// confirmed stall or death, after the capture and before the alert;
	// what it says it did joins the event's text. Without it the watcher
	// only observes.
	Act func(ctx context.Context, e Event) string
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.PulseTimeout <= 0 {
		o.PulseTimeout = max(10*time.Second, o.Interval)
	}
	if o.CaptureTimeout <= 0 {
		o.CaptureTimeout = 60 * time.Second
	}
	if o.SlowFor <= 0 {
		o.SlowFor = 60 * time.Second
	}
	if o.BlindAfter <= 0 {
		o.BlindAfter = 60 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Notify == nil {
		o.Notify = func(Event) {}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Watcher is one watch of one scope. Its methods are called from one
// goroutine (Run's).
type Watcher struct {
	opt Options
	// incident is the open incident (a stall or death being reported).
	incident *incident
	// lastSeen is when a pulse last showed a rank (the first tick's time
	// until one does).
	lastSeen       time.Time
	blindSaid      bool
	everSeen       bool      // a pulse has shown the job at least once
	clocklessSince time.Time // when the pulses first showed ranks but no clock
	clocklessSaid  bool
	slowSince      time.Time // when the job was first slow without a break
	slowSaid       bool
	gpuSaid        map[string]bool // GPU faults already reported

	ticks int
}

// incident is an open stall or death: found at its capture, confirmed
// (alerted) once the diagnosis stands.
type incident struct {
	id        int
	found     time.Time // when the watcher noticed it
	capturedN int       // captures taken (the first before anything else)
	confirmed bool
	followUp  bool              // confirmed before: the next confirmation is a follow-up
	alerted   *diagnosis.Report // the report of the confirmation sent
	paused    bool              // the last diagnosis called it a pause
	acted     bool              // Act ran for it
	lastDiag  time.Time
	report    *diagnosis.Report
	historyID int64
	state     diagnosis.JobState
	first     diagnosis.JobState // the pulse that found it
}

// New makes a watcher.
func New(opt Options) (*Watcher, error) {
	if opt.Scope == nil {
		return nil, fmt.Errorf("watch: no scope to watch")
	}
	opt.defaults()
	return &Watcher{opt: opt}, nil
}

// Run watches until ctx ends. Each tick is one pulse; a slow pulse or
// capture delays the next tick, never overlaps it.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.opt.Interval)
	defer t.Stop()
	for {
		w.Tick(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Tick reads one pulse and acts on what changed.
func (w *Watcher) Tick(ctx context.Context) {
	w.ticks++
	if w.lastSeen.IsZero() {
		w.lastSeen = w.opt.Now()
	}
	pctx, cancel := context.WithTimeout(ctx, w.opt.PulseTimeout)
	b, cov, err := w.opt.Scope.Pulse(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	now := w.opt.Now()
	if err != nil || b == nil || len(b.Ranks) == 0 {
		why := "no rank of the job was found (no agent identity, no ring)"
		if err != nil {
			why = "the pulse failed: " + err.Error()
		} else if cov != nil && !cov.Complete() {
			why += "; " + cov.Text()
		}
		metrics.WatchBlind()
		w.blind(now, why)
		return
	}
	w.lastSeen, w.everSeen = now, true
	if w.blindSaid {
		w.blindSaid = false
		w.emit(Event{Kind: KindSeeing, Level: LevelInfo, Title: "the watcher sees the job again"})
	}
	js := diagnosis.StateOf(b, w.opt.State)
	metrics.WatchPulse(js.State, detectAge(js).Seconds(), js.Threshold.Seconds())
	metrics.WatchGroups(idleGroups(js))
	w.gpuFaults(ctx, b, js)
	switch js.State {
	case diagnosis.StateStalled, diagnosis.StateDead:
		w.stuck(ctx, now, js)
	case diagnosis.StateUnknown:
		// Ranks but no clock: nothing says the job moves, nothing that it
		// does not. Said once, past BlindAfter: the watcher cannot watch it.
		if w.clocklessSince.IsZero() {
			w.clocklessSince = now
		}
		if !w.clocklessSaid && now.Sub(w.clocklessSince) >= w.opt.BlindAfter {
			w.clocklessSaid = true
			w.emit(Event{Kind: KindBlind, Level: LevelWarn, Title: "the watcher cannot time the job",
				Text: "its ranks are found, but " + js.Why + ": no stall can be noticed; trace the steps (probing_mcp_agent.span) or record the collectives"})
		}
		return
	default:
		w.moving(now, js)
	}
	w.clocklessSince, w.clocklessSaid = time.Time{}, false
}

// moving handles a pulse that shows progress.
func (w *Watcher) moving(now time.Time, js diagnosis.JobState) {
	if in := w.incident; in != nil {
		w.incident = nil
		if in.confirmed || in.paused {
			e := Event{Kind: KindMoving, Level: LevelInfo, Title: "the job moves again",
				Text: fmt.Sprintf("after %s: %s", now.Sub(in.found).Round(time.Second), js.Why), Incident: in.id, State: js,
				FollowUp: in.confirmed}
			if in.alerted != nil {
				e.IncidentKey = incidentKey(w.opt.Job, in.alerted)
			}
			w.emit(e)
		}
	}
	if js.State == diagnosis.StateSlow && len(js.Slow) > 0 {
		if w.slowSince.IsZero() {
			w.slowSince = now
		}
		if !w.slowSaid && now.Sub(w.slowSince) >= w.opt.SlowFor {
			w.slowSaid = true
			w.emit(Event{Kind: KindSlow, Level: LevelWarn, Title: "a straggler slows the job",
				Text: fmt.Sprintf("for %s: %s", now.Sub(w.slowSince).Round(time.Second), js.Why), State: js})
		}
	} else {
		w.slowSince, w.slowSaid = time.Time{}, false
	}
}

// stuck handles a stalled or dead pulse: the first time, capture at once
// (a watchdog may kill the job any moment); then confirm — alert — when
// the diagnosis stands: not a pause, and not a young stall (MinStall)
// unless it names a culprit at high confidence or the job is dead.
func (w *Watcher) stuck(ctx context.Context, now time.Time, js diagnosis.JobState) {
	in := w.incident
	if in == nil {
		in = &incident{id: w.ticks, found: now, state: js, first: js}
		w.incident = in
		w.capture(ctx, in, js)
		w.emit(Event{Kind: KindCaptured, Level: LevelInfo, Title: "stall noticed, evidence captured", Incident: in.id,
			Text: js.Why, State: js, Report: in.report, HistoryID: in.historyID, StalledFor: detectAge(js)})
	} else if js.State == diagnosis.StateDead && in.state.State != diagnosis.StateDead {
		// A stall that ends in death: the deaths are news, a follow-up of
		// the stall when it was alerted.
		in.state, in.followUp, in.confirmed = js, in.confirmed, false
		w.capture(ctx, in, js)
	} else if !in.confirmed && now.Sub(in.lastDiag) >= w.recheck(js) {
		in.state = js
		w.capture(ctx, in, js)
	}
	if in.confirmed || in.report == nil {
		return
	}
	rep := in.report
	switch {
	case rep.State == diagnosis.StatePaused:
		if !in.paused {
			in.paused = true
			w.emit(Event{Kind: KindPaused, Level: LevelInfo, Title: "a pause, not a hang (yet)", Incident: in.id,
				Text: rep.Summary, State: js, Report: rep, HistoryID: in.historyID})
		}
		return
	case rep.State == diagnosis.StateStalled && js.Young && !highConfidence(rep):
		return // a young stall at medium confidence: wait for MinStall
	case rep.State != diagnosis.StateStalled && rep.State != diagnosis.StateDead:
		return // the diagnosis saw the job move: the next pulses decide
	}
	in.confirmed = true
	kind := KindStalled
	if rep.State == diagnosis.StateDead {
		kind = KindDead
	}
	e := Event{Kind: kind, Level: LevelError, Title: title(rep), Incident: in.id, Text: rep.Summary,
		State: js, Report: rep, HistoryID: in.historyID, StalledFor: now.Sub(in.found) + detectAge(in.first), FollowUp: in.followUp}
	if in.alerted == nil {
		in.alerted = rep
	}
	e.IncidentKey = incidentKey(w.opt.Job, in.alerted) // a follow-up keeps its incident's key
	if w.opt.Act != nil && !in.acted {
		in.acted = true
		if did := w.opt.Act(ctx, e); did != "" {
			e.Text += "\nActed (--act): " + did
		}
	}
	w.emit(e)
}

// gpuFaults reports a GPU that the pulse's GPU report shows lost or
// faulty (an Xid, an uncorrectable ECC error, a failed row remap), once
// per GPU and fault, with the evidence captured: a GPU fault is a
// transition even while the job still moves (its ranks will not for long).
func (w *Watcher) gpuFaults(ctx context.Context, b *evidence.Bundle, js diagnosis.JobState) {
	var news []string
	for _, r := range b.GPU {
		for _, d := range r.Devices {
			if d.Signature != gpu.SigLost && d.Signature != gpu.SigError {
				continue
			}
			key := fmt.Sprintf("%s|%d|%s|%s", r.Host, d.Index, d.Signature, d.Why)
			if w.gpuSaid[key] {
				continue
			}
			if w.gpuSaid == nil {
				w.gpuSaid = map[string]bool{}
			}
			w.gpuSaid[key] = true
			news = append(news, fmt.Sprintf("%s GPU %d %s: %s", jobtext.Quote(r.Host, jobtext.Name), d.Index, d.Signature, jobtext.Clip(d.Why, 200)))
		}
	}
	if len(news) == 0 {
		return
	}
	in := &incident{id: w.ticks, found: w.opt.Now(), state: js, first: js}
	w.capture(ctx, in, js)
	w.emit(Event{Kind: KindGPUFault, Level: LevelError, Title: "a GPU fault", Text: strings.Join(news, "; "), Incident: in.id,
		State: js, Report: in.report, HistoryID: in.historyID})
}

// recheck is how often an unconfirmed incident is diagnosed again: the
// stall threshold, at least 5 s, at most MinStall.
func (w *Watcher) recheck(js diagnosis.JobState) time.Duration {
	d := max(js.Threshold, 5*time.Second)
	if m := w.opt.State.MinStall; m > 0 && d > m {
		d = m
	}
	return d
}

// blind says, once per blindness, that the watcher cannot see the job.
func (w *Watcher) blind(now time.Time, why string) {
	if w.blindSaid || now.Sub(w.lastSeen) < w.opt.BlindAfter {
		return
	}
	w.blindSaid = true
	if !w.everSeen {
		// Started before the job (a server or daemon that outlives its
		// jobs): nothing was lost sight of, so nobody is paged.
		w.emit(Event{Kind: KindBlind, Level: LevelInfo, Title: "no job to watch yet",
			Text: fmt.Sprintf("for %s: %s", now.Sub(w.lastSeen).Round(time.Second), why)})
		return
	}
	w.emit(Event{Kind: KindBlind, Level: LevelError, Title: "the watcher cannot see the job",
		Text: fmt.Sprintf("for %s: %s", now.Sub(w.lastSeen).Round(time.Second), why)})
}

// Sender hands events to alert sinks without blocking; Send says what
// it did (queued, or why not, per sink).
type Sender interface {
	Send(Event) string
}

func (w *Watcher) emit(e Event) {
	e.At = w.opt.Now()
	e.Job, e.Host = w.opt.Job, w.opt.Host
	var delivery string
	if w.opt.Alerts != nil {
		delivery = w.opt.Alerts.Send(e)
	}
	metrics.WatchEvent(string(e.Kind), string(e.Level))
	w.opt.Logger.Info("watch", "event", string(e.Kind), "title", e.Title, "incident", e.Incident, "history_id", e.HistoryID, "delivery", delivery)
	w.record(e, delivery)
	w.opt.Notify(e)
}

// detectAge is how long the job had been idle when the pulse showed the
// stall: the least idle live rank's idle time.
func detectAge(js diagnosis.JobState) time.Duration {
	least := time.Duration(-1)
	for _, d := range js.Idle {
		if least < 0 || d < least {
			least = d
		}
	}
	return max(least, 0)
}

// incidentKey names an incident for the alert sinks (dedup, cooldown,
// follow-ups): the job, the culprits and the category of its first alert.
func incidentKey(job string, rep *diagnosis.Report) string {
	h := Event{Report: rep}.Headline()
	return job + "|" + h.Culprits + "|" + h.Category
}

// idleGroups groups the live ranks by how long they have been idle, to
// the whole second, as rank ranges.
func idleGroups(js diagnosis.JobState) map[string]float64 {
	by := map[int64][]int{}
	for r, d := range js.Idle {
		s := int64(d / time.Second)
		by[s] = append(by[s], r)
	}
	out := make(map[string]float64, len(by))
	for s, rs := range by {
		sort.Ints(rs)
		out[rankset.Format(rs)] = float64(s)
	}
	return out
}

func highConfidence(rep *diagnosis.Report) bool {
	return len(rep.Hypotheses) > 0 && rep.Hypotheses[0].Confidence == diagnosis.High
}
