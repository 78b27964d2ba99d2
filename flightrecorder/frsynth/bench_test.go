package frsynth

import (
	"fmt"
	"testing"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
)

// BenchmarkLoadAnalyze measures decode + analysis of synthetic jobs (the
// numbers in docs/BENCHMARKS.md come from evals/bench/fr_bench.sh, which
// also runs torch's fr_trace on the same files):
//
//	go test ./flightrecorder/frsynth -run '^$' -bench LoadAnalyze -benchtime 3x
func BenchmarkLoadAnalyze(b *testing.B) {
	for _, ranks := range []int{64, 256} {
		for _, cpp := range []bool{false, true} {
			dir := b.TempDir()
			spec := Spec{Ranks: ranks, Entries: 2000, Frames: true, CppStack: cpp, TP: 8, Fault: Fault{Kind: "missing", Rank: 11, Seq: 1400}}
			if err := Write(dir, spec); err != nil {
				b.Fatal(err)
			}
			stacks := map[bool]string{false: "py", true: "cpp"}[cpp]
			b.Run(fmt.Sprintf("ranks=%d/stacks=%s", ranks, stacks), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					l, err := fr.Load([]string{dir}, fr.LoadOptions{})
					if err != nil {
						b.Fatal(err)
					}
					r := fr.AnalyzeLoaded(l, fr.Options{})
					if r.Verdict != "MISSING_RANKS" {
						b.Fatalf("verdict %s", r.Verdict)
					}
				}
			})
		}
	}
}
