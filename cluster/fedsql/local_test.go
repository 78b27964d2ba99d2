package fedsql

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/probing-mcp/probing-mcp/storage/memt"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

var collCols = []memt.Column{{Name: "timestamp", Type: memt.I64}, {Name: "rank", Type: memt.I64},
	{Name: "op", Type: memt.Str}, {Name: "bytes", Type: memt.I64}}

// newNode writes n rows of python.comm_collective for each of ranks into
// a data dir of its own and serves it as a Local.
func newNode(t *testing.T, id string, nodeRank int, ranks []int, n int) *Local {
	t.Helper()
	dir := t.TempDir()
	ops := []string{"all_reduce", "broadcast", "all_gather"}
	for i, rank := range ranks {
		w, err := memt.Create(filepath.Join(dir, fmt.Sprint(1000+i), "python.comm_collective"), collCols, memt.Options{ChunkSize: 4096, NumChunks: 16})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		for j := 0; j < n; j++ {
			if err := w.Row().I64(int64(1_000_000 + j)).I64(int64(rank)).Str(ops[j%3]).I64(int64(1024 * (j + 1))).Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	e, err := sqlengine.New(sqlengine.Options{DataDir: dir, Host: id})
	if err != nil {
		t.Fatal(err)
	}
	return &Local{Engine: e, NodeID: id, NodeTags: NodeTags{Host: id, Addr: id, NodeRank: nodeRank}}
}

func TestLocalTablesAndScan(t *testing.T) {
	l := newNode(t, "10.0.0.1:9700", 0, []int{0, 1}, 30)
	ctx := context.Background()
	tabs, err := l.Tables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The ring table and probing.rings (each node's rings); no docs, no
	// history.
	if len(tabs) != 2 || tabs[0].Schema != "probing" || tabs[0].Name != "rings" || tabs[1].Schema != "python" || tabs[1].Name != "comm_collective" {
		t.Fatalf("tables: %+v", tabs)
	}
	tabs = tabs[1:]
	names := map[string]bool{}
	for _, c := range tabs[0].Columns {
		names[c.Name] = true
	}
	for _, c := range []string{"timestamp", "rank", "op", "bytes", "_rank", "_host", "_pid"} {
		if !names[c] {
			t.Errorf("column %s missing from %+v", c, tabs[0].Columns)
		}
	}
	rep, err := l.Scan(ctx, ScanRequest{Schema: "python", Table: "comm_collective", Columns: []string{"rank", "op", "bytes"},
		Where: []Constraint{{Column: "rank", Op: "=", Value: int64(1)}, {Column: "op", Op: "=", Value: "all_reduce"}, {Column: "bytes", Op: ">", Value: 2048.0}}})
	if err != nil {
		t.Fatal(err)
	}
	// rank 1, j%3==0, bytes=1024(j+1) > 2048: j in {3,6,...,27}: 9 rows.
	if len(rep.Rows) != 9 || rep.Truncated {
		t.Fatalf("got %d rows (truncated %v): %v", len(rep.Rows), rep.Truncated, rep.Rows)
	}
	for _, r := range rep.Rows {
		if len(r) != 3 || r[0] != int64(1) || r[1] != "all_reduce" {
			t.Fatalf("row %v", r)
		}
	}
}

func TestLocalTruncationIsReported(t *testing.T) {
	l := newNode(t, "n", 0, []int{0}, 50)
	l.MaxRows = 20
	rep, err := l.Scan(context.Background(), ScanRequest{Schema: "python", Table: "comm_collective", Columns: []string{"rank"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 20 || !rep.Truncated || len(rep.Problems) == 0 {
		t.Fatalf("rows %d truncated %v problems %v", len(rep.Rows), rep.Truncated, rep.Problems)
	}
}

func TestLocalRefusesBadRequests(t *testing.T) {
	l := newNode(t, "n", 0, []int{0}, 3)
	ctx := context.Background()
	for _, tc := range []struct {
		req  ScanRequest
		want string
	}{
		{ScanRequest{Schema: "python", Table: "nope", Columns: []string{"rank"}}, "no table"},
		{ScanRequest{Schema: "python", Table: "comm_collective", Columns: []string{`rank" FROM x; --`}}, "no column"},
		{ScanRequest{Schema: "python", Table: "comm_collective", Columns: []string{"rank"}, Where: []Constraint{{Column: "rank", Op: "OR 1=1 --", Value: 1}}}, "operator"},
		{ScanRequest{Schema: "python", Table: "comm_collective", Columns: []string{"rank"}, Where: []Constraint{{Column: "rank", Op: "=", Value: []any{1}}}}, "not a number or a string"},
		{ScanRequest{Schema: "python", Table: "comm_collective"}, "names no columns"},
	} {
		_, err := l.Scan(ctx, tc.req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.req, err, tc.want)
		}
	}
	// A quote in a value is data, not SQL.
	rep, err := l.Scan(ctx, ScanRequest{Schema: "python", Table: "comm_collective", Columns: []string{"op"}, Where: []Constraint{{Column: "op", Op: "=", Value: "x' OR '1'='1"}}})
	if err != nil || len(rep.Rows) != 0 {
		t.Fatalf("quoted value: %v %v", rep, err)
	}
}

func TestGuardRefusesWritesWithTheFix(t *testing.T) {
	for _, q := range []string{"DELETE FROM python.comm_collective", "SELECT 1; SELECT 2", "ATTACH 'x' AS y", ""} {
		err := sqlengine.CheckReadOnly(q)
		if err == nil {
			t.Errorf("%q: accepted", q)
			continue
		}
		if q != "" && !strings.Contains(err.Error(), "one SQL statement") && !strings.Contains(err.Error(), "only SELECT") {
			t.Errorf("%q: %v does not say how to fix it", q, err)
		}
	}
	if err := sqlengine.CheckReadOnly("WITH x AS (SELECT 1) SELECT * FROM x"); err != nil {
		t.Fatal(err)
	}
}

func FuzzLiteral(f *testing.F) {
	for _, s := range []string{"", "a", "it's", "'; DROP TABLE x; --", "\x00", "é"} {
		f.Add(s, int64(3), 1.5)
	}
	e, err := sqlengine.New(sqlengine.Options{DataDir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string, i int64, x float64) {
		for _, v := range []any{s, i, x} {
			lit, err := Literal(v)
			if err != nil {
				continue
			}
			// The literal is one value: selecting it gives back exactly one
			// column, and a string comes back unchanged.
			rows, err := e.QueryRows(context.Background(), "SELECT "+lit, 2)
			if err != nil {
				if strings.Contains(err.Error(), "UTF") || strings.Contains(err.Error(), "utf") {
					continue
				}
				t.Fatalf("%q: %v", lit, err)
			}
			if len(rows.Columns) != 1 || len(rows.Rows) != 1 {
				t.Fatalf("%q: %v %v", lit, rows.Columns, rows.Rows)
			}
			if str, ok := v.(string); ok && utf8.ValidString(str) && len(str) < 4096 && rows.Rows[0][0] != str {
				t.Fatalf("%q came back as %q", str, rows.Rows[0][0])
			}
		}
	})
}
