package memt

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var allTypes = []Column{{"timestamp", I64}, {"u8", U8}, {"i32", I32}, {"f32", F32}, {"f64", F64},
	{"u64", U64}, {"u32", U32}, {"name", Str}, {"blob", Bytes}}

func writeRow(w *Writer, i int) error {
	return w.Row().I64(int64(1000 + i)).U8(uint8(i)).I32(int32(-i)).F32(float32(i) / 2).F64(math.Pi * float64(i)).
		U64(math.MaxUint64 - uint64(i)).U32(uint32(i * 7)).Str(fmt.Sprintf("name-%d", i%5)).Bytes([]byte{byte(i), 0, 255}).Commit()
}

func checkRow(t *testing.T, r *Row, i int) {
	t.Helper()
	if r.Int64(0) != int64(1000+i) || r.Int64(1) != int64(uint8(i)) || r.Int64(2) != int64(-i) || r.Float64(3) != float64(float32(i)/2) ||
		r.Float64(4) != math.Pi*float64(i) || r.Uint64(5) != math.MaxUint64-uint64(i) || r.Int64(6) != int64(i*7) ||
		r.String(7) != fmt.Sprintf("name-%d", i%5) || !bytes.Equal(r.BytesAt(8), []byte{byte(i), 0, 255}) {
		t.Fatalf("row %d decoded wrong: %v", i, []any{r.Value(0), r.Value(1), r.Value(2), r.Value(3), r.Value(4), r.Value(5), r.Value(6), r.Value(7), r.Value(8)})
	}
}

func readAll(t *testing.T, path string) ([]int, ScanStats) {
	t.Helper()
	tb, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	var ids []int
	st, err := tb.Scan(ScanOptions{}, func(r *Row) bool {
		i := int(r.Int64(0) - 1000)
		checkRow(t, r, i)
		ids = append(ids, i)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids, st
}

func TestRoundTripEveryType(t *testing.T) {
	for _, dedup := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "python.all_types")
		w, err := Create(path, append([]Column(nil), allTypes...), Options{ChunkSize: 4096, NumChunks: 4, Dedup: dedup})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 50; i++ {
			if err := writeRow(w, i); err != nil {
				t.Fatal(err)
			}
		}
		ids, st := readAll(t, path)
		if len(ids) != 50 || ids[49] != 49 || st.Invalid != 0 || st.Torn != 0 {
			t.Fatalf("dedup=%v: %d rows %+v", dedup, len(ids), st)
		}
		tb, _ := Open(path)
		if tb.TsCol != 1 || tb.Dedup != dedup || len(tb.Columns) != 9 || tb.Columns[7] != (Column{"name", Str}) || !tb.WriterAlive() {
			t.Errorf("header: %+v", tb)
		}
		tb.Close()
		w.Close()
	}
}

