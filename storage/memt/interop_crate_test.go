package memt

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

const (
	crateFixtureKind = "probing-memtable"
	crateVersion     = "0.2.5"
	v3HeaderSize     = 64
)

// crateFixture is expected.json as rustgen writes it.
type crateFixture struct {
	Format       int         `json:"format"`
	Kind         string      `json:"kind"`
	CrateVersion string      `json:"crate_version"`
	PID          int         `json:"pid"`
	Files        []crateFile `json:"files"`
}

// crateFile is what the crate's reader says about one ring (one entry of
// expected.json's files, or `rustgen read` output).
type crateFile struct {
	Error            string `json:"error"` // rustgen read: the crate rejected the file
	File             string `json:"file"`
	Version          int    `json:"version"`
	HeaderSize       int    `json:"header_size"`
	Flags            uint32 `json:"flags"`
	Dedup            bool   `json:"dedup"`
	TsCol            int    `json:"ts_col"`
	NumCols          int    `json:"num_cols"`
	NumChunks        int    `json:"num_chunks"`
	ChunkSize        int    `json:"chunk_size"`
	DataOffset       int    `json:"data_offset"`
	FileSize         int    `json:"file_size"`
	WriteChunk       int    `json:"write_chunk"`
	Refcount         uint32 `json:"refcount"`
	CreatorPID       int    `json:"creator_pid"`
	CreatorStartTime uint64 `json:"creator_start_time"`
	Columns          []struct {
		Name     string `json:"name"`
		DType    string `json:"dtype"`
		Code     uint32 `json:"code"`
		ElemSize int    `json:"elem_size"`
	} `json:"columns"`
	Chunks []struct {
		Index      int      `json:"index"`
		Generation uint64   `json:"generation"`
		State      uint32   `json:"state"`
		Used       int      `json:"used"`
		RowCount   int      `json:"row_count"`
		TsRange    []string `json:"ts_range"` // [min, max], or null: no rows or no ts_col
	} `json:"chunks"`
	LogicalOrder []int      `json:"logical_order"`
	Rows         [][]string `json:"rows"`
	// The generator's counts (write mode only): the format has no counters.
	RowsWritten     int `json:"rows_written"`
	RowsOverwritten int `json:"rows_overwritten"`
	ChunksRecycled  int `json:"chunks_recycled"`
}

func loadCrateFixture(t *testing.T, path string) *crateFixture {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fx crateFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if fx.Format != 1 || fx.Kind != crateFixtureKind || fx.PID <= 0 || len(fx.Files) == 0 {
		t.Fatalf("%s: incomplete fixture (format %d, kind %q, pid %d, %d files)", path, fx.Format, fx.Kind, fx.PID, len(fx.Files))
	}
	return &fx
}

// crateCell renders column i of r the way rustgen renders a cell: ints in
// decimal, F32/F64 as the hex of their bits, Str as is, Bytes as hex.
func crateCell(r *Row, i int) string {
	v := r.Value(i)
	switch dt := r.t.Columns[i].Type; dt {
	case U8, I32, I64, U32:
		if n, ok := v.(int64); ok {
			return strconv.FormatInt(n, 10)
		}
	case U64:
		if n, ok := v.(uint64); ok {
			return strconv.FormatUint(n, 10)
		}
	case F32:
		if f, ok := v.(float32); ok {
			return fmt.Sprintf("0x%08x", math.Float32bits(f))
		}
	case F64:
		if f, ok := v.(float64); ok {
			return fmt.Sprintf("0x%016x", math.Float64bits(f))
		}
	case Str:
		if s, ok := v.(string); ok {
			return s
		}
	case Bytes:
		if b, ok := v.([]byte); ok {
			return hex.EncodeToString(b)
		}
	}
	return fmt.Sprintf("?%T for %v", v, r.t.Columns[i].Type)
}

// goCell renders a value our writer was given, like crateCell.
func goCell(dt DType, v any) string {
	switch dt {
	case F32:
		return fmt.Sprintf("0x%08x", math.Float32bits(v.(float32)))
	case F64:
		return fmt.Sprintf("0x%016x", math.Float64bits(v.(float64)))
	case U64:
		return strconv.FormatUint(v.(uint64), 10)
	case Str:
		return v.(string)
	case Bytes:
		return hex.EncodeToString(v.([]byte))
	}
	return strconv.FormatInt(v.(int64), 10)
}

type crateRead struct {
	rows    [][]string
	rawF32  map[[2]int]uint32 // F32 cells: the bits in the file
	stats   ScanStats
	chunkTs [][2]int64 // per chunk read, oldest first: MinTs, MaxTs
	gens    []uint64   // per chunk index
}

