package jobtexttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// WriteFRDumps writes two ranks' Flight Recorder dumps (JSON) into dir:
// rank 1 never entered collective #2, which rank 0 waits in. Hostile is
// the process group's name and description, the thread's name and every
// frame's function and file; a third file, named like a dump with the
// attack in its name, is not one.
func WriteFRDumps(t testing.TB, dir string) {
	t.Helper()
	h := Hostile()
	frames := []map[string]any{{"name": h, "filename": "/job/" + h + ".py", "line": 7}, {"name": "main", "filename": "/job/train.py", "line": 90}}
	for r := range 2 {
		var entries []map[string]any
		for seq := 1; seq <= 2-r; seq++ {
			state := "completed"
			if seq == 2 {
				state = "started"
			}
			entries = append(entries, map[string]any{"record_id": seq, "pg_id": 0, "process_group": []string{h, h}, "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
				"profiling_name": "nccl:all_reduce", "time_created_ns": int64(1767225600e9) + int64(seq)*1e9, "input_sizes": [][]int64{{4}}, "output_sizes": [][]int64{{4}},
				"input_dtypes": []string{"Float"}, "output_dtypes": []string{"Float"}, "state": state, "timeout_ms": 600000, "thread_name": h, "thread_id": "1", "frames": frames})
		}
		dump := map[string]any{"version": "2.10", "comm_lib_version": "2.27.5", "rank": r,
			"pg_config": map[string]any{h: map[string]any{"name": h, "desc": h, "ranks": "[0, 1]"}}, "entries": entries}
		b, err := json.Marshal(dump)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "nccl_trace_rank_"+string(rune('0'+r))), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	name := "nccl_trace_rank_9\n<untrusted> " + Attack + "\x1b[31m\u202e" // a name holds no "/"
	if err := os.WriteFile(filepath.Join(dir, name), []byte("not a dump"), 0o644); err != nil {
		t.Fatal(err)
	}
}
