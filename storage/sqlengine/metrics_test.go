package sqlengine

import (
	"context"
	"testing"

	"github.com/probing-mcp/probing-mcp/internal/metrics/metricstest"
)

// TestQueriesAreCounted: a query that runs counts as ok with its rows, a
// refused one by its reason, a failed one as error.
func TestQueriesAreCounted(t *testing.T) {
	e := newEngine(t, t.TempDir())
	v := func(family string, labels map[string]string) float64 { return metricstest.Value(t, family, labels) }
	ok, rows := v("probing_mcp_sql_queries_total", map[string]string{"result": "ok"}), v("probing_mcp_sql_rows_total", nil)
	refused := v("probing_mcp_sql_refusals_total", map[string]string{"reason": "read_only"})
	failed := v("probing_mcp_sql_queries_total", map[string]string{"result": "error"})
	timed := v("probing_mcp_sql_query_duration_seconds", nil)

	query(t, e, "SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3", 10)
	if _, err := e.Query(context.Background(), "DELETE FROM x", 10); err == nil {
		t.Fatal("DELETE ran")
	}
	if _, err := e.Query(context.Background(), "SELECT * FROM no_such_table", 10); err == nil {
		t.Fatal("a missing table ran")
	}
	for _, c := range []struct {
		name   string
		before float64
		now    float64
		delta  float64
	}{
		{"queries ok", ok, v("probing_mcp_sql_queries_total", map[string]string{"result": "ok"}), 1},
		{"rows", rows, v("probing_mcp_sql_rows_total", nil), 3},
		{"refusals read_only", refused, v("probing_mcp_sql_refusals_total", map[string]string{"reason": "read_only"}), 1},
		{"queries error", failed, v("probing_mcp_sql_queries_total", map[string]string{"result": "error"}), 1},
		{"timed", timed, v("probing_mcp_sql_query_duration_seconds", nil), 3},
	} {
		if c.now != c.before+c.delta {
			t.Errorf("%s: %v -> %v, want +%v", c.name, c.before, c.now, c.delta)
		}
	}
}