// rawColumnName is column i's name bytes as the file holds them.
func rawColumnName(tb *Table, i int) string {
	b, err := os.ReadFile(tb.Path)
	hs := HeaderSize
	if tb.Version == VersionV3 {
		hs = HeaderSizeV3
	}
	off := hs + DescSize*i
	if err != nil || off+DescSize > len(b) {
		return ""
	}
	n := int(le.Uint16(b[off:]))
	if n > maxNameLen {
		return ""
	}
	return string(b[off+2 : off+2+n])
}

func readCrateRows(tb *Table) (*crateRead, error) {
	cr := &crateRead{rawF32: map[[2]int]uint32{}}
	var err error
	cr.stats, err = tb.Scan(ScanOptions{}, func(r *Row) bool {
		row := make([]string, len(tb.Columns))
		for i, c := range tb.Columns {
			row[i] = crateCell(r, i)
			if c.Type == F32 {
				cr.rawF32[[2]int{len(cr.rows), i}] = le.Uint32(r.chunk[r.offs[i]:])
			}
		}
		cr.rows = append(cr.rows, row)
		return true
	})
	if err != nil {
		return cr, err
	}
	it := tb.Chunks(ScanOptions{})
	var c Chunk
	for it.Next(&c) {
		cr.chunkTs = append(cr.chunkTs, [2]int64{c.MinTs, c.MaxTs})
	}
	for i := 0; i < tb.Geometry.NumChunks; i++ {
		cr.gens = append(cr.gens, tb.u64(tb.Geometry.ChunkOffset(i)+chGeneration))
	}
	return cr, it.Err()
}

// compareCrate checks our reader's view of a ring (tb) against what the
// crate's reader said about the same ring (f): columns, dtypes, ts_col,
// dedup, geometry, creator, every value (floats bit for bit), order, the
// chunks' timestamp ranges, WriterAlive() and Counters(), which must be
// one of okCounters.
func compareCrate(tb *Table, f *crateFile, wantAlive bool, okCounters []Counters) (problems, notes []string) {
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if len(tb.Columns) != len(f.Columns) {
		bad("%d columns, the crate reads %d", len(tb.Columns), len(f.Columns))
		return
	}
	for i, c := range tb.Columns {
		fc := f.Columns[i]
		// A name cut inside a character by the writer: the crate returns
		// "", our reader drops only the broken tail (see Open).
		if raw := rawColumnName(tb, i); fc.Name == "" && raw != c.Name && !utf8.ValidString(raw) && c.Name != "" &&
			strings.ToValidUTF8(raw, "") == c.Name {
			notes = append(notes, fmt.Sprintf("column %d: raw name cut inside a character; ours %q, the crate's \"\"", i, c.Name))
		} else if c.Name != fc.Name {
			bad("column %d name: ours %q (bytes %x), the crate's %q (bytes %x)", i, c.Name, c.Name, fc.Name, fc.Name)
		}
		if c.Type.String() != fc.DType || uint32(c.Type) != fc.Code {
			bad("column %d (%s) dtype: ours %v (%d), the crate's %s (%d)", i, fc.Name, c.Type, uint32(c.Type), fc.DType, fc.Code)
		}
	}
	if tb.TsCol != f.TsCol {
		bad("TsCol: ours %d, the crate's ts_col %d", tb.TsCol, f.TsCol)
	}
	if tb.Dedup != f.Dedup {
		bad("Dedup: ours %v, the crate's %v", tb.Dedup, f.Dedup)
	}
	if tb.Geometry.NumChunks != f.NumChunks || tb.Geometry.ChunkSize != f.ChunkSize {
		bad("geometry: ours %d × %d, the crate's %d × %d", tb.Geometry.NumChunks, tb.Geometry.ChunkSize, f.NumChunks, f.ChunkSize)
	}
	if tb.CreatorPID != f.CreatorPID || tb.CreatorStart != f.CreatorStartTime {
		bad("creator: ours pid %d start %d, the crate's pid %d start %d", tb.CreatorPID, tb.CreatorStart, f.CreatorPID, f.CreatorStartTime)
	}
	if alive := tb.WriterAlive(); alive != wantAlive {
		bad("WriterAlive() = %v, want %v (creator pid %d)", alive, wantAlive, tb.CreatorPID)
	}
	if ctr := tb.Counters(); okCounters != nil && !slicesContains(okCounters, ctr) {
		bad("Counters() = %+v, want one of %+v", ctr, okCounters)
	}

	cr, err := readCrateRows(tb)
	if err != nil {
		bad("our reader: %v", err)
		return
	}
	if cr.stats.Invalid != 0 || cr.stats.Torn != 0 || cr.stats.BadUTF8 != 0 {
		bad("scan stats %+v: want no invalid, torn or bad-UTF-8 data", cr.stats)
	}
	if len(cr.rows) != len(f.Rows) {
		bad("%d rows, the crate reads %d", len(cr.rows), len(f.Rows))
	}
	shown := 0
	for r := 0; r < min(len(cr.rows), len(f.Rows)); r++ {
		for i := range tb.Columns {
			ours, theirs := cr.rows[r][i], f.Rows[r][i]
			if ours == theirs {
				continue
			}
			if shown++; shown > 8 {
				continue
			}
			if raw, ok := cr.rawF32[[2]int{r, i}]; ok && fmt.Sprintf("0x%08x", raw) == theirs {
				bad("row %d column %s (F32): the file holds %s and the crate returns it, but Row.Value/Float64 widen it to float64 "+
					"and that changes the bits (float32(Value) = %s): a signalling NaN comes back quiet", r, tb.Columns[i].Name, theirs, ours)
				continue
			}
			bad("row %d column %s (%v): ours %q, the crate's %q", r, tb.Columns[i].Name, tb.Columns[i].Type, ours, theirs)
		}
	}
	if shown > 8 {
		bad("… %d differing cells in all", shown)
	}

	// The chunks' timestamp ranges, in read order.
	if len(cr.chunkTs) != len(f.LogicalOrder) {
		bad("%d chunks read, the crate's logical order has %d", len(cr.chunkTs), len(f.LogicalOrder))
	} else {
		for k, idx := range f.LogicalOrder {
			want := [2]int64{math.MaxInt64, math.MinInt64}
			if rng := f.Chunks[idx].TsRange; rng != nil {
				lo, _ := strconv.ParseInt(rng[0], 10, 64)
				hi, _ := strconv.ParseInt(rng[1], 10, 64)
				want = [2]int64{lo, hi}
			}
			if cr.chunkTs[k] != want {
				bad("chunk %d (read %d): MinTs/MaxTs %v, the crate's range %v", idx, k, cr.chunkTs[k], want)
			}
		}
	}
	for i, g := range cr.gens {
		if i < len(f.Chunks) && f.Chunks[i].Generation != g {
			bad("chunk %d generation: %d, the crate's %d", i, g, f.Chunks[i].Generation)
		}
	}
	notes = append(notes, fmt.Sprintf("%d rows, %d chunks read, counters %+v, stats %+v", len(cr.rows), len(cr.chunkTs), tb.Counters(), cr.stats))
	return problems, notes
}

