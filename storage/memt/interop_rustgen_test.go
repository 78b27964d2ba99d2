package memt

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rustgen builds testdata/memt/rustgen once per test binary, offline.
var rustgen struct {
	once sync.Once
	bin  string
	skip string
	took time.Duration
}

func rustgenBinary(t *testing.T) string {
	t.Helper()
	rustgen.once.Do(func() {
		start := time.Now()
		defer func() { rustgen.took = time.Since(start) }()
		cargo, err := exec.LookPath("cargo")
		if err != nil {
			home, _ := os.UserHomeDir()
			if c := filepath.Join(home, ".cargo", "bin", "cargo"); home != "" && isFile(c) {
				cargo = c
			} else {
				rustgen.skip = fmt.Sprintf("cargo not found (%v): the probing-memtable interop tests need Rust", err)
				return
			}
		}
		manifest, err := filepath.Abs(filepath.Join(fixtureRoot, "rustgen", "Cargo.toml"))
		if err != nil {
			rustgen.skip = err.Error()
			return
		}
		target := os.Getenv("PROBING_RUSTGEN_TARGET_DIR")
		if target == "" {
			if c, err := os.UserCacheDir(); err == nil {
				target = filepath.Join(c, "probing-mcp", "rustgen-target")
			} else {
				target = filepath.Join(filepath.Dir(manifest), "target")
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, cargo, "build", "--offline", "--locked", "--quiet",
			"--manifest-path", manifest, "--target-dir", target)
		if out, err := cmd.CombinedOutput(); err != nil {
			rustgen.skip = fmt.Sprintf("`cargo build --offline --locked` of testdata/memt/rustgen failed, so probing-memtable %s "+
				"is not available offline here (fetch it once: `cargo fetch --manifest-path testdata/memt/rustgen/Cargo.toml`): %v: %s",
				crateVersion, err, lastLines(out, 6))
			return
		}
		rustgen.bin = filepath.Join(target, "debug", "rustgen")
	})
	if rustgen.skip != "" {
		t.Skip(rustgen.skip)
	}
	return rustgen.bin
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestProbingMemtableLive runs rustgen now: the crate writes fresh rings,
// which are checked while its process is alive and after it exits.
func TestProbingMemtableLive(t *testing.T) {
	bin := rustgenBinary(t)
	start := time.Now()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "write", dir, "--hold")
	stdout, stderr, release := startHeld(t, cmd)
	defer release()
	var ready struct {
		Ready bool `json:"ready"`
		PID   int  `json:"pid"`
	}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &ready) != nil || !ready.Ready {
		err2 := release()
		t.Fatalf("rustgen write: no ready line (%v, exit %v, %q): %s", err, err2, line, stderr.String())
	}
	fx := loadCrateFixture(t, filepath.Join(dir, "expected.json"))
	if fx.PID != ready.PID || fx.PID != cmd.Process.Pid {
		t.Fatalf("rustgen pid %d, expected.json says %d, ready line %d", cmd.Process.Pid, fx.PID, ready.PID)
	}
	for i := range fx.Files {
		f := &fx.Files[i]
		t.Run("alive/"+filepath.Base(f.File), func(t *testing.T) { checkCrateRing(t, filepath.Join(dir, f.File), f, true) })
	}
	if err := release(); err != nil {
		t.Fatalf("rustgen exit: %v: %s", err, stderr.String())
	}
	for i := range fx.Files {
		f := &fx.Files[i]
		t.Run("exited/"+filepath.Base(f.File), func(t *testing.T) { checkCrateRing(t, filepath.Join(dir, f.File), f, false) })
	}
	t.Logf("live probing-memtable %s interop took %.2fs (build %.2fs, once per test binary)", crateVersion, time.Since(start).Seconds(), rustgen.took.Seconds())
}

// startHeld starts cmd, a child that keeps its files open until its stdin
// closes. release closes stdin and waits for the exit (the first call
// only; later ones return nil).
func startHeld(t *testing.T, cmd *exec.Cmd) (stdout io.Reader, stderr *bytes.Buffer, release func() error) {
	t.Helper()
	stderr = new(bytes.Buffer)
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	release = func() error {
		if exited {
			return nil
		}
		exited = true
		stdin.Close()
		return cmd.Wait()
	}
	return stdout, stderr, release
}