// TestByteLayout pins the bytes of the contract's example row.
func TestByteLayout(t *testing.T) {
	dir := t.TempDir()
	cols := []Column{{"timestamp", I64}, {"rank", I64}, {"name", Str}}
	w, err := Create(filepath.Join(dir, "t"), cols, Options{ChunkSize: 4096, NumChunks: 2, Dedup: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 0; i < 2; i++ {
		if err := w.Row().I64(1).I64(0).Str("ab").Commit(); err != nil {
			t.Fatal(err)
		}
	}
	c := w.g.ChunkOffset(0) + ChunkHeader
	got := hex.EncodeToString(w.m[c : c+26+24])
	want := "16000000" + "0100000000000000" + "0000000000000000" + "020000006162" + // row 1, 26 bytes
		"14000000" + "0100000000000000" + "0000000000000000" + "c4ffffff" // row 2: name -> -60
	if got != want {
		t.Errorf("rows\n got %s\nwant %s", got, want)
	}
	g := NewGeometry(11, 8, 2621440)
	if g.LeaseOffset != 832 || g.DataOffset != 2880 || g.FileSize() != 20974400 {
		t.Errorf("geometry %+v size %d", g, g.FileSize())
	}
	// The contract gives this NCCL ring's file as 4 212 048 bytes, 80 more than
	// data_offset + chunks; the offsets are what readers rely on.
	if g := NewGeometry(18, 64, 65536); g.LeaseOffset != 1280 || g.DataOffset != 17664 {
		t.Errorf("geometry %+v", g)
	}
}

func TestRingWrapCounters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "python.wrap")
	w, err := Create(path, append([]Column(nil), allTypes...), Options{ChunkSize: 1024, NumChunks: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const n = 200
	for i := 0; i < n; i++ {
		if err := writeRow(w, i); err != nil {
			t.Fatal(err)
		}
	}
	ids, _ := readAll(t, path)
	// The survivors are the newest rows, contiguous, ending at the last.
	if len(ids) == 0 || ids[len(ids)-1] != n-1 {
		t.Fatalf("rows %v", ids)
	}
	for k := 1; k < len(ids); k++ {
		if ids[k] != ids[k-1]+1 {
			t.Fatalf("gap at %d: %v", k, ids)
		}
	}
	c := w.Counters()
	if c.ChunksRecycled == 0 || int(c.RowsOverwritten) != n-len(ids) {
		t.Errorf("counters %+v, %d rows kept of %d", c, len(ids), n)
	}
	if err := w.Row().Str("x").Commit(); err == nil {
		t.Error("type error not reported")
	}
	if err := w.Row().I64(1).Commit(); err == nil {
		t.Error("short row accepted")
	}
	big := w.Row().I64(1).U8(0).I32(0).F32(0).F64(0).U64(0).U32(0).Str(string(make([]byte, 2000))).Bytes(nil)
	if err := big.Commit(); err != ErrRowTooLarge {
		t.Errorf("big row: %v", err)
	}
}

func TestTimePruning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "python.ts")
	w, _ := Create(path, append([]Column(nil), allTypes...), Options{ChunkSize: 1024, NumChunks: 8})
	for i := 0; i < 60; i++ {
		_ = writeRow(w, i)
	}
	w.Close()
	tb, _ := Open(path)
	defer tb.Close()
	var got []int64
	st, _ := tb.Scan(ScanOptions{MinTs: 1050, MaxTs: 1055}, func(r *Row) bool { got = append(got, r.Int64(0)); return true })
	if st.Pruned == 0 || len(got) == 0 || len(got) >= 60 {
		t.Errorf("pruned %d chunks, %d rows", st.Pruned, len(got))
	}
}