func slicesContains(s []Counters, c Counters) bool {
	for _, x := range s {
		if x == c {
			return true
		}
	}
	return false
}

// memtV3ToV5 re-lays a probing-memtable 0.2.5 (MEMT v3) file as v5: a
// 128-byte header (counters 0, lease fields per §4.4, instance_id 0x33), the
// descriptors at 128+64*i, an empty lease area, and the chunks copied byte
// for byte to the v5 data_offset.
func memtV3ToV5(b []byte) ([]byte, error) {
	if len(b) < v3HeaderSize || le.Uint32(b[offMagic:]) != Magic {
		return nil, errors.New("not a MEMT file")
	}
	if v, hs := le.Uint16(b[offVersion:]), le.Uint16(b[offHeaderSize:]); v != 3 || hs != v3HeaderSize {
		return nil, fmt.Errorf("version %d, header_size %d: not MEMT v3", v, hs)
	}
	nc, nch, cs := int(le.Uint32(b[offNumCols:])), int(le.Uint32(b[offNumChunks:])), int(le.Uint32(b[offChunkSize:]))
	doff := align64(v3HeaderSize + DescSize*nc)
	if int(le.Uint32(b[offDataOffset:])) != doff || len(b) < doff+cs*nch {
		return nil, fmt.Errorf("v3 data_offset %d (want %d), %d bytes for %d × %d", le.Uint32(b[offDataOffset:]), doff, len(b), nch, cs)
	}
	g := NewGeometry(nc, nch, cs)
	out := make([]byte, g.FileSize())
	copy(out[:offDataOffset], b[:offDataOffset]) // magic … chunk_size
	le.PutUint16(out[offVersion:], Version)
	le.PutUint16(out[offHeaderSize:], HeaderSize)
	le.PutUint32(out[offDataOffset:], uint32(g.DataOffset))
	copy(out[offWriteChunk:56], b[offWriteChunk:56]) // write_chunk, refcount, creator_pid, _pad0, creator_start_time
	le.PutUint32(out[offLeaseOffset:], uint32(g.LeaseOffset))
	le.PutUint32(out[offLeaseSlots:], LeaseSlots)
	le.PutUint64(out[offInstanceID:], 0x33)
	copy(out[HeaderSize:HeaderSize+DescSize*nc], b[v3HeaderSize:v3HeaderSize+DescSize*nc])
	copy(out[g.DataOffset:], b[doff:doff+cs*nch])
	return out, nil
}

