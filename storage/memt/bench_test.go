package memt

import (
	"path/filepath"
	"testing"
)

// BenchmarkWriter measures appends of a typical 5-column row (results in
// docs/BENCHMARKS.md):
//
//	go test ./storage/memt -run '^$' -bench Writer -benchtime 10000000x
func BenchmarkWriter(b *testing.B) {
	cols := []Column{{"timestamp", I64}, {"rank", I64}, {"seq", I64}, {"duration_ms", F64}, {"op", Str}}
	c, n := SizeFor(64 << 20)
	w, err := Create(filepath.Join(b.TempDir(), "python.bench"), cols, Options{ChunkSize: c, NumChunks: n})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.Row().I64(int64(i)).I64(3).I64(int64(i)).F64(1.5).Str("all_reduce").Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