// rustgenRead asks the crate's reader about one file.
func rustgenRead(t *testing.T, bin, path string) *crateFile {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "read", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var f crateFile
	if jerr := json.Unmarshal(out, &f); jerr != nil {
		t.Fatalf("rustgen read %s: %v, %v: %.300s %s", path, err, jerr, out, stderr.String())
	}
	if (f.Error != "") != (err != nil) {
		t.Fatalf("rustgen read %s: exit %v but error %q", path, err, f.Error)
	}
	return &f
}

// reverseTable is a ring our writer makes for the crate to read.
type reverseTable struct {
	name string
	cols []Column
	opt  Options
	rows [][]any
}

func reverseTables() []reverseTable {
	cols := []Column{{"timestamp", I64}, {"u8", U8}, {"i32", I32}, {"i64", I64}, {"f32", F32}, {"f64", F64},
		{"u64", U64}, {"u32", U32}, {"s", Str}, {"b", Bytes}}
	strs := []string{"", "héllo", "日本語", "emoji 🚀", "nul\x00byte", "tab\tnl\n", "repeat", "repeat", "", strings.Repeat("L", 200)}
	bytesVals := [][]byte{{}, {0xff, 0x00}, {1, 2, 3}, {1, 2, 3}, []byte("ascii")}
	f32s := []float32{0, float32(math.Copysign(0, -1)), 1.5, math.Float32frombits(1), math.MaxFloat32, float32(math.Inf(1)),
		math.Float32frombits(0x7fc00001), 0.1}
	f64s := []float64{math.Copysign(0, -1), 5e-324, 1e300, math.Float64frombits(0x7ff8000000000001), math.Float64frombits(0x7ff0000000000001),
		math.Inf(-1), 0.1}
	u64s := []uint64{0, math.MaxUint64, 1 << 63, 1<<63 + 5, 12345678901234567890}
	i64s := []int64{math.MinInt64, math.MaxInt64, -1, 0, 1 << 53}
	var rows [][]any
	for i := 0; i < 70; i++ {
		ts := int64(1_760_000_000_000_000 + i*1000)
		if i%6 == 2 {
			ts -= 4500
		}
		rows = append(rows, []any{ts, int64([]uint8{0, 255, 128}[i%3]), int64([]int32{math.MinInt32, math.MaxInt32, -1, 0}[i%4]),
			i64s[i%len(i64s)], f32s[i%len(f32s)], f64s[i%len(f64s)], u64s[i%len(u64s)],
			int64([]uint32{math.MaxUint32, 0, 1 << 31}[i%3]), strs[i%len(strs)], bytesVals[i%len(bytesVals)]})
	}
	var plain [][]any
	for i := 0; i < 30; i++ {
		plain = append(plain, []any{fmt.Sprintf("op-%d", i%3), float64(i) / 8, int64(1_000_000_000 + i), uint64(i)})
	}
	return []reverseTable{
		{"python.go_types", cols, Options{ChunkSize: 1024, NumChunks: 4, Dedup: true}, rows},
		{"nccl.go_plain", []Column{{"op", Str}, {"v", F64}, {"ts", I64}, {"seq", U64}}, Options{ChunkSize: 128, NumChunks: 3}, plain},
	}
}

