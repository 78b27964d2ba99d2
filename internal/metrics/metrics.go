// Package metrics is the process's Prometheus registry and the one-line
// helpers that instrumentation sites call (metrics.ObserveOperation,
// metrics.FanoutCall, ...). Exposition is client_golang's promhttp
// (Handler); nothing here writes the text format by hand.
//
// Names carry one prefix, probing_mcp_, base units (seconds, bytes) and
// _total on counters. The process_* and go_* families of client_golang's
// standard collectors keep their standard names, which dashboards and
// alerts already expect.
//
// Families register on first use: an idle process exposes the standard
// collectors and nothing else, and a family appears once its first event
// happened (a scrape never shows a zero series of a subsystem that never
// ran). Every label value is bounded: enums fall back to "other", free
// text (node addresses) is cut to valid UTF-8 of at most maxLabelBytes and
// capped in number (NodeLabelCap), past which it reads "other".
package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Prefix starts every family this package defines.
const Prefix = "probing_mcp_"

// OperationBuckets are OpenTelemetry's semantic conventions' advice for
// mcp.server.operation.duration, in seconds.
var OperationBuckets = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}

// fastBuckets suit what takes micro- to milliseconds (history writes,
// agent socket calls): the operation buckets would put them all in the
// first one.
var fastBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// reg is the one registry: not prometheus.DefaultRegisterer, so that no
// library can add families behind our back.
var reg = newRegistry()

func newRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
	)
	return r
}

// Gatherer is the registry, for tests and other exposition paths.
func Gatherer() prometheus.Gatherer { return reg }

// scrapeInFlight bounds concurrent scrapes: each one gathers every family
// anew, so a client scraping in a tight loop from many connections gets
// 503s instead of growing the process.
const scrapeInFlight = 4

// Handler serves the registry in Prometheus' exposition formats
// (promhttp: text, protobuf or OpenMetrics as the scraper asks, gzip when
// it accepts it). It does no authentication: its callers put it behind the
// listener's own rules.
func Handler() http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: scrapeInFlight,
		Timeout:             10 * time.Second,
		EnableOpenMetrics:   true,
	})
}

// family is a collector registered on first use.
type family[T prometheus.Collector] struct {
	once sync.Once
	mk   func() T
	c    T
}

func lazy[T prometheus.Collector](mk func() T) *family[T] { return &family[T]{mk: mk} }

func (f *family[T]) get() T {
	f.once.Do(func() {
		f.c = f.mk()
		reg.MustRegister(f.c)
	})
	return f.c
}

func counter(name, help string, labels ...string) *family[*prometheus.CounterVec] {
	return lazy(func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: Prefix + name, Help: help}, labels)
	})
}

func histogram(name, help string, buckets []float64, labels ...string) *family[*prometheus.HistogramVec] {
	return lazy(func() *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: Prefix + name, Help: help, Buckets: buckets}, labels)
	})
}

func plainCounter(name, help string) *family[prometheus.Counter] {
	return lazy(func() prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: Prefix + name, Help: help})
	})
}

func plainHistogram(name, help string, buckets []float64) *family[prometheus.Histogram] {
	return lazy(func() prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: Prefix + name, Help: help, Buckets: buckets})
	})
}

func gauge(name, help string) *family[prometheus.Gauge] {
	return lazy(func() prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: Prefix + name, Help: help})
	})
}

// maxLabelBytes bounds one free-text label value.
const maxLabelBytes = 128

// clean makes s a label value client_golang accepts (valid UTF-8; it
// panics on anything else in WithLabelValues) and bounds its length.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > maxLabelBytes {
		s = strings.ToValidUTF8(s[:maxLabelBytes], "")
	}
	return s
}

// enum is s when it is one of allowed, else "other".
func enum(s string, allowed ...string) string {
	for _, a := range allowed {
		if s == a {
			return s
		}
	}
	return "other"
}

// capped admits at most max distinct values of a label; later ones read
// "other". Values once admitted stay (a series, once exported, is kept).
type capped struct {
	mu   sync.Mutex
	seen map[string]struct{}
	max  int
}

func (c *capped) value(s string) string {
	s = clean(s)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[s]; ok {
		return s
	}
	if len(c.seen) >= c.max {
		return "other"
	}
	if c.seen == nil {
		c.seen = map[string]struct{}{}
	}
	c.seen[s] = struct{}{}
	return s
}

// ErrorType is the error_type label of a failed operation: the Go type of
// the innermost error of err's Unwrap chain ("" for nil). The set of types
// in a binary is finite, so the label is bounded.
func ErrorType(err error) string {
	if err == nil {
		return ""
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			break
		}
		err = next
	}
	return clean(fmt.Sprintf("%T", err))
}

// result is "ok" for an empty kind, else the kind.
func result(kind string) string {
	if kind == "" {
		return "ok"
	}
	return kind
}
