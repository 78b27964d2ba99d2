package gpu

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/probing-mcp/probing-mcp/internal/metrics/metricstest"
)

// TestNVMLErrorsAreCounted: a failed read counts by its code, a field the
// GPU does not support does not count, a panic counts as panic.
func TestNVMLErrorsAreCounted(t *testing.T) {
	v := func(reason string) float64 {
		return metricstest.Value(t, "probing_mcp_gpu_nvml_errors_total", map[string]string{"reason": reason})
	}
	lost, perm, panics, unknown := v("gpu_is_lost"), v("no_permission"), v("panic"), v("unknown")
	observeNVML(nvml.ERROR_GPU_IS_LOST, nil)
	observeNVML(nvml.ERROR_NO_PERMISSION, nil)
	observeNVML(nvml.ERROR_NOT_SUPPORTED, nil)
	observeNVML(nvml.SUCCESS, errors.New("panicked: boom"))
	observeNVML(nvml.Return(9999), nil)
	for name, d := range map[string][2]float64{"gpu_is_lost": {lost, v("gpu_is_lost")}, "no_permission": {perm, v("no_permission")},
		"panic": {panics, v("panic")}, "unknown": {unknown, v("unknown")}} {
		if d[1] != d[0]+1 {
			t.Errorf("nvml errors{reason=%s}: %v -> %v, want one more", name, d[0], d[1])
		}
	}
	if v("not_supported") != 0 || v("other") != 0 {
		t.Error("a field the GPU does not support was counted as an NVML error")
	}
}

// TestSamplerRoundsAreCounted: each round of a sampler over a (mock) NVML
// counts as ok, and a GPU lost mid-run counts its failed reads.
func TestSamplerRoundsAreCounted(t *testing.T) {
	srv := a100(spinningA100)
	var mu sync.Mutex
	lost := false
	srv.Devices[5].(*server.Device).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		mu.Lock()
		defer mu.Unlock()
		if lost {
			return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST
		}
		return nvml.Utilization{Gpu: 100}, nvml.SUCCESS
	}
	rounds := func() float64 {
		return metricstest.Value(t, "probing_mcp_gpu_sampler_rounds_total", map[string]string{"result": "ok"})
	}
	lostReads := func() float64 {
		return metricstest.Value(t, "probing_mcp_gpu_nvml_errors_total", map[string]string{"reason": "gpu_is_lost"})
	}
	before, lostBefore := rounds(), lostReads()
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := StartSampler(ctx, SamplerOptions{Interval: 5 * time.Millisecond, Open: func() *NVML { return OpenLib(srv) }, KmsgPath: "/nonexistent", Sink: rec})
	waitFor(t, "three ticks", func() bool { return len(rec.snapshot()) >= 3 })
	mu.Lock()
	lost = true
	mu.Unlock()
	waitFor(t, "GPU 5 lost", func() bool { r := s.Report(); return len(r.Devices) == 8 && r.Devices[5].Lost })
	cancel()
	<-s.Done()
	if got := rounds(); got < before+3 {
		t.Errorf("sampler rounds ok: %v -> %v, want at least the 3 ticks", before, got)
	}
	if got := lostReads(); got < lostBefore+1 {
		t.Errorf("nvml errors{reason=gpu_is_lost}: %v -> %v, want the lost GPU's read counted", lostBefore, got)
	}
}
