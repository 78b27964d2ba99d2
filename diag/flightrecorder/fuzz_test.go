package flightrecorder

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the dump decoder (pickle and JSON):
// no panic, and whatever decodes can be analysed without a panic either.
//
//	go test ./diag/flightrecorder -run '^$' -fuzz FuzzDecode -fuzztime 60s
func FuzzDecode(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/parity/f0*/nccl_trace_rank_0")
	more, _ := filepath.Glob("../../testdata/fr/real/*/nccl_trace_rank_1")
	for _, p := range append(seeds, more...) {
		if b, err := os.ReadFile(p); err == nil && len(b) < 64<<10 {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}, "pg_status": {"0": {"last_enqueued_collective": "3"}}, "entries": [{"process_group": ["0", "default_pg"], "collective_seq_id": 1, "profiling_name": "nccl:all_reduce", "input_sizes": [[4]], "output_sizes": [[4]], "state": "completed"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Decode(data)
		if err != nil {
			return
		}
		d.Rank = 0
		other := *d
		other.Rank = 1
		r := Analyze([]*Dump{d, &other}, Options{Transcript: true})
		if r.Verdict == "" {
			t.Fatal("no verdict")
		}
	})
}
