package sqlengine

import (
	"context"
	"strings"
	"testing"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/probing-mcp/probing-mcp/storage/memt"
)

func TestQueryRowsPastMaxLimitAndTruncation(t *testing.T) {
	dir := t.TempDir()
	writeColl(t, dir, 101, 0, 1500, memt.Options{ChunkSize: 4096, NumChunks: 64})
	e := newEngine(t, dir)
	rows, err := e.QueryRows(context.Background(), "SELECT rank, op FROM python.comm_collective", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows.Rows) <= MaxLimit || rows.Truncated {
		t.Fatalf("%d rows, truncated %v: want every row past MaxLimit", len(rows.Rows), rows.Truncated)
	}
	all := len(rows.Rows)
	rows, err = e.QueryRows(context.Background(), "SELECT rank FROM python.comm_collective", all-1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows.Rows) != all-1 || !rows.Truncated {
		t.Fatalf("%d rows, truncated %v: want %d and truncated", len(rows.Rows), rows.Truncated, all-1)
	}
	if _, err := e.QueryRows(context.Background(), "DELETE FROM python.comm_collective", 10); err == nil || !strings.Contains(err.Error(), "only SELECT") {
		t.Fatalf("write: %v", err)
	}
}

func TestGuardOnAnotherConnection(t *testing.T) {
	c, err := (&sqlite3.SQLiteDriver{}).Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn := c.(*sqlite3.SQLiteConn)
	if _, err := conn.Exec("CREATE TABLE t(x)", nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ q, want string }{
		{"INSERT INTO t VALUES (1)", "INSERT into t"},
		{"ATTACH ':memory:' AS y", "ATTACH"},
		{"PRAGMA query_only = 0", "PRAGMA"},
		{"SELECT load_extension('x')", "load_extension"},
	} {
		g := &Guard{}
		g.Install(conn)
		_, err := conn.Exec(tc.q, nil)
		if err == nil || g.Err() == nil || !strings.Contains(g.Err().Error(), tc.want) {
			t.Errorf("%s: err %v, guard %v, want %q", tc.q, err, g.Err(), tc.want)
		}
	}
	g := &Guard{}
	g.Install(conn)
	rows, err := conn.Query("SELECT count(*) FROM t", nil)
	if err != nil || g.Err() != nil {
		t.Fatalf("read refused: %v %v", err, g.Err())
	}
	rows.Close()
}
