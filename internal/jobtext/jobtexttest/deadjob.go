package jobtexttest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// PlantDeadJob writes into dir what a dead 3-rank job leaves for the
// diagnosis (each rank's agent identity and the exception it died of,
// rank 0 first) with Hostile as every exception's type and message, its
// thread's name and its innermost frame's function and file. The pids are
// high and gone; it returns them.
func PlantDeadJob(t testing.TB, dir string) []int {
	t.Helper()
	h := Hostile()
	var pids []int
	for r := range 3 {
		pid := 3999401 + r
		d := filepath.Join(dir, fmt.Sprint(pid))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		id := fmt.Appendf(nil, `{"agent":"probing-mcp","agent_version":"0.2.0","pid":%d,"start_time":77,"rank":%d,"world_size":3,"local_rank":%d}`, pid, r, r)
		rec, err := json.Marshal(map[string]any{"v": 1, "kind": "exception", "time_ns": int64(1796558514e9) + int64(r)*1e9, "pid": pid, "start_time": 77, "hook": "sys",
			"thread": map[string]any{"name": h, "is_main": true}, "type": h, "message": h,
			"frames": []map[string]any{{"file": "/job/" + h + ".py", "line": 11, "function": h}, {"file": "/job/train.py", "line": 90, "function": "main"}}})
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{".identity.json": id, ".exceptions.jsonl": append(rec, '\n')} {
			if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		pids = append(pids, pid)
	}
	return pids
}
