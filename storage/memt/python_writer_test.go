package memt

// Interop with the Python agent's MEMT writer
// (agent/python/probing_mcp_agent/memt.py): a python3 process writes rings
// with every dtype, with and without dedup, rings that wrap, and a ring
// that a Go reader scans while Python appends to it. This package's reader
// must read back every value bit for bit. Skipped when python3 is missing.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pyWriterScript imports memt.py, given by path, through its package (it
// imports the format from memtfmt.py beside it; importing the package
// activates nothing), the copy at that path even where an installed agent
// was imported at start-up, and runs one mode. Every value it reports is a
// string: integers in decimal, floats as the hex of their IEEE bits, Str
// as is, Bytes as hex, so that nothing is lost in JSON.
const pyWriterScript = `
import json, math, os, struct, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(sys.argv[1])))
for _m in [m for m in sys.modules if m.split(".")[0] == "probing_mcp_agent"]:
    del sys.modules[_m]
from probing_mcp_agent import memt
assert os.path.samefile(memt.__file__, sys.argv[1]), memt.__file__
mode, out = sys.argv[2], sys.argv[3]

ALL = [("timestamp", "I64"), ("u8", "U8"), ("i32", "I32"), ("i64", "I64"), ("f32", "F32"),
       ("f64", "F64"), ("u64", "U64"), ("u32", "U32"), ("s", "Str"), ("b", "Bytes")]

def cell(d, v):
    if d == memt.F32:
        return "%08x" % struct.unpack("<I", struct.pack("<f", v))[0]
    if d == memt.F64:
        return "%016x" % struct.unpack("<Q", struct.pack("<d", v))[0]
    if d == memt.STR:
        return v.decode("utf-8") if isinstance(v, bytes) else v
    if d == memt.BYTES:
        return bytes(v).hex()
    return str(v)

def expected(w, vals):
    return [cell(d, memt.coerce(d, v)) for d, v in zip(w.dtypes, vals)]

def edge_rows():
    nan = float("nan")
    rows = [
        (1, 0, 0, 0, 0.0, 0.0, 0, 0, "", b""),
        (2, 255, -2**31, -2**63, -0.0, -0.0, 2**64 - 1, 2**32 - 1, "h\u00e9llo \u4e16\u754c \U0001F600", b"\x00\xff\x00"),
        (3, True, 2**31 - 1, 2**63 - 1, float("inf"), float("-inf"), 2**63, 2**31, "x" * 300, bytes(range(256))),
        (4, False, 7, -1, 3.4028234663852886e38, 5e-324, 1, 1, "tab\tnl\nquote\"", b"zz"),
        (5, 1, -7, 12345678901234, 1.17549435e-38, 1.5, 42, 42, "same", b"same"),
        (6, 2, 8, 9, 2.5, nan, 43, 43, "same", b"same"),
        (7, 3, 9, 10, -2.5, math.pi, 44, 44, "other", b"same"),
        (8, 4, 10, 11, 1e-45, -1e308, 45, 45, "same", b"other"),
        # values the writer must coerce: None, a float in an int column,
        # an int in a float column, a non-str in a Str column, overflow
        (9, None, 3.9, None, 2, None, -5, 2**40, None, None),
        (10, 300, 2**40, 2**70, 1e300, "1.25", None, -1, 12345, "as text"),
    ]
    return rows

tables = []

def table(name, cols, chunk, chunks, dedup, rows):
    path = os.path.join(out, name)
    w = memt.Writer(path, cols, chunk, chunks, dedup=dedup)
    exp, status = [], []
    for r in rows:
        st = w.append(r)
        status.append(st)
        if st == memt.OK:
            exp.append(expected(w, r))
    c = w.counters()
    tables.append({"file": name, "columns": [[n, d] for n, d in w.columns], "rows": exp,
                   "status": status, "counters": c, "dedup": dedup,
                   "chunk_size": chunk, "num_chunks": chunks})
    w.close()

if mode == "write":
    table("python.every", ALL, 4096, 4, False, edge_rows())
    table("python.every_dedup", ALL, 4096, 4, True, edge_rows() * 3)
    wrap = [(i, i % 256, -i, i * 3, i / 4.0, i * 0.1, i * 7, i, "row %d %s" % (i, "ab" * (i % 9)),
             struct.pack("<I", i)) for i in range(1, 601)]
    table("python.wrap", ALL, 512, 4, False, wrap)
    table("python.wrap_dedup", ALL, 512, 4, True,
          [(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], "rep %d" % (r[0] % 3), b"k" * (r[0] % 4)) for r in wrap])
    # one chunk: every advance recycles the chunk being written
    table("python.one_chunk", [("ts", "I64"), ("v", "Str")], 128, 1, False,
          [(i, "v%03d" % i) for i in range(40)])
    # a row larger than a chunk is refused, the next one is kept
    table("python.too_large", [("timestamp", "I64"), ("v", "Str")], 128, 2, False,
          [(1, "a"), (2, "b" * 200), (3, "c")])
    # no timestamp column, name longer than 54 bytes (cut), dedup of the
    # same bytes in two columns (per-column maps)
    table("memtable_like", [("x" * 60, "I64"), ("p", "Str"), ("q", "Str")], 1024, 2, True,
          [(i, "same", "same") for i in range(30)])
    json.dump({"tables": tables}, sys.stdout)
elif mode in ("stream", "stream_batch"):
    n, path = int(sys.argv[4]), os.path.join(out, "python.stream")
    w = memt.Writer(path, [("timestamp", "I64"), ("seq", "I64"), ("name", "Str"), ("val", "F64")], 2048, 4)
    open(os.path.join(out, "ready"), "w").close()
    row = lambda i: (1000 + i, i, "n%d" % i + "x" * (i % 23), i * 0.5)
    if mode == "stream":
        for i in range(n):
            w.append(row(i))
    else:  # what the agent's flusher does: batches of rows, one publish per chunk
        for i in range(0, n, 37):
            w.append_batch([row(j) for j in range(i, min(n, i + 37))])
    print(json.dumps(w.counters()))
    w.close()
`

