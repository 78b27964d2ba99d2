package sqlengine

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/probing-mcp/probing-mcp/storage/memt"
)

// BenchmarkSQL runs the same queries over MEMT rings (through the engine,
// a fresh session per query as in production) and over a native SQLite
// table holding the same rows, side by side. Results: docs/BENCHMARKS.md.
//
//	go test ./storage/sqlengine -run '^$' -bench SQL -benchtime 5x
//	PROBING_BENCH_ROWS=1000000,10000000 (the default) picks the sizes.
func BenchmarkSQL(b *testing.B) {
	sizes := []int{1_000_000, 10_000_000}
	if s := os.Getenv("PROBING_BENCH_ROWS"); s != "" {
		sizes = nil
		for _, f := range splitComma(s) {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("PROBING_BENCH_ROWS: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	queries := []struct{ name, sql string }{
		{"full_scan", "SELECT count(*), sum(bytes), avg(duration_ms) FROM %s"},
		{"group_by_rank", "SELECT rank, count(*), sum(bytes), max(duration_ms) FROM %s GROUP BY rank"},
		{"filter_text", "SELECT count(*) FROM %s WHERE op = 'broadcast' AND duration_ms > 100"},
		{"last_1pct_time", "SELECT count(*), max(duration_ms) FROM %s WHERE timestamp >= %d"},
	}
	for _, n := range sizes {
		fx := benchFixture(b, n)
		for _, q := range queries {
			sides := []string{"rings", "native"}
			if q.name == "full_scan" {
				// The design not taken: copy the rings into a table for
				// each query, then run it.
				sides = append(sides, "materialise")
			}
			for _, side := range sides {
				b.Run(fmt.Sprintf("rows=%d/%s/%s", n, q.name, side), func(b *testing.B) {
					table := "python.comm_collective"
					if side == "native" {
						table = "native.comm_collective"
					}
					text := fmt.Sprintf(q.sql, table)
					if q.name == "last_1pct_time" {
						text = fmt.Sprintf(q.sql, table, int64(n-n/100))
					}
					for i := 0; i < b.N; i++ {
						if side == "materialise" {
							fx.materialise(b, fmt.Sprintf(q.sql, "temp.copy"))
							continue
						}
						if side == "rings" {
							if _, err := fx.engine.Query(context.Background(), text, MaxLimit); err != nil {
								b.Fatal(err)
							}
						} else {
							drain(b, fx.native, text)
						}
					}
					b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mrows/s")
				})
			}
		}
		fx.close()
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

type fixture struct {
	dir    string
	engine *Engine
	native *sqlite3.SQLiteConn
}

func (f *fixture) close() {
	f.native.Close()
	os.RemoveAll(f.dir)
}

var fixtureMu sync.Mutex

// benchFixture writes n rows as 8 ranks' python.comm_collective rings
// (one process directory each, sized so nothing is recycled) and the same
// rows into a native SQLite table in a file beside them.
func benchFixture(b *testing.B, n int) *fixture {
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	dir, err := os.MkdirTemp("", "probing-sqlbench-")
	if err != nil {
		b.Fatal(err)
	}
	const ranks = 8
	ops := []string{"all_reduce", "broadcast", "all_gather", "reduce_scatter"}
	per := n / ranks
	for r := 0; r < ranks; r++ {
		chunk := 1 << 20
		chunks := per*56/chunk + 2
		w, err := memt.Create(filepath.Join(dir, strconv.Itoa(1000+r), "python.comm_collective"), collCols,
			memt.Options{ChunkSize: chunk, NumChunks: chunks, Dedup: true})
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < per; i++ {
			ts := int64(i*ranks + r)
			if err := w.Row().I64(ts).I64(int64(r)).Str(ops[i%len(ops)]).I64(int64(1024 * (i%64 + 1))).F64(float64(i%1000) / 3).Commit(); err != nil {
				b.Fatal(err)
			}
		}
		w.Close()
	}
	e, err := New(Options{DataDir: dir, Timeout: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	// The native copy is made through the engine's own session, which
	// may write while it is being set up.
	s, err := e.open(context.Background(), false)
	if err != nil {
		b.Fatal(err)
	}
	s.conn.RegisterAuthorizer(nil)
	nativePath := filepath.Join(dir, "native.db")
	for _, q := range []string{
		"ATTACH DATABASE '" + nativePath + "' AS native",
		"CREATE TABLE native.comm_collective(timestamp INTEGER, rank INTEGER, op TEXT, bytes INTEGER, duration_ms REAL)",
		"INSERT INTO native.comm_collective SELECT timestamp, rank, op, bytes, duration_ms FROM python.comm_collective",
		"DETACH DATABASE native",
	} {
		if err := s.exec(q); err != nil {
			b.Fatal(err)
		}
	}
	s.close()
	c, err := (&sqlite3.SQLiteDriver{}).Open(":memory:")
	if err != nil {
		b.Fatal(err)
	}
	native := c.(*sqlite3.SQLiteConn)
	if _, err := native.Exec("ATTACH DATABASE '"+nativePath+"' AS native", nil); err != nil {
		b.Fatal(err)
	}
	drain(b, native, "SELECT count(*) FROM native.comm_collective") // warm the page cache
	return &fixture{dir: dir, engine: e, native: native}
}

// materialise copies every ring row into a temporary table of a fresh
// session, then runs q over the copy.
func (f *fixture) materialise(b *testing.B, q string) {
	s, err := f.engine.open(context.Background(), false)
	if err != nil {
		b.Fatal(err)
	}
	defer s.close()
	s.conn.RegisterAuthorizer(nil)
	if err := s.exec("CREATE TEMP TABLE copy AS SELECT timestamp, rank, op, bytes, duration_ms FROM python.comm_collective"); err != nil {
		b.Fatal(err)
	}
	drain(b, s.conn, q)
}

func drain(b *testing.B, c *sqlite3.SQLiteConn, q string) {
	rows, err := c.QueryContext(context.Background(), q, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	for rows.Next(dest) != io.EOF {
	}
}