// memtV5ToV3 is the reverse, for the crate's reader: the counters, lease
// fields, instance_id and lease area are dropped.
func memtV5ToV3(b []byte) ([]byte, error) {
	if len(b) < HeaderSize || le.Uint32(b[offMagic:]) != Magic || le.Uint16(b[offVersion:]) != Version {
		return nil, errors.New("not a MEMT v5 file")
	}
	nc, nch, cs := int(le.Uint32(b[offNumCols:])), int(le.Uint32(b[offNumChunks:])), int(le.Uint32(b[offChunkSize:]))
	g := NewGeometry(nc, nch, cs)
	if len(b) < g.FileSize() {
		return nil, fmt.Errorf("%d bytes, want %d", len(b), g.FileSize())
	}
	doff := align64(v3HeaderSize + DescSize*nc)
	out := make([]byte, doff+cs*nch)
	copy(out[:offDataOffset], b[:offDataOffset])
	le.PutUint16(out[offVersion:], 3)
	le.PutUint16(out[offHeaderSize:], v3HeaderSize)
	le.PutUint32(out[offDataOffset:], uint32(doff))
	copy(out[offWriteChunk:56], b[offWriteChunk:56])
	copy(out[v3HeaderSize:v3HeaderSize+DescSize*nc], b[HeaderSize:HeaderSize+DescSize*nc])
	copy(out[doff:], b[g.DataOffset:g.FileSize()])
	return out, nil
}

// v3DedupRefs counts the dedup back-references in a v3 file's live
// chunks, walking the rows itself (so the fixture provably exercises them).
func v3DedupRefs(b []byte) (refs int, err error) {
	nc, nch, cs := int(le.Uint32(b[offNumCols:])), int(le.Uint32(b[offNumChunks:])), int(le.Uint32(b[offChunkSize:]))
	doff := int(le.Uint32(b[offDataOffset:]))
	types := make([]DType, nc)
	for i := range types {
		types[i] = DType(le.Uint32(b[v3HeaderSize+DescSize*i+56:]))
	}
	for c := 0; c < nch; c++ {
		base := doff + c*cs
		used := int(le.Uint32(b[base+chUsed:]))
		for p := 0; p < used; {
			at := base + ChunkHeader + p
			n := int(le.Uint32(b[at:]))
			q := at + 4
			for _, t := range types {
				if sz := t.Size(); sz > 0 {
					q += sz
				} else if l := int32(le.Uint32(b[q:])); l < 0 {
					refs++
					q += 4
				} else {
					q += 4 + int(l)
				}
			}
			if q != at+4+n {
				return refs, fmt.Errorf("chunk %d: row at %d: columns end at %d, row_len says %d", c, p, q-at-4, n)
			}
			p += 4 + n
		}
	}
	return refs, nil
}

