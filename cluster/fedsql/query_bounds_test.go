package fedsql

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// TestQueryHasTheEnginesBounds: issue 23. The coordinator's copy of the
// nodes' rows is queried with the engine's value-length bound: a printf
// width that built a 1 GB string is refused as too big, with the fix; an
// ordinary statement still runs.
func TestQueryHasTheEnginesBounds(t *testing.T) {
	n := newNode(t, "node-a", 0, []int{0, 1}, 20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := Query(ctx, []Node{n}, "SELECT printf('%.*c', 1000000000, 'x') AS s FROM python.comm_collective LIMIT 1", 10, Options{})
	var se *sqlengine.Error
	if !errors.As(err, &se) || se.Kind != "too_big" || !strings.Contains(se.Msg, "value-length guard") {
		t.Fatalf("%v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %s", d)
	}
	res, err := Query(ctx, []Node{n}, "SELECT rank, count(*) AS n FROM python.comm_collective GROUP BY rank ORDER BY rank", 10, Options{})
	if err != nil || len(res.Rows) != 2 {
		t.Fatalf("%+v %v", res, err)
	}
}
