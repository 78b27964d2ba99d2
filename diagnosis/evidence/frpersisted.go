package evidence

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// A rank that dies of a collective's timeout has its agent persist a
// Flight Recorder snapshot into its rings (python.torch_nccl_flight_record
// and python.torch_nccl_pg_status, fr.py's watchdog hook): gloo writes no
// dump file, and a dead process answers no snapshot. persistedDumps turns
// each dead rank's snapshot back into a dump, so the recorder's view of a
// dead job counts like a live one.

// persistedWindow is how far from the rank's recorded end its snapshot
// may be: an older one (taken on request while the job ran) shows the rank
// behind where it died, which would blame it.
const persistedWindow = 2 * time.Minute

// maxPersistedEntries bounds the entries rebuilt of one snapshot (torch's
// buffer holds 2000 by the agent's default).
const maxPersistedEntries = 20000

// persistedFRVersion is the dump format the rebuilt JSON claims: the rows
// keep the fields of every version the analyzer reads.
const persistedFRVersion = "2.10"

type persistedSnap struct {
	pid  int
	rank int
	id   int64 // snapshot_id: its time, Unix ns
	pgs  []map[string]any
}

// persistedDumps reads the newest persisted snapshot of each dead rank in
// dead (those without a dump of their own) and rebuilds it as a JSON dump.
// A snapshot it cannot use is a problem that says where it is.
func persistedDumps(ctx context.Context, e *sqlengine.Engine, dataDir string, dead []*agent.Agent, endedNS map[int]int64, problem func(string, ...any)) []FRDump {
	if e == nil || len(dead) == 0 {
		return nil
	}
	byPID := map[int]*agent.Agent{}
	var pids []string
	for _, a := range dead {
		if a.Rank() >= 0 {
			byPID[a.PID] = a
			pids = append(pids, strconv.Itoa(a.PID))
		}
	}
	if len(pids) == 0 {
		return nil
	}
	snaps := map[int]*persistedSnap{}
	q := fmt.Sprintf(`SELECT _pid, snapshot_id, pg_id, pg_name, pg_desc, ranks, last_enqueued_collective,
       last_started_collective, last_completed_collective
FROM python.torch_nccl_pg_status WHERE _pid IN (%s)
  AND snapshot_id = (SELECT max(snapshot_id) FROM python.torch_nccl_pg_status p2 WHERE p2._pid = python.torch_nccl_pg_status._pid)
ORDER BY _pid, pg_id`, strings.Join(pids, ","))
	err := pages(ctx, e, q, func(v []any) {
		pid := int(jsonrow.Int(v[0]))
		a := byPID[pid]
		if a == nil {
			return
		}
		s := snaps[pid]
		if s == nil {
			s = &persistedSnap{pid: pid, rank: a.Rank(), id: jsonrow.Int(v[1])}
			snaps[pid] = s
		}
		if len(s.pgs) < 4096 {
			s.pgs = append(s.pgs, map[string]any{"pg_id": jsonrow.String(v[2]), "name": jsonrow.String(v[3]), "desc": jsonrow.String(v[4]), "ranks": jsonrow.String(v[5]),
				"last_enqueued_collective": jsonrow.Int(v[6]), "last_started_collective": jsonrow.Int(v[7]), "last_completed_collective": jsonrow.Int(v[8])})
		}
	})
	if err != nil {
		problem("the Flight Recorder snapshots persisted in the rings: %v", err)
		return nil
	}
	pidList := make([]int, 0, len(snaps))
	for pid := range snaps {
		pidList = append(pidList, pid)
	}
	sort.Ints(pidList)
	var out []FRDump
	for _, pid := range pidList {
		s := snaps[pid]
		where := fmt.Sprintf("snapshot %d persisted at %s in %s", s.id, time.Unix(0, s.id).UTC().Format("15:04:05"),
			filepath.Join(dataDir, strconv.Itoa(pid), "python.torch_nccl_flight_record"))
		end := endedNS[s.rank]
		switch {
		case end <= 0:
			problem("rank %d's Flight Recorder %s is not used: when the rank died is not recorded, so the snapshot may show it before it went on (query it: SELECT * FROM python.torch_nccl_flight_record WHERE _pid = %d AND snapshot_id = %d)", s.rank, where, pid, s.id)
			continue
		case s.id < end-int64(persistedWindow) || s.id > end+int64(persistedWindow):
			problem("rank %d's Flight Recorder %s is not used: taken %s from the rank's end, not as it died (query it: SELECT * FROM python.torch_nccl_flight_record WHERE _pid = %d AND snapshot_id = %d)", s.rank, where, ago(abs64(end-s.id)), pid, s.id)
			continue
		}
		b, err := persistedDump(ctx, e, s)
		if err != nil {
			problem("rank %d's Flight Recorder %s is not used: %v", s.rank, where, err)
			continue
		}
		out = append(out, FRDump{Rank: s.rank, From: "rank " + strconv.Itoa(s.rank) + "'s " + where, Data: b})
	}
	return out
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func ago(ns int64) string {
	return time.Duration(ns).Round(time.Second).String()
}

// persistedDump rebuilds one snapshot as torch's JSON dump: the groups'
// configuration from the status rows (the agent filled their ranks from
// the live process groups, since gloo's pg_config is unusable), their
// status, and the entries. The bytes then go through the dump decoder and
// its limits like any dump file: the rows are the job's.
func persistedDump(ctx context.Context, e *sqlengine.Engine, s *persistedSnap) ([]byte, error) {
	cfg := map[string]any{}
	status := map[string]any{}
	for _, pg := range s.pgs {
		id, name := pg["pg_id"].(string), pg["name"].(string)
		if name == "" {
			name = id
		}
		if r, _ := pg["ranks"].(string); r != "" {
			cfg[name] = map[string]any{"name": name, "desc": pg["desc"], "ranks": r}
		}
		status[id] = map[string]any{"last_enqueued_collective": pg["last_enqueued_collective"],
			"last_started_collective": pg["last_started_collective"], "last_completed_collective": pg["last_completed_collective"]}
	}
	if len(cfg) == 0 {
		return nil, fmt.Errorf("no process group's members were recorded")
	}
	var entries []json.RawMessage
	q := fmt.Sprintf(`SELECT record_id, pg_id, pg_name, pg_desc, collective_seq_id, p2p_seq_id, op_id, profiling_name, state,
       input_sizes, input_dtypes, output_sizes, output_dtypes, time_created_ns, time_discovered_started_ns,
       time_discovered_completed_ns, duration_ns, timeout_ms, retired, is_p2p, frames
FROM python.torch_nccl_flight_record WHERE _pid = %d AND snapshot_id = %d ORDER BY record_id`, s.pid, s.id)
	n := 0
	err := pages(ctx, e, q, func(v []any) {
		if n++; n > maxPersistedEntries {
			return
		}
		pgID, err := strconv.ParseInt(jsonrow.String(v[1]), 10, 64)
		if err != nil {
			pgID = -1 // the agent wrote the group's name for a missing id
		}
		ent := map[string]any{"record_id": jsonrow.Int(v[0]), "pg_id": pgID,
			"process_group":     []string{jsonrow.String(v[2]), jsonrow.String(v[3])},
			"collective_seq_id": jsonrow.Int(v[4]), "p2p_seq_id": jsonrow.Int(v[5]), "op_id": jsonrow.Int(v[6]),
			"profiling_name": jsonrow.String(v[7]), "state": jsonrow.String(v[8]),
			"time_created_ns": max(jsonrow.Int(v[13]), 0), "time_discovered_started_ns": max(jsonrow.Int(v[14]), 0),
			"time_discovered_completed_ns": max(jsonrow.Int(v[15]), 0), "timeout_ms": max(jsonrow.Int(v[17]), 0),
			"retired": jsonrow.Int(v[18]) != 0, "is_p2p": jsonrow.Int(v[19]) != 0}
		if d := jsonrow.Int(v[16]); d >= 0 {
			ent["duration_ms"] = float64(d) / 1e6
		}
		// The JSON columns as the agent wrote them, kept only when they
		// are JSON (the decoder checks their shapes).
		for i, k := range map[int]string{9: "input_sizes", 10: "input_dtypes", 11: "output_sizes", 12: "output_dtypes", 20: "frames"} {
			if raw := jsonrow.String(v[i]); raw != "" && json.Valid([]byte(raw)) {
				ent[k] = json.RawMessage(raw)
			}
		}
		b, err := json.Marshal(ent)
		if err == nil {
			entries = append(entries, b)
		}
	})
	if err != nil {
		return nil, err
	}
	if n > maxPersistedEntries {
		return nil, fmt.Errorf("%d entries, more than the %d read", n, maxPersistedEntries)
	}
	return json.Marshal(map[string]any{"version": persistedFRVersion, "pg_config": cfg, "pg_status": status, "entries": entries})
}
