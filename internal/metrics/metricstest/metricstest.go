// Package metricstest reads the registry of internal/metrics back in tests:
// the value of one series, so a test can check that its code path counted.
package metricstest

import (
	"testing"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// Value is the series of family with exactly labels: a counter's or a
// gauge's value, a histogram's sample count; 0 when the family or the
// series does not exist yet (families register on first use).
func Value(t testing.TB, family string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := metrics.Gatherer().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			match := true
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					match = false
				}
			}
			if !match {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}
