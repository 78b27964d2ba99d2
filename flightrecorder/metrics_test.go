package flightrecorder_test

import (
	"os"
	"path/filepath"
	"testing"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/metrics/metricstest"
)

// TestLoadsAreCounted: a load counts its dump files' bytes, its time and
// the memory high-water mark; a failed one counts as error.
func TestLoadsAreCounted(t *testing.T) {
	dir := filepath.Join("..", "testdata", "fr", "real", "missing_rank")
	var size int64
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		size += info.Size()
	}
	v := func(family string, labels map[string]string) float64 { return metricstest.Value(t, family, labels) }
	ok, failed := v("probing_mcp_flightrecorder_loads_total", map[string]string{"result": "ok"}), v("probing_mcp_flightrecorder_loads_total", map[string]string{"result": "error"})
	bytes := v("probing_mcp_flightrecorder_load_bytes_total", nil)
	if _, err := fr.Load([]string{dir}, fr.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fr.Load([]string{t.TempDir()}, fr.LoadOptions{}); err == nil {
		t.Fatal("an empty directory loaded")
	}
	if got := v("probing_mcp_flightrecorder_loads_total", map[string]string{"result": "ok"}); got != ok+1 {
		t.Errorf("loads ok: %v -> %v, want one more", ok, got)
	}
	if got := v("probing_mcp_flightrecorder_loads_total", map[string]string{"result": "error"}); got != failed+1 {
		t.Errorf("loads error: %v -> %v, want one more", failed, got)
	}
	if got := v("probing_mcp_flightrecorder_load_bytes_total", nil); got != bytes+float64(size) {
		t.Errorf("bytes read: %v -> %v, want +%d (the dumps' sizes)", bytes, got, size)
	}
	if peak := v("probing_mcp_flightrecorder_load_memory_peak_bytes", nil); peak < 1<<20 {
		t.Errorf("memory high-water mark %v bytes: want the process's memory, at least a MiB", peak)
	}
}
