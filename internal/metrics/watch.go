package metrics

import (
	"sort"
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
	watchGroupIdle = lazy(func() *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "probing_mcp_watch_group_idle_seconds",
			Help: "Seconds since each group of ranks last made progress (ranks idle for the same whole second grouped, as ranges; at most 16 groups, the idlest first)."},
			[]string{"ranks"})
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

// maxIdleGroups bounds the rank groups exported per pulse.
const maxIdleGroups = 16

// WatchGroups exports the ranks' idle times grouped: groups maps a rank
// range ("0-1,3") to its idle seconds. The previous pulse's groups go, so
// the series follow the job, not its history.
func WatchGroups(groups map[string]float64) {
	g := watchGroupIdle.get()
	g.Reset()
	type kv struct {
		k string
		v float64
	}
	var l []kv
	for k, v := range groups {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || (l[i].v == l[j].v && l[i].k < l[j].k) })
	for i, e := range l {
		if i == maxIdleGroups {
			break
		}
		g.WithLabelValues(clean(e.k)).Set(e.v)
	}
}

// WatchBlind records a pulse that showed no rank.
func WatchBlind() { watchPulses.get().WithLabelValues("blind").Inc() }

// WatchEvent counts an event the watcher raised.
func WatchEvent(kind, level string) {
	watchEvents.get().WithLabelValues(clean(kind), enum(level, "info", "warn", "error")).Inc()
}
