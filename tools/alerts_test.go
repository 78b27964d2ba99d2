package tools

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/storage/history"
)

func TestListAlerts(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0).UTC()
	env := &Env{}
	res, err := ListAlerts(ctx, env, ListAlertsParams{}, now)
	if err != nil || !strings.Contains(res.Summary, "not evidence that nothing happened") {
		t.Fatalf("no history: %q %v", res.Summary, err)
	}
	h, err := history.Open(filepath.Join(t.TempDir(), "h.db"), history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	env.History = h
	if res, err = ListAlerts(ctx, env, ListAlertsParams{}, now); err != nil || !strings.HasPrefix(res.Summary, "No watcher event kept") {
		t.Fatalf("empty: %q %v", res.Summary, err)
	}
	for i, k := range []string{"captured", "stalled", "moving"} {
		if _, err := h.AddAlert(history.Alert{At: now.Add(time.Duration(i-3) * time.Hour), Kind: k, Level: "error", Title: "job stalled: rank 2, cpu_stall",
			Incident: 1, CulpritRanks: "2", Category: "cpu_stall", Confidence: "high", Location: "train.py:9 (load\x1b[31m)", DiagnosisID: 4,
			Headline: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	res, err = ListAlerts(ctx, env, ListAlertsParams{Limit: 2}, now)
	if err != nil || len(res.Alerts) != 2 || res.Alerts[0].Kind != "moving" || res.NextBeforeID == nil {
		t.Fatalf("page 1: %+v %v", res, err)
	}
	txt := res.ModelText()
	if !strings.Contains(txt, "rank 2, cpu_stall, high confidence") || strings.Contains(txt, "\x1b") || !strings.Contains(txt, "before_id") {
		t.Errorf("text:\n%s", txt)
	}
	res, err = ListAlerts(ctx, env, ListAlertsParams{BeforeID: *res.NextBeforeID}, now)
	if err != nil || len(res.Alerts) != 1 || res.Alerts[0].Kind != "captured" || res.NextBeforeID != nil {
		t.Fatalf("page 2: %+v %v", res, err)
	}
	if res, err = ListAlerts(ctx, env, ListAlertsParams{Since: "90m"}, now); err != nil || len(res.Alerts) != 1 {
		t.Fatalf("since 90m: %+v %v", res, err)
	}
	if res, err = ListAlerts(ctx, env, ListAlertsParams{Since: now.Add(-150 * time.Minute).Format(time.RFC3339)}, now); err != nil || len(res.Alerts) != 2 {
		t.Fatalf("since a time: %+v %v", res, err)
	}
	if _, err := ListAlerts(ctx, env, ListAlertsParams{Since: "yesterday"}, now); err == nil || !strings.Contains(err.Error(), "RFC 3339") {
		t.Errorf("bad since: %v", err)
	}
}