// pythonForWriter finds python3 and the writer module, or skips.
func pythonForWriter(t *testing.T) (python, module string) {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the Python MEMT writer cannot be exercised")
	}
	module, _ = filepath.Abs("../../agent/python/probing_mcp_agent/memt.py")
	if _, err := os.Stat(module); err != nil {
		t.Skipf("%s missing", module)
	}
	return python, module
}

type pyTable struct {
	File      string     `json:"file"`
	Columns   [][]any    `json:"columns"`
	Rows      [][]string `json:"rows"`
	Status    []int      `json:"status"`
	Counters  Counters   `json:"counters"`
	Dedup     bool       `json:"dedup"`
	ChunkSize int        `json:"chunk_size"`
	NumChunks int        `json:"num_chunks"`
}

// pyCell renders a value read by the Go reader as the Python side does.
func pyCell(r *Row, i int) string {
	switch v := r.Value(i).(type) {
	case float32:
		return fmt.Sprintf("%08x", math.Float32bits(v))
	case float64:
		return fmt.Sprintf("%016x", math.Float64bits(v))
	case []byte:
		return hex.EncodeToString(v)
	case string:
		return v
	case uint64:
		return strconv.FormatUint(v, 10)
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return fmt.Sprint(r.Value(i))
}

func readPyRows(t *testing.T, path string) ([][]string, ScanStats, *Table) {
	t.Helper()
	tb, err := Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	var rows [][]string
	st, err := tb.Scan(ScanOptions{}, func(r *Row) bool {
		row := make([]string, len(tb.Columns))
		for i := range row {
			row[i] = pyCell(r, i)
		}
		rows = append(rows, row)
		return true
	})
	if err != nil {
		t.Fatalf("scan %s: %v", path, err)
	}
	return rows, st, tb
}

func TestPythonWriterInterop(t *testing.T) {
	python, module := pythonForWriter(t)
	dir := t.TempDir()
	cmd := exec.Command(python, "-c", pyWriterScript, module, "write", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python writer: %v\n%s", err, stderr.String())
	}
	var res struct {
		Tables []pyTable `json:"tables"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("python output: %v\n%s", err, out)
	}
	if len(res.Tables) != 7 {
		t.Fatalf("python wrote %d tables, want 7", len(res.Tables))
	}
	for _, pt := range res.Tables {
		t.Run(pt.File, func(t *testing.T) {
			path := filepath.Join(dir, pt.File)
			rows, st, tb := readPyRows(t, path)
			defer tb.Close()
			// Header and descriptors.
			if tb.Version != Version || tb.Dedup != pt.Dedup || tb.Geometry.ChunkSize != pt.ChunkSize || tb.Geometry.NumChunks != pt.NumChunks {
				t.Errorf("header: version %d dedup %v geometry %+v", tb.Version, tb.Dedup, tb.Geometry)
			}
			if len(tb.Columns) != len(pt.Columns) {
				t.Fatalf("%d columns, python wrote %d", len(tb.Columns), len(pt.Columns))
			}
			for i, c := range pt.Columns {
				if tb.Columns[i].Name != c[0].(string) || int(tb.Columns[i].Type) != int(c[1].(float64)) {
					t.Errorf("column %d: %s %s, python %v", i, tb.Columns[i].Name, tb.Columns[i].Type, c)
				}
			}
			wantTs := 0
			for i, c := range tb.Columns {
				if c.Type == I64 && (c.Name == "timestamp" || c.Name == "ts") {
					wantTs = i + 1
					break
				}
			}
			if tb.TsCol != wantTs {
				t.Errorf("ts_col %d, want %d", tb.TsCol, wantTs)
			}
			if tb.CreatorPID <= 0 || tb.CreatorStart == 0 || tb.InstanceID == 0 {
				t.Errorf("creator pid %d start %d instance %#x", tb.CreatorPID, tb.CreatorStart, tb.InstanceID)
			}
			if tb.WriterAlive() {
				t.Errorf("the python writer exited but the table says it is alive")
			}
			if st.Invalid != 0 || st.Torn != 0 || st.BadUTF8 != 0 {
				t.Errorf("scan stats %+v", st)
			}
			c := tb.Counters()
			if c != pt.Counters {
				t.Errorf("counters %+v, python says %+v", c, pt.Counters)
			}
			// Rows: all of them, or (for a ring that wrapped) the newest,
			// with every lost row counted in rows_overwritten.
			want := pt.Rows
			if int(c.RowsOverwritten) > 0 {
				if int(c.RowsOverwritten)+len(rows) != len(want) {
					t.Errorf("%d rows read + %d overwritten != %d written", len(rows), c.RowsOverwritten, len(want))
				}
				if len(rows) > len(want) {
					t.Fatalf("read %d rows, only %d written", len(rows), len(want))
				}
				want = want[len(want)-len(rows):]
				if c.ChunksRecycled == 0 {
					t.Errorf("rows overwritten but no chunk recycled")
				}
			}
			if len(rows) != len(want) {
				t.Fatalf("read %d rows, want %d", len(rows), len(want))
			}
			for i := range want {
				for j := range want[i] {
					if rows[i][j] != want[i][j] {
						t.Errorf("row %d column %s: go %q, python %q", i, tb.Columns[j].Name, rows[i][j], want[i][j])
					}
				}
			}
			// Ring files end up exactly the size the layout gives.
			if fi, err := os.Stat(path); err != nil || fi.Size() != int64(tb.Geometry.FileSize()) {
				t.Errorf("file size %v, layout %d", fi, tb.Geometry.FileSize())
			}
			switch pt.File {
			case "python.every_dedup", "memtable_like", "python.wrap_dedup":
				// dedup must have produced back-references: the stored
				// chunk is smaller than the same rows written literally.
				if !hasBackRef(t, path, tb) {
					t.Errorf("no dedup back-reference found in %s", pt.File)
				}
			case "python.too_large":
				if fmt.Sprint(pt.Status) != "[0 2 0]" {
					t.Errorf("statuses %v, want [0 2 0] (OK, ROW_TOO_LARGE, OK)", pt.Status)
				}
			case "python.wrap", "python.one_chunk":
				if c.ChunksRecycled == 0 {
					t.Errorf("%s did not wrap", pt.File)
				}
			}
		})
	}
}

// hasBackRef walks the raw chunks for a negative Str/Bytes length.
func hasBackRef(t *testing.T, path string, tb *Table) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g := tb.Geometry
	for i := 0; i < g.NumChunks; i++ {
		c := g.ChunkOffset(i)
		used := int(le.Uint32(b[c+chUsed:]))
		p := c + ChunkHeader
		for p < c+ChunkHeader+used {
			n := int(le.Uint32(b[p:]))
			q := p + 4
			for _, col := range tb.Columns {
				if sz := col.Type.Size(); sz > 0 {
					q += sz
					continue
				}
				l := int32(le.Uint32(b[q:]))
				if l < 0 {
					return true
				}
				q += 4 + int(l)
			}
			p += 4 + n
		}
	}
	return false
}

// TestPythonWriterConcurrentRead scans a ring again and again while a
// Python process appends to it (row by row, and in batches as the agent's
// flusher does) and wraps it many times: every row read must be intact
// (its content follows from its seq), in order, and no chunk may fail to
// parse.
func TestPythonWriterConcurrentRead(t *testing.T) {
	for _, mode := range []string{"stream", "stream_batch"} {
		t.Run(mode, func(t *testing.T) { concurrentRead(t, mode) })
	}
}

func concurrentRead(t *testing.T, mode string) {
	python, module := pythonForWriter(t)
	dir := t.TempDir()
	const n = 300000
	cmd := exec.Command(python, "-c", pyWriterScript, module, mode, dir, strconv.Itoa(n))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("python exited before writing: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("python writer never became ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	path := filepath.Join(dir, "python.stream")
	var scans, rowsSeen, torn int
	var finished bool
	var werr error
	for !finished {
		select {
		case werr = <-done:
			finished = true
		default:
		}
		tb, err := Open(path)
		if err != nil {
			t.Fatalf("open while writing: %v", err)
		}
		last := int64(-1)
		st, err := tb.Scan(ScanOptions{}, func(r *Row) bool {
			seq := r.Int64(1)
			if r.Int64(0) != 1000+seq {
				t.Errorf("seq %d: timestamp %d", seq, r.Int64(0))
			}
			wantName := fmt.Sprintf("n%d", seq) + strings.Repeat("x", int(seq%23))
			if r.String(2) != wantName || r.Float64(3) != float64(seq)*0.5 {
				t.Errorf("seq %d: torn row %q %v", seq, r.String(2), r.Float64(3))
			}
			if seq <= last {
				t.Errorf("rows out of order: %d after %d", seq, last)
			}
			last = seq
			rowsSeen++
			return true
		})
		tb.Close()
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		// x86-64 is TSO: a Python writer's stores are seen in order, so
		// no chunk may fail to walk. (Weaker CPUs may see chunks_invalid;
		// see memt.py.)
		if st.Invalid != 0 && runtime.GOARCH == "amd64" {
			t.Errorf("scan %d: %d invalid chunks", scans, st.Invalid)
		}
		torn += st.Torn
		scans++
		if t.Failed() {
			cmd.Process.Kill()
			break
		}
	}
	if werr != nil {
		t.Fatalf("python writer: %v\n%s", werr, stderr.String())
	}
	var ctr Counters
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &ctr); err != nil {
		t.Fatalf("counters: %v (%q)", err, stdout.String())
	}
	tb, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	var final int
	tb.Scan(ScanOptions{}, func(*Row) bool { final++; return true })
	if final+int(ctr.RowsOverwritten) != n {
		t.Errorf("final rows %d + overwritten %d != %d written", final, ctr.RowsOverwritten, n)
	}
	t.Logf("%d scans during the write saw %d rows (%d chunks discarded as torn); ring counters %+v", scans, rowsSeen, torn, ctr)
	if scans < 2 {
		t.Logf("only %d scans overlapped the writer", scans)
	}
}
