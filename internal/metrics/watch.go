package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// TraceDrops exposes the spans the exporter dropped (a collector down or
// slow: the queue full, a failed export), read from dropped at each
// scrape. Registered when tracing starts, so an untraced process shows
// no such family.
func TraceDrops(dropped func() int64) {
	traceDropsOnce.Do(func() {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "probing_mcp_trace_spans_dropped_total",
			Help: "Spans dropped instead of exported (queue full, export failed, unsent at exit): export never blocks a call.",
		}, func() float64 { return float64(dropped()) }))
	})
}

var traceDropsOnce sync.Once

// The watcher's view of the job, for an existing Prometheus and
// Alertmanager to page on without webhooks.
var (
	watchState = lazy(func() *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "probing_mcp_watch_job_state",
			Help: "1 for the state the watcher last read the job in (healthy, progressing, slow, stalled, dead, unknown), 0 for the others."},
			[]string{"state"})
	})
	watchIdle = lazy(func() prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "probing_mcp_watch_idle_seconds",
			Help: "Seconds since the least idle live rank last made progress, as the watcher's last pulse read it."})
	})
	watchThreshold = lazy(func() prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "probing_mcp_watch_stall_threshold_seconds",
			Help: "The stall threshold the watcher uses, learned from the job's own steps."})
	})
	watchEvents = counter("watch_events_total", "Events the watcher raised, by kind and level.", "kind", "level")
	watchPulses = counter("watch_pulses_total", "Pulses the watcher read, by result (ok, blind).", "result")
)

var watchStates = []string{"healthy", "progressing", "slow", "stalled", "dead", "paused", "unknown"}

// WatchPulse records one pulse: the job's state, how idle it is and the
// threshold in use.
func WatchPulse(state string, idleSeconds, thresholdSeconds float64) {
	g := watchState.get()
	state = enum(state, watchStates...)
	for _, s := range watchStates {
		v := 0.0
		if s == state {
			v = 1
		}
		g.WithLabelValues(s).Set(v)
	}
	watchIdle.get().Set(idleSeconds)
	watchThreshold.get().Set(thresholdSeconds)
	watchPulses.get().WithLabelValues("ok").Inc()
}

// WatchBlind records a pulse that showed no rank.
func WatchBlind() { watchPulses.get().WithLabelValues("blind").Inc() }

// WatchEvent counts an event the watcher raised.
func WatchEvent(kind, level string) {
	watchEvents.get().WithLabelValues(clean(kind), enum(level, "info", "warn", "error")).Inc()
}
