package history

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/metrics/metricstest"
)

func TestWritesAreCounted(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "h.db"), Options{})
	labels := map[string]string{"table": "diagnoses", "result": "ok"}
	before := metricstest.Value(t, "probing_mcp_history_writes_total", labels)
	if _, err := s.AddDiagnosis(Diagnosis{CreatedAt: time.Now(), Kind: "hang", Verdict: "rank 3"}); err != nil {
		t.Fatal(err)
	}
	if got := metricstest.Value(t, "probing_mcp_history_writes_total", labels); got != before+1 {
		t.Errorf("history_writes_total%v: %v -> %v, want one more", labels, before, got)
	}
}
