package sqlengine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

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

func FuzzSplitStatements(f *testing.F) {
	for _, s := range []string{"SELECT 1; SELECT 2", "SELECT ';'", "-- x\nSELECT 1", "/* ; */", "SELECT [a;b]", `"a""b";`} {
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
