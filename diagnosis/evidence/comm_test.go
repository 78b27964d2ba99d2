package evidence

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/probing-mcp/probing-mcp/storage/memt"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// comm writes rank r's python.comm_collective ring into a pid directory
// of its own (a dead pid: the post-mortem shape), with an identity file
// naming its rank.
func comm(t *testing.T, base string, pid, r, rows int) {
	t.Helper()
	dir := filepath.Join(base, fmt.Sprint(pid))
	cols := []memt.Column{{Name: "timestamp", Type: memt.I64}, {Name: "op", Type: memt.Str}, {Name: "participate_ranks", Type: memt.Str},
		{Name: "group_seq", Type: memt.I64}, {Name: "duration_ms", Type: memt.F64}}
	w, err := memt.Create(filepath.Join(dir, "python.comm_collective"), cols, memt.Options{ChunkSize: 65536, NumChunks: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 1; i <= rows; i++ {
		dur := 1.5
		if i == rows {
			dur = -1
		}
		if err := w.Row().I64(int64(i * 1000)).Str("all_reduce").Str("[0, 1]").I64(int64(i)).F64(dur).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".identity.json"), []byte(fmt.Sprintf(`{"agent":"probing-mcp","pid":%d,"rank":%d,"world_size":2}`, pid, r)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadComm: each rank's last rows, oldest first, in pages, from the
// rings as the engine serves them; no table is no rows.
func TestReadComm(t *testing.T) {
	base := t.TempDir()
	e, err := sqlengine.New(sqlengine.Options{DataDir: base})
	if err != nil {
		t.Fatal(err)
	}
	if rows, err := ReadComm(context.Background(), e, 8); err != nil || rows != nil {
		t.Fatalf("no table: %v %v", rows, err)
	}
	comm(t, base, 999991, 0, 30)
	comm(t, base, 999992, 1, 1500)
	rows, err := ReadComm(context.Background(), e, 1200)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 30+1200 {
		t.Fatalf("%d rows", len(rows))
	}
	last := rows[len(rows)-1]
	if rows[0].Rank != 0 || rows[0].GroupSeq != 1 || last.Rank != 1 || last.GroupSeq != 1500 || last.DurationMS != -1 || last.Ranks != "[0, 1]" || rows[30].GroupSeq != 301 {
		t.Errorf("first %+v, rank 1's first %+v, last %+v", rows[0], rows[30], last)
	}
}

// TestReadActivity: the last collective entered and the last one that
// returned, per rank; no step table, no steps.
func TestReadActivity(t *testing.T) {
	base := t.TempDir()
	e, err := sqlengine.New(sqlengine.Options{DataDir: base})
	if err != nil {
		t.Fatal(err)
	}
	if acts, err := ReadActivity(context.Background(), e, 5); err != nil || len(acts) != 0 {
		t.Fatalf("empty data dir: %v %v", acts, err)
	}
	comm(t, base, 999991, 0, 30)
	acts, err := ReadActivity(context.Background(), e, 5)
	if err != nil {
		t.Fatal(err)
	}
	a := acts[0]
	if len(acts) != 1 || a.LastComm != 30000 || a.LastCommDone != 29000+1500 || a.Steps != nil {
		t.Errorf("%+v", a)
	}
}

// TestReadCommTensors: rings with the tensor columns give each call's
// shape, dtype and bytes.
func TestReadCommTensors(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "999993")
	cols := []memt.Column{{Name: "timestamp", Type: memt.I64}, {Name: "op", Type: memt.Str}, {Name: "participate_ranks", Type: memt.Str},
		{Name: "tensor_shape", Type: memt.Str}, {Name: "tensor_dtype", Type: memt.Str}, {Name: "bytes", Type: memt.I64},
		{Name: "duration_ms", Type: memt.F64}, {Name: "group_seq", Type: memt.I64}}
	w, err := memt.Create(filepath.Join(dir, "python.comm_collective"), cols, memt.Options{ChunkSize: 65536, NumChunks: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Row().I64(1000).Str("all_reduce").Str("[0, 1]").Str("(4, 3)").Str("torch.float32").I64(48).F64(-1).I64(7).Commit(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := os.WriteFile(filepath.Join(dir, ".identity.json"), []byte(`{"agent":"probing-mcp","pid":999993,"rank":1,"world_size":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := sqlengine.New(sqlengine.Options{DataDir: base})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ReadComm(context.Background(), e, 8)
	if err != nil || len(rows) != 1 {
		t.Fatalf("%v %v", rows, err)
	}
	if r := rows[0]; r.Rank != 1 || r.Shape != "(4, 3)" || r.Dtype != "torch.float32" || r.Bytes != 48 || r.GroupSeq != 7 || r.DurationMS != -1 {
		t.Errorf("%+v", r)
	}
}

func TestCommRowJSONWithoutPeerIsNoPeer(t *testing.T) {
	var rows []CommRow
	if err := json.Unmarshal([]byte(`[{"Rank":3,"Op":"recv","GroupSeq":2},{"Rank":3,"Op":"recv","GroupSeq":3,"Peer":0}]`), &rows); err != nil {
		t.Fatal(err)
	}
	if rows[0].Peer != -1 || rows[0].P2PPeer() != -1 {
		t.Errorf("a row without a peer reads peer %d (P2PPeer %d), want -1", rows[0].Peer, rows[0].P2PPeer())
	}
	if rows[1].P2PPeer() != 0 {
		t.Errorf("a receive from rank 0 reads peer %d", rows[1].P2PPeer())
	}
	if (CommRow{Rank: 0, Op: "send"}).P2PPeer() != -1 || (CommRow{Rank: 1, Op: "all_reduce", Peer: 0}).P2PPeer() != -1 {
		t.Error("a self-send or a collective has a peer")
	}
}

// TestReadCommPeer: a new agent's ring gives each point-to-point call's
// peer; an older agent's ring beside it (no peer column) gives none, not
// rank 0.
func TestReadCommPeer(t *testing.T) {
	base := t.TempDir()
	write := func(pid, rank int, peer bool) {
		dir := filepath.Join(base, fmt.Sprint(pid))
		cols := []memt.Column{{Name: "timestamp", Type: memt.I64}, {Name: "op", Type: memt.Str}, {Name: "participate_ranks", Type: memt.Str},
			{Name: "tensor_shape", Type: memt.Str}, {Name: "tensor_dtype", Type: memt.Str}, {Name: "bytes", Type: memt.I64},
			{Name: "duration_ms", Type: memt.F64}, {Name: "group_seq", Type: memt.I64}}
		if peer {
			cols = append(cols, memt.Column{Name: "peer", Type: memt.I64})
		}
		w, err := memt.Create(filepath.Join(dir, "python.comm_collective"), cols, memt.Options{ChunkSize: 65536, NumChunks: 2})
		if err != nil {
			t.Fatal(err)
		}
		row := w.Row().I64(1000).Str("recv").Str("[0, 1, 2]").Str("(4,)").Str("torch.float32").I64(16).F64(-1).I64(3)
		if peer {
			row = row.I64(2)
		}
		if err := row.Commit(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		if err := os.WriteFile(filepath.Join(dir, ".identity.json"), []byte(fmt.Sprintf(`{"agent":"probing-mcp","pid":%d,"rank":%d,"world_size":3}`, pid, rank)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(999994, 1, true)
	write(999995, 0, false)
	e, err := sqlengine.New(sqlengine.Options{DataDir: base})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ReadComm(context.Background(), e, 8)
	if err != nil || len(rows) != 2 {
		t.Fatalf("%v %v", rows, err)
	}
	if rows[0].Rank != 0 || rows[0].Peer != -1 || rows[1].Rank != 1 || rows[1].Peer != 2 || rows[1].Bytes != 16 {
		t.Errorf("%+v", rows)
	}
}
