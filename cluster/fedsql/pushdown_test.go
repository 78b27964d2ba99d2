package fedsql

import (
	"fmt"
	"testing"
)

// TestPushdown: only the plainest filters go down; every other shape
// pushes nothing (the coordinator still applies the whole query).
func TestPushdown(t *testing.T) {
	for _, c := range []struct{ sql, want string }{
		{"SELECT * FROM python.comm_collective WHERE _rank = 2", "[{_rank = 2}]"},
		{"select count(*) from python.t where timestamp >= 1700000000000000 and op = 'all_reduce' group by _rank", "[{timestamp >= 1700000000000000} {op = all_reduce}]"},
		{"SELECT * FROM python.t WHERE x <> 1.5 ORDER BY x LIMIT 3", "[{x != 1.5}]"},
		{"SELECT * FROM python.t WHERE x = 'it''s' ;", "[{x = it's}]"},
		{"SELECT * FROM python.t WHERE a = 1 OR b = 2", "[]"},
		{"SELECT * FROM python.t WHERE (a = 1)", "[]"},
		{"SELECT * FROM python.t WHERE NOT a = 1", "[]"},
		{"SELECT * FROM python.t t1 JOIN python.u ON t1.a = u.a WHERE a = 1", "[]"},
		{"SELECT * FROM python.t WHERE a IN (SELECT a FROM python.u)", "[]"},
		{"WITH x AS (SELECT 1) SELECT * FROM python.t WHERE a = 1", "[]"},
		{"SELECT * FROM python.t WHERE a = 1 -- and b = 2", "[]"},
		{"SELECT * FROM python.t, python.u WHERE a = 1", "[]"},
		{"SELECT * FROM python.t WHERE a = ?", "[]"},
		{"SELECT * FROM python.t WHERE a = 'unterminated", "[]"},
	} {
		var parts []string
		for _, k := range pushdown(c.sql) {
			parts = append(parts, fmt.Sprintf("{%s %s %v}", k.Column, k.Op, k.Value))
		}
		if got := fmt.Sprint(parts); got != c.want && !(c.want == "[]" && len(parts) == 0) {
			t.Errorf("%s: %s, want %s", c.sql, got, c.want)
		}
	}
}