// TestProbingMemtableReverse writes rings with our writer and asks the
// crate's reader for their rows: as is (the crate reads only v3, so it
// rejects our v5 rings, which is logged), and re-laid as v3, where every
// value, column, ts_col, dedup flag and chunk range must match.
func TestProbingMemtableReverse(t *testing.T) {
	bin := rustgenBinary(t)
	start := time.Now()
	dir := filepath.Join(t.TempDir(), strconv.Itoa(os.Getpid()))
	for _, tc := range reverseTables() {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			w, err := Create(path, tc.cols, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			var written [][]string
			for _, r := range tc.rows {
				rb := w.Row()
				cells := make([]string, len(tc.cols))
				for i, c := range tc.cols {
					cells[i] = goCell(c.Type, r[i])
					switch c.Type {
					case I64:
						rb.I64(r[i].(int64))
					case I32:
						rb.I32(int32(r[i].(int64)))
					case U8:
						rb.U8(uint8(r[i].(int64)))
					case U32:
						rb.U32(uint32(r[i].(int64)))
					case U64:
						rb.U64(r[i].(uint64))
					case F32:
						rb.F32(r[i].(float32))
					case F64:
						rb.F64(r[i].(float64))
					case Str:
						rb.Str(r[i].(string))
					case Bytes:
						rb.Bytes(r[i].([]byte))
					}
				}
				if err := rb.Commit(); err != nil {
					t.Fatal(err)
				}
				written = append(written, cells)
			}
			ctr := w.Counters()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if ctr.RowsOverwritten == 0 {
				t.Fatalf("ring did not wrap: %+v", ctr)
			}
			tb, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer tb.Close()
			ours, err := readCrateRows(tb)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(ours.rows), len(written)-int(ctr.RowsOverwritten); got != want {
				t.Fatalf("our reader: %d rows, want %d", got, want)
			}

			// As is.
			if f := rustgenRead(t, bin, path); f.Error != "" {
				if !strings.Contains(f.Error, "unsupported version") {
					t.Errorf("the crate rejects our v5 ring for a reason other than its version: %s", f.Error)
				} else {
					t.Logf("as expected, probing-memtable %s rejects our MEMT v5 ring: %s", crateVersion, f.Error)
				}
			} else {
				t.Logf("probing-memtable %s reads our v5 ring as is", crateVersion)
				checkReverse(t, tb, ours, written, f)
			}

			// Re-laid as v3.
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			v3, err := memtV5ToV3(raw)
			if err != nil {
				t.Fatal(err)
			}
			p3 := filepath.Join(t.TempDir(), tc.name)
			if err := os.WriteFile(p3, v3, 0o644); err != nil {
				t.Fatal(err)
			}
			f := rustgenRead(t, bin, p3)
			if f.Error != "" {
				t.Fatalf("probing-memtable %s rejects our ring re-laid as v3: %s", crateVersion, f.Error)
			}
			if f.Version != 3 || f.DataOffset != align64(v3HeaderSize+DescSize*len(tc.cols)) {
				t.Errorf("the crate read version %d, data_offset %d", f.Version, f.DataOffset)
			}
			if n, err := v3DedupRefs(v3); err != nil || (tc.opt.Dedup && n == 0) {
				t.Errorf("our ring has %d dedup back-references (%v)", n, err)
			} else if n > 0 {
				t.Logf("the crate resolved our %d dedup back-references", n)
			}
			checkReverse(t, tb, ours, written, f)
		})
	}
	t.Logf("reverse probing-memtable %s interop took %.2fs", crateVersion, time.Since(start).Seconds())
}

// checkReverse compares the crate's reading (f) of a ring our writer made
// with what was written and with our own reading (ours, from tb).
func checkReverse(t *testing.T, tb *Table, ours *crateRead, written [][]string, f *crateFile) {
	t.Helper()
	want := written[len(written)-len(ours.rows):]
	if len(f.Rows) != len(want) {
		t.Errorf("the crate reads %d rows, %d are live", len(f.Rows), len(want))
	}
	shown := 0
	for r := 0; r < min(len(f.Rows), len(want)); r++ {
		for i, c := range tb.Columns {
			if f.Rows[r][i] != want[r][i] && shown < 8 {
				shown++
				t.Errorf("row %d column %s (%v): the crate reads %q, we wrote %q", r, c.Name, c.Type, f.Rows[r][i], want[r][i])
			}
		}
	}
	for r := 0; r < min(len(ours.rows), len(want)); r++ {
		if rowKey(ours.rows[r]) != rowKey(want[r]) {
			t.Errorf("row %d: our reader reads %q, we wrote %q", r, ours.rows[r], want[r])
			break
		}
	}
	if f.CreatorPID != os.Getpid() {
		t.Errorf("the crate reads creator_pid %d, we are %d", f.CreatorPID, os.Getpid())
	}
	// Everything the crate says must agree with our reader. The creator
	// (this process) is alive; the crate's format has no counters.
	problems, _ := compareCrate(tb, f, true, nil)
	for _, p := range problems {
		t.Errorf("the crate vs our reader: %s", p)
	}
}
