package evidence

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/agent"
	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/storage/memt"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

func ringCols(spec string) []memt.Column {
	types := map[string]memt.DType{"i64": memt.I64, "f64": memt.F64, "str": memt.Str}
	var cols []memt.Column
	for _, f := range strings.Fields(spec) {
		name, typ, _ := strings.Cut(f, ":")
		cols = append(cols, memt.Column{Name: name, Type: types[typ]})
	}
	return cols
}

// writeRing writes rows (plain Go values) to a ring file the way the
// agent's tables.py does, and closes it: its writer is gone.
func writeRing(t *testing.T, path, spec string, rows [][]any) {
	t.Helper()
	cols := ringCols(spec)
	w, err := memt.Create(path, cols, memt.Options{ChunkSize: 64 << 10, NumChunks: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		b := w.Row()
		for i, v := range r {
			switch cols[i].Type {
			case memt.I64:
				b = b.I64(int64(v.(int)))
			default:
				b = b.Str(v.(string))
			}
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
}

// fr.py's columns.
const (
	pgStatusSpec = "timestamp:i64 snapshot_id:i64 rank:i64 world_size:i64 pg_id:str pg_name:str pg_desc:str ranks:str last_enqueued_collective:i64 last_started_collective:i64 last_completed_collective:i64"
	frRecordSpec = "timestamp:i64 snapshot_id:i64 rank:i64 world_size:i64 record_id:i64 pg_id:str pg_name:str pg_desc:str collective_seq_id:i64 p2p_seq_id:i64 op_id:i64 profiling_name:str state:str input_sizes:str input_dtypes:str output_sizes:str output_dtypes:str time_created_ns:i64 time_discovered_started_ns:i64 time_discovered_completed_ns:i64 duration_ns:i64 timeout_ms:i64 retired:i64 is_p2p:i64 frames:str top_frame:str"
)

const deathNS = 1796558759_000000000

// deadTimeoutJob is a 3-rank gloo job as it is left when ranks 0 and 1
// died of all_reduce #4's timeout (each agent persisting a snapshot as
// it died; as torch 2.15's gloo records them: every entry "scheduled"
// and retired, the status saying #4 completed) and rank 2, which
// never entered #4, was killed without a record. Rank 1 also holds an
// older snapshot, taken on request while the job ran.
func deadTimeoutJob(t *testing.T, snapAt map[int]int64) string {
	dir := t.TempDir()
	for r := range 3 {
		pid := 3999301 + r
		d := filepath.Join(dir, fmt.Sprint(pid))
		os.Mkdir(d, 0o755)
		os.WriteFile(filepath.Join(d, ".identity.json"), fmt.Appendf(nil, `{"agent":"probing-mcp","agent_version":"0.2.0","pid":%d,"start_time":77,"rank":%d,"world_size":3,"local_rank":%d,"torch":"2.15.0"}`, pid, r, r), 0o644)
		if r == 2 {
			continue
		}
		rec, _ := json.Marshal(map[string]any{"v": 1, "kind": "exception", "time_ns": deathNS + r*1000, "pid": pid, "start_time": 77, "hook": "sys",
			"thread": map[string]any{"name": "MainThread", "is_main": true}, "type": "RuntimeError",
			"message": "[third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 6000ms for send operation to complete",
			"frames":  []map[string]any{{"file": "/torch/distributed/distributed_c10d.py", "line": 4181, "function": "all_reduce"}, {"file": "/job/train.py", "line": 11, "function": "<module>"}}})
		os.WriteFile(filepath.Join(d, ".exceptions.jsonl"), append(rec, '\n'), 0o644)
		snaps := []int{int(snapAt[r])}
		if r == 1 {
			snaps = []int{deathNS - 600e9, int(snapAt[r])}
		}
		var pgs, entries [][]any
		for _, s := range snaps {
			last := 4
			if s < deathNS-300e9 {
				last = 2
			}
			pgs = append(pgs, []any{s / 1000, s, r, 3, "0", "0", "default_pg", "[0, 1, 2]", last, -1, last})
			for seq := 1; seq <= last; seq++ {
				entries = append(entries, []any{s / 1000, s, r, 3, seq - 1, "0", "0", "default_pg", seq, -1, seq, "gloo:all_reduce", "scheduled",
					"[[4]]", `["Float"]`, "[[4]]", `["Float"]`, deathNS - 10e9 + seq, -1, -1, -1, 6000, 1, 0,
					`[{"name": "all_reduce", "filename": "/job/train.py", "line": 11}]`, "all_reduce (/job/train.py:11)"})
			}
		}
		writeRing(t, filepath.Join(d, "python.torch_nccl_pg_status"), pgStatusSpec, pgs)
		writeRing(t, filepath.Join(d, "python.torch_nccl_flight_record"), frRecordSpec, entries)
	}
	return dir
}

func gatherDead(t *testing.T, dir string) *Bundle {
	e, err := sqlengine.New(sqlengine.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return Gather(context.Background(), Options{Agents: agent.Options{DataDir: dir, CtrlRoot: t.TempDir()}, SQL: e})
}

// TestPersistedSnapshotsCount: the snapshots dead ranks persisted as they
// died of the timeout join the Flight Recorder analysis (the newest of
// each rank); one not taken as its rank died is left out, and the
// problem says where it is.
func TestPersistedSnapshotsCount(t *testing.T) {
	b := gatherDead(t, deadTimeoutJob(t, map[int]int64{0: deathNS + 200e6, 1: deathNS + 300e6}))
	if len(b.FRDumps) != 2 || b.FR == nil || len(b.Problems) != 0 {
		t.Fatalf("dumps %d, FR %v, problems %v", len(b.FRDumps), b.FR != nil, b.Problems)
	}
	if !strings.Contains(b.FRDumps[1].From, "python.torch_nccl_flight_record") || !strings.Contains(b.FRDumps[1].From, "3999302") {
		t.Errorf("from %q", b.FRDumps[1].From)
	}
	pg := b.FR.ProcessGroups[0]
	if pg.Finding.Kind != fr.KindInsufficient || pg.Finding.Seq != 4 || len(pg.MissingDumps) != 1 || pg.MissingDumps[0] != 2 {
		t.Errorf("finding %+v, missing dumps %v", pg.Finding, pg.MissingDumps)
	}

	// Rank 1's snapshot from 10 minutes after it died is not its death's.
	b = gatherDead(t, deadTimeoutJob(t, map[int]int64{0: deathNS + 200e6, 1: deathNS + 600e9}))
	if len(b.FRDumps) != 1 || b.FRDumps[0].Rank != 0 {
		t.Errorf("dumps %+v", b.FRDumps)
	}
	if len(b.Problems) != 1 || !strings.Contains(b.Problems[0], "rank 1's Flight Recorder snapshot") ||
		!strings.Contains(b.Problems[0], filepath.Join("3999302", "python.torch_nccl_flight_record")) || !strings.Contains(b.Problems[0], "not used") {
		t.Errorf("problems %v", b.Problems)
	}
}
