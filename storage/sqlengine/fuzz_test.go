package sqlengine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/storage/memt"
)

// FuzzQueryCorruptRing runs SQL over a ring whose bytes the fuzzer
// changes: whatever the bytes, the C virtual table must not crash, and the
// engine answers or refuses with an error.
//
//	go test ./storage/sqlengine -run '^$' -fuzz FuzzQueryCorruptRing -fuzztime 60s
func FuzzQueryCorruptRing(f *testing.F) {
	dir := f.TempDir()
	cols := []memt.Column{{Name: "timestamp", Type: memt.I64}, {Name: "op", Type: memt.Str}, {Name: "b", Type: memt.Bytes}, {Name: "x", Type: memt.F32}, {Name: "u", Type: memt.U64}}
	w, err := memt.Create(filepath.Join(dir, "seed"), cols, memt.Options{ChunkSize: 256, NumChunks: 3, Dedup: true})
	if err != nil {
		f.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		w.Row().I64(int64(i)).Str([]string{"a", "bb", "a"}[i%3]).Bytes([]byte{byte(i)}).F32(float32(i)).U64(uint64(i) << 60).Commit()
	}
	w.Close()
	seed, err := os.ReadFile(filepath.Join(dir, "seed"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, uint16(0), byte(0))
	f.Add(seed, uint16(len(seed)-10), byte(0xff))
	f.Add(seed[:200], uint16(0), byte(0))
	f.Fuzz(func(t *testing.T, data []byte, at uint16, val byte) {
		data = append([]byte(nil), data...)
		if int(at) < len(data) {
			data[at] ^= val
		}
		d := t.TempDir()
		os.MkdirAll(filepath.Join(d, "1"), 0o755)
		if err := os.WriteFile(filepath.Join(d, "1", "python.t"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		e, err := New(Options{DataDir: d})
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"SELECT * FROM python.t", "SELECT count(*), sum(length(op)), max(u) FROM python.t WHERE timestamp > 3"} {
			_, _ = e.Query(context.Background(), q, MaxLimit)
		}
	})
}

// attackQueries are the resource attacks of issue 9 (holes 4 and 13) and
// their relatives: seeds for the fuzz targets.
var attackQueries = []string{
	"SELECT " + strings.Repeat("length(printf('%.*c',999999999,'x')), ", 11) + "length(printf('%.*c',999999999,'x'))",
	"SELECT length(randomblob(999999999)), length(randomblob(999999999)), length(randomblob(999999999)), length(randomblob(999999999))",
	"SELECT length(zeroblob(999999999))",
	"WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 5000000) SELECT count(DISTINCT printf('%0300d', i)) FROM c",
	"WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 5000000) SELECT printf('%0300d', i) AS s FROM c ORDER BY s",
	"WITH RECURSIVE c(s) AS (SELECT 'x' UNION ALL SELECT s || s FROM c) SELECT max(length(s)) FROM c",
	"SELECT length(replace(printf('%.*c', 4000000, 'a'), printf('%.*c', 2000000, 'a') || 'b', 'x'))",
	"SELECT instr(printf('%.*c', 4000000, 'a'), printf('%.*c', 2000000, 'a') || 'b')",
	"SELECT length(trim(printf('%.*c', 1000000, 'a'), printf('%.*c', 500000, 'b') || 'a'))",
	"SELECT printf('%.*c', 4000000, 'a') LIKE '%' || printf('%.*c', 40000, 'a') || 'b'",
	"WITH x(s) AS MATERIALIZED (SELECT printf('%.*c', 4000000, 'x')) SELECT length(s)+length(s)+length(s)+length(s) FROM x",
	"SELECT json_patch(json_group_object('k' || value, 0), json_group_object('j' || value, 1)) FROM json_each('[' || printf('%.*c', 100000, '1') || ']')",
	"SELECT group_concat(printf('%.*c', 1000, 'x')) FROM (WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c) SELECT i FROM c)",
}

// FuzzQuerySQL runs arbitrary SQL through the engine under small bounds:
// whatever the text, the engine answers or refuses with a query error,
// within its bounds, and never crashes.
//
//	go test ./storage/sqlengine -run '^$' -fuzz FuzzQuerySQL -fuzztime 60s
func FuzzQuerySQL(f *testing.F) {
	for _, q := range attackQueries {
		f.Add(q)
	}
	f.Add("SELECT replace('abc', 'b', 'x'), instr('héllo', 'l'), trim('[x]', '[]'), 'a%' LIKE 'a\\%' ESCAPE '\\'")
	dir := f.TempDir()
	w, err := memt.Create(filepath.Join(dir, "1", "python.t"), []memt.Column{{Name: "timestamp", Type: memt.I64}, {Name: "op", Type: memt.Str}}, memt.Options{ChunkSize: 4096, NumChunks: 4})
	if err != nil {
		f.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		w.Row().I64(int64(i)).Str(strings.Repeat("x", i)).Commit()
	}
	w.Close()
	f.Add("SELECT op, count(*) FROM python.t GROUP BY op ORDER BY 2 DESC")
	e, err := New(Options{DataDir: dir, Timeout: 2 * time.Second, MemoryLimit: 16 << 20, MaxValueBytes: 1 << 20, MaxConcurrent: 64})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, q string) {
		_, err := e.Query(context.Background(), q, 10)
		var qe *Error
		if err != nil && !errors.As(err, &qe) {
			t.Fatalf("%q: an error that is not a query error: %v", q, err)
		}
	})
}

func FuzzSplitStatements(f *testing.F) {
	for _, s := range []string{"SELECT 1; SELECT 2", "SELECT ';'", "-- x\nSELECT 1", "/* ; */", "SELECT [a;b]", `"a""b";`} {
		f.Add(s)
	}
	for _, s := range attackQueries {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		stmts := splitStatements(q)
		for _, s := range stmts {
			if s == "" {
				t.Fatalf("empty statement from %q", q)
			}
		}
		_ = checkStatement(q)
	})
}
