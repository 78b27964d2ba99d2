package evidence

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/storage/memt"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// commRings writes 8 ranks' python.comm_collective rings of perRank rows
// each (a pair group and the default group, alternating, 1 ms apart,
// ending now), with identities, as a long-running job leaves them.
func commRings(tb testing.TB, perRank int) string {
	dir := tb.TempDir()
	cols := []memt.Column{{Name: "timestamp", Type: memt.I64}, {Name: "op", Type: memt.Str}, {Name: "participate_ranks", Type: memt.Str},
		{Name: "group_seq", Type: memt.I64}, {Name: "duration_ms", Type: memt.F64}}
	end := time.Now().UnixMicro()
	for r := 0; r < 8; r++ {
		pd := filepath.Join(dir, strconv.Itoa(4_000_000+r))
		id, _ := json.Marshal(map[string]any{"agent": "probing-mcp", "pid": 4_000_000 + r, "rank": r, "world_size": 8})
		if err := os.MkdirAll(pd, 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pd, ".identity.json"), id, 0o644); err != nil {
			tb.Fatal(err)
		}
		chunk := 1 << 20
		w, err := memt.Create(filepath.Join(pd, "python.comm_collective"), cols, memt.Options{ChunkSize: chunk, NumChunks: perRank*80/chunk + 2, Dedup: true})
		if err != nil {
			tb.Fatal(err)
		}
		pair := fmt.Sprintf("[%d, %d]", r&^1, r|1)
		for i := 0; i < perRank; i++ {
			g, seq := pair, int64(i/2+1)
			if i%2 == 1 {
				g = "[0, 1, 2, 3, 4, 5, 6, 7]"
			}
			ts := end - int64(perRank-i)*1000
			if err := w.Row().I64(ts).Str("all_reduce").Str(g).I64(seq).F64(0.5).Commit(); err != nil {
				tb.Fatal(err)
			}
		}
		w.Close()
	}
	return dir
}

// BenchmarkReadComm: each rank's last 64 collectives out of rings that
// hold a long job's history. go test ./evidence -run '^$' -bench ReadComm
func BenchmarkReadComm(b *testing.B) {
	for _, per := range []int{10_000, 250_000} {
		b.Run(strconv.Itoa(per*8), func(b *testing.B) {
			dir := commRings(b, per)
			e, err := sqlengine.New(sqlengine.Options{DataDir: dir})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rows, err := ReadComm(context.Background(), e, 64)
				if err != nil || len(rows) != 8*64 {
					b.Fatalf("%d rows, %v", len(rows), err)
				}
			}
		})
	}
}

// BenchmarkReadCommFor: the same, for ranks the agents named: the recent
// window is read, not the whole rings.
func BenchmarkReadCommFor(b *testing.B) {
	dir := commRings(b, 250_000)
	e, err := sqlengine.New(sqlengine.Options{DataDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	ranks := []int{0, 1, 2, 3, 4, 5, 6, 7}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rows, err := ReadCommFor(context.Background(), e, 64, ranks)
		if err != nil || len(rows) != 8*64 {
			b.Fatalf("%d rows, %v", len(rows), err)
		}
	}
}

// TestReadCommForWindows: the windowed read gives each rank the same last
// calls as the whole read; a rank whose calls stopped long ago (older
// than every window) makes it read the whole rings.
func TestReadCommForWindows(t *testing.T) {
	dir := commRings(t, 5_000)
	e, err := sqlengine.New(sqlengine.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	whole, err := ReadComm(ctx, e, 64)
	if err != nil {
		t.Fatal(err)
	}
	win, err := ReadCommFor(ctx, e, 64, []int{0, 1, 2, 3, 4, 5, 6, 7})
	if err != nil || fmt.Sprint(win) != fmt.Sprint(whole) || len(whole) != 8*64 {
		t.Fatalf("windowed %d rows, whole %d, %v", len(win), len(whole), err)
	}
	// Rank 9 is known (an identity) but has no calls in any window: the
	// whole rings are read, and give the same rows.
	if got, err := ReadCommFor(ctx, e, 64, []int{0, 9}); err != nil || fmt.Sprint(got) != fmt.Sprint(whole) {
		t.Errorf("fallback: %d rows, %v", len(got), err)
	}
}
