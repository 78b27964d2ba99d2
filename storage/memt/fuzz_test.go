package memt

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzOpenScan corrupts a valid table byte by byte: Open and Scan must
// return rows or an error, never panic or loop.
//
//	go test ./storage/memt -run '^$' -fuzz FuzzOpenScan -fuzztime 60s
func FuzzOpenScan(f *testing.F) {
	dir := f.TempDir()
	for _, dedup := range []bool{false, true} {
		path := filepath.Join(dir, "seed")
		os.Remove(path)
		w, err := Create(path, append([]Column(nil), allTypes...), Options{ChunkSize: 512, NumChunks: 3, Dedup: dedup})
		if err != nil {
			f.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			_ = writeRow(w, i)
		}
		w.Close()
		b, _ := os.ReadFile(path)
		f.Add(b, uint32(0), byte(0))
		f.Add(b, uint32(12), byte(1))      // flags
		f.Add(b, uint32(24), byte(0x40))   // chunk size
		f.Add(b, uint32(2000), byte(0x80)) // a row length or value
	}
	f.Fuzz(func(t *testing.T, data []byte, at uint32, x byte) {
		if len(data) > 0 {
			data[int(at)%len(data)] ^= x
		}
		path := filepath.Join(t.TempDir(), "t")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		tb, err := Open(path)
		if err != nil {
			return
		}
		defer tb.Close()
		rows := 0
		_, _ = tb.Scan(ScanOptions{}, func(r *Row) bool {
			for i := range tb.Columns {
				_ = r.Value(i)
			}
			rows++
			return rows < 100000
		})
	})
}
