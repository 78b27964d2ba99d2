//go:build sqlite_vtable

package sqlengine

import (
	"context"
	"fmt"
	"testing"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// BenchmarkGoVTab measures the design this package did not take:
// go-sqlite3's Go virtual tables, which call into Go for every column of
// every row. The table serves rows from Go memory with no decoding at all,
// so this is a lower bound on that design's cost; compare with
// BenchmarkSQL's rings and native sides (docs/BENCHMARKS.md).
//
//	go test -tags sqlite_vtable ./storage/sqlengine -run '^$' -bench GoVTab -benchtime 3x
func BenchmarkGoVTab(b *testing.B) {
	const n = 1_000_000
	c, err := (&sqlite3.SQLiteDriver{}).Open(":memory:")
	if err != nil {
		b.Fatal(err)
	}
	conn := c.(*sqlite3.SQLiteConn)
	defer conn.Close()
	if err := conn.CreateModule("govtab", &goModule{n: n}); err != nil {
		b.Fatal(err)
	}
	if _, err := conn.Exec("CREATE VIRTUAL TABLE v USING govtab()", nil); err != nil {
		b.Fatal(err)
	}
	for _, q := range []struct{ name, sql string }{
		{"full_scan", "SELECT count(*), sum(bytes), avg(duration_ms) FROM v"},
		{"group_by_rank", "SELECT rank, count(*), sum(bytes), max(duration_ms) FROM v GROUP BY rank"},
	} {
		b.Run(fmt.Sprintf("rows=%d/%s/go_vtab", n, q.name), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				drain(b, conn, q.sql)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mrows/s")
		})
	}
	_ = context.Background
}

type goModule struct{ n int }
type goTable struct{ n int }
type goCursor struct{ i, n int }

var benchOps = []string{"all_reduce", "broadcast", "all_gather", "reduce_scatter"}

func (m *goModule) Create(c *sqlite3.SQLiteConn, args []string) (sqlite3.VTab, error) {
	err := c.DeclareVTab("CREATE TABLE x(timestamp INTEGER, rank INTEGER, op TEXT, bytes INTEGER, duration_ms REAL)")
	return &goTable{m.n}, err
}
func (m *goModule) Connect(c *sqlite3.SQLiteConn, args []string) (sqlite3.VTab, error) {
	return m.Create(c, args)
}
func (m *goModule) DestroyModule() {}
func (t *goTable) BestIndex(cst []sqlite3.InfoConstraint, ob []sqlite3.InfoOrderBy) (*sqlite3.IndexResult, error) {
	return &sqlite3.IndexResult{Used: make([]bool, len(cst))}, nil
}
func (t *goTable) Disconnect() error                 { return nil }
func (t *goTable) Destroy() error                    { return nil }
func (t *goTable) Open() (sqlite3.VTabCursor, error) { return &goCursor{n: t.n}, nil }
func (c *goCursor) Close() error                     { return nil }
func (c *goCursor) Filter(int, string, []any) error  { c.i = 0; return nil }
func (c *goCursor) Next() error                      { c.i++; return nil }
func (c *goCursor) EOF() bool                        { return c.i >= c.n }
func (c *goCursor) Rowid() (int64, error)            { return int64(c.i), nil }
func (c *goCursor) Column(ctx *sqlite3.SQLiteContext, col int) error {
	switch col {
	case 0:
		ctx.ResultInt64(int64(c.i))
	case 1:
		ctx.ResultInt64(int64(c.i % 8))
	case 2:
		ctx.ResultText(benchOps[c.i%4])
	case 3:
		ctx.ResultInt64(int64(1024 * (c.i%64 + 1)))
	case 4:
		ctx.ResultDouble(float64(c.i%1000) / 3)
	}
	return nil
}