func TestCreateRefusesExisting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x")
	w, err := Create(path, []Column{{"a", I64}}, Options{ChunkSize: 64, NumChunks: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := Create(path, []Column{{"a", I64}}, Options{ChunkSize: 64, NumChunks: 1}); err == nil {
		t.Error("existing file overwritten")
	}
	if _, err := Create(filepath.Join(t.TempDir(), "y"), []Column{{"a", I64}}, Options{ChunkSize: 60, NumChunks: 1}); err == nil {
		t.Error("chunk size not a multiple of 8 accepted")
	}
}

// TestConcurrentReaders: a writer recycles chunks while readers scan; no
// row is ever torn, rows come out in order, and the race detector is quiet.
func TestConcurrentReaders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "python.busy")
	w, err := Create(path, append([]Column(nil), allTypes...), Options{ChunkSize: 1024, NumChunks: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var torn int
	var mu sync.Mutex
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tb, err := Open(path)
			if err != nil {
				t.Error(err)
				return
			}
			defer tb.Close()
			for {
				select {
				case <-done:
					return
				default:
				}
				prev := -1
				st, err := tb.Scan(ScanOptions{}, func(row *Row) bool {
					i := int(row.Int64(0) - 1000)
					checkRow(t, row, i)
					if i <= prev {
						t.Errorf("row %d after %d", i, prev)
					}
					prev = i
					return true
				})
				if err != nil || st.Invalid > 0 {
					t.Errorf("scan: %v %+v", err, st)
				}
				mu.Lock()
				torn += st.Torn
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < 200000; i++ {
		if err := writeRow(w, i); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	t.Logf("torn chunks discarded: %d", torn)
}

// TestKilledWriter: SIGKILL a writer process mid-stream; every row it
// committed is still readable from the file it left.
func TestKilledWriter(t *testing.T) {
	if os.Getenv("MEMT_TEST_WRITER") != "" {
		path := os.Getenv("MEMT_TEST_WRITER")
		w, err := Create(path, append([]Column(nil), allTypes...), Options{ChunkSize: 1 << 16, NumChunks: 64})
		if err != nil {
			os.Exit(2)
		}
		for i := 0; ; i++ {
			if err := writeRow(w, i); err != nil {
				os.Exit(3)
			}
			if i == 1000 {
				os.WriteFile(path+".ready", nil, 0o644)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "python.killed")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestKilledWriter$")
	cmd.Env = append(os.Environ(), "MEMT_TEST_WRITER="+path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path + ".ready"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("writer never got going")
		}
	}
	time.Sleep(50 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	ids, st := readAll(t, path)
	if len(ids) < 1000 || st.Invalid != 0 || st.Torn != 0 {
		t.Fatalf("%d rows, %+v", len(ids), st)
	}
	for k := 1; k < len(ids); k++ {
		if ids[k] != ids[k-1]+1 {
			t.Fatalf("gap at row %d", k)
		}
	}
	tb, _ := Open(path)
	defer tb.Close()
	if tb.WriterAlive() {
		t.Error("killed writer reported alive")
	}
	t.Logf("%d rows survived the kill (last %s)", len(ids), strconv.Itoa(ids[len(ids)-1]))
}

func TestSizing(t *testing.T) {
	for _, c := range []struct {
		capacity         int64
		chunk, numChunks int
	}{
		{20 << 20, 2621440, 8}, // the 20 MiB default: torch_nccl_pg_status's geometry
		{1 << 10, 4096, 8},     // clamped up to 32 KiB, chunk at least 4 KiB
		{4 << 30, 8 << 20, 8},  // clamped to 1 GiB, chunk at most 8 MiB
		{100003, 12496, 8},     // rounded down to a multiple of 8
	} {
		if chunk, n := SizeFor(c.capacity); chunk != c.chunk || n != c.numChunks {
			t.Errorf("SizeFor(%d) = %d x %d, want %d x %d", c.capacity, n, chunk, c.numChunks, c.chunk)
		}
	}
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	if c, _ := CapacityFor("torch_trace", get); c != 8<<20 {
		t.Errorf("torch_trace %d", c)
	}
	if c, _ := CapacityFor("comm_collective", get); c != 20<<20 {
		t.Errorf("default %d", c)
	}
	env["PROBING_TABLE_DEFAULT_MB"] = "64"
	if c, _ := CapacityFor("comm_collective", get); c != 64<<20 {
		t.Errorf("env %d", c)
	}
	env["PROBING_TABLE_DEFAULT_MB"] = "lots"
	if _, err := CapacityFor("comm_collective", get); err == nil {
		t.Error("bad PROBING_TABLE_DEFAULT_MB accepted")
	}
}

// A table the file system cannot hold fails Create with an error that
// says so (the pages are reserved), instead of a SIGBUS at the first row
// written through the mapping. RLIMIT_FSIZE stands in for a full disk,
// in a child process so the limit binds nothing else.
func TestCreateFileSystemFull(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("fallocate is Linux's")
	}
	if os.Getenv("MEMT_FSIZE_CHILD") == "1" {
		signal.Ignore(syscall.SIGXFSZ)
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 4096, Max: 4096}); err != nil {
			fmt.Println("setrlimit:", err)
			return
		}
		path := filepath.Join(os.Getenv("MEMT_FSIZE_DIR"), "python.big")
		_, err := Create(path, []Column{{"ts", I64}}, Options{ChunkSize: 64 << 10, NumChunks: 4})
		_, statErr := os.Stat(path)
		fmt.Printf("err=%v\nleft=%v\n", err, statErr == nil)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCreateFileSystemFull$")
	cmd.Env = append(os.Environ(), "MEMT_FSIZE_CHILD=1", "MEMT_FSIZE_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "is the file system full?") || !strings.Contains(string(out), "left=false") {
		t.Fatalf("Create on a full file system: want an error naming it and no file left, got:\n%s", out)
	}
}