// checkCrateRing runs the comparisons for one ring the crate wrote (path),
// described by f: as is, and re-laid as v5.
func checkCrateRing(t *testing.T, path string, f *crateFile, wantAlive bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The fixture must describe this very file.
	if len(raw) != f.FileSize || int(le.Uint16(raw[offVersion:])) != f.Version || int(le.Uint16(raw[offHeaderSize:])) != f.HeaderSize ||
		int(le.Uint32(raw[offDataOffset:])) != f.DataOffset || int(le.Uint32(raw[offCreatorPID:])) != f.CreatorPID {
		t.Fatalf("%s does not match its description (size %d, version %d, header_size %d, data_offset %d, pid %d): %+v",
			path, len(raw), le.Uint16(raw[offVersion:]), le.Uint16(raw[offHeaderSize:]), le.Uint32(raw[offDataOffset:]), le.Uint32(raw[offCreatorPID:]), f)
	}
	if f.RowsWritten != len(f.Rows)+f.RowsOverwritten {
		t.Errorf("%s: %d rows written, %d read back by the crate, %d overwritten: does not add up", path, f.RowsWritten, len(f.Rows), f.RowsOverwritten)
	}
	if f.Dedup {
		if n, err := v3DedupRefs(raw); err != nil || n == 0 {
			t.Errorf("%s: dedup is on but the walk found %d back-references (%v): the fixture no longer exercises them", path, n, err)
		} else {
			t.Logf("%s: %d dedup back-references", filepath.Base(path), n)
		}
	}

	t.Run("as-is", func(t *testing.T) {
		tb, err := Open(path)
		if err != nil {
			nc, nch, cs := int(le.Uint32(raw[offNumCols:])), int(le.Uint32(raw[offNumChunks:])), int(le.Uint32(raw[offChunkSize:]))
			g := NewGeometry(nc, nch, cs)
			t.Errorf("our reader rejects this probing-memtable %s ring: %v.\n"+
				"  The crate writes MEMT v%d, where we read only v5: version %d at offset 4; header_size %d at offset 6 (v5: 128); "+
				"column descriptors at 64+64*i (v5: 128+64*i); no reader-lease area, so data_offset at offset 28 is %d = align64(64+64*%d) "+
				"(v5 for this shape: lease_offset %d, data_offset %d); offsets 56..63 are _reserved = 0 (v5: chunks_recycled, rows_overwritten) "+
				"and offsets 64..127 hold column 0's descriptor (v5: lease_offset, lease_slots, instance_id, writes_blocked, reader_lease_failures). "+
				"The 40-byte chunk headers, the row encoding and dedup references are the same: the v3-as-v5 subtest reads this ring re-laid as v5",
				crateVersion, err, f.Version, f.Version, f.HeaderSize, f.DataOffset, nc, g.LeaseOffset, g.DataOffset)
			return
		}
		defer tb.Close()
		// A v3 file has no counters: zero, or (derived from generations)
		// the generator's chunks_recycled.
		ok := []Counters{{}, {ChunksRecycled: uint32(f.ChunksRecycled)}}
		problems, notes := compareCrate(tb, f, wantAlive, ok)
		for _, n := range notes {
			t.Log(n)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", path, p)
		}
	})
	t.Run("v3-as-v5", func(t *testing.T) {
		v5, err := memtV3ToV5(raw)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		p := filepath.Join(t.TempDir(), filepath.Base(path))
		if err := os.WriteFile(p, v5, 0o644); err != nil {
			t.Fatal(err)
		}
		tb, err := Open(p)
		if err != nil {
			t.Fatalf("%s re-laid as v5: our reader: %v", path, err)
		}
		defer tb.Close()
		problems, notes := compareCrate(tb, f, wantAlive, []Counters{{}})
		for _, n := range notes {
			t.Log(n)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", path, p)
		}
		// What the counters would say, from what our reader sees.
		recycled := 0
		for i := 0; i < tb.Geometry.NumChunks; i++ {
			recycled += int(max(tb.u64(tb.Geometry.ChunkOffset(i)+chGeneration), 1) - 1)
		}
		if recycled != f.ChunksRecycled {
			t.Errorf("%s: generations add up to %d recycles, the generator counted %d", path, recycled, f.ChunksRecycled)
		}
	})
}

func TestProbingMemtableFixture(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(fixtureRoot, "probing-memtable-*"))
	if len(dirs) == 0 {
		t.Fatalf("no probing-memtable fixture under %s (see testdata/memt/README.md)", fixtureRoot)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			expPath := filepath.Join(dir, "expected.json")
			fx := loadCrateFixture(t, expPath)
			// The files on disk are exactly the rings expected.json lists.
			listed := map[string]bool{}
			for _, f := range fx.Files {
				listed[filepath.FromSlash(f.File)] = true
			}
			err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || p == expPath {
					return err
				}
				rel, _ := filepath.Rel(dir, p)
				if !listed[rel] {
					t.Errorf("%s: not listed in expected.json", p)
				}
				delete(listed, rel)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for rel := range listed {
				t.Errorf("%s lists %s, which is missing", expPath, rel)
			}
			var wrapped, dedup, ts bool
			for i := range fx.Files {
				f := &fx.Files[i]
				wrapped = wrapped || f.RowsOverwritten > 0
				dedup = dedup || f.Dedup
				ts = ts || f.TsCol > 0
				t.Run(filepath.Base(f.File), func(t *testing.T) {
					checkCrateRing(t, filepath.Join(dir, filepath.FromSlash(f.File)), f, false)
				})
			}
			if !wrapped || !dedup || !ts {
				t.Errorf("fixture lacks a wrapped ring (%v), a dedup ring (%v) or a timestamp column (%v)", wrapped, dedup, ts)
			}
		})
	}
}
