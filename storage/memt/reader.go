package memt

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"

	"github.com/edsrzf/mmap-go"
)

// Table is an open table file, mapped read-only. Readers take no lease:
// they copy a chunk and keep the copy only if the chunk's generation did
// not change while they copied it.
type Table struct {
	Path         string
	Version      int // 5, or 3 for files of probing-memtable 0.2.5
	Columns      []Column
	TsCol        int // index+1 of the timestamp column, 0 if none
	Dedup        bool
	Geometry     Geometry
	CreatorPID   int
	CreatorStart uint64
	InstanceID   uint64
	f            *os.File
	m            mmap.MMap
}

// FormatError is a file that is not a valid MEMT v5 table.
type FormatError struct {
	Path string
	Msg  string
}

func (e *FormatError) Error() string { return fmt.Sprintf("memt: %s: %s", e.Path, e.Msg) }

// Open maps and validates a table file.
func Open(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	t, err := open(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return t, nil
}

func open(f *os.File, path string) (t *Table, err error) {
	bad := func(format string, args ...any) error {
		return &FormatError{Path: path, Msg: fmt.Sprintf(format, args...)}
	}
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if info.Size() < HeaderSize {
		return nil, bad("%d bytes, shorter than the %d-byte header", info.Size(), HeaderSize)
	}
	var h [HeaderSize]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return nil, bad("reading the header: %v", err)
	}
	version := int(le.Uint16(h[offVersion:]))
	switch {
	case le.Uint32(h[offMagic:]) != Magic:
		return nil, bad("not a MEMT table (magic %#x)", le.Uint32(h[offMagic:]))
	case version != Version && version != VersionV3:
		return nil, bad("MEMT version %d, this reader reads %d and %d", version, VersionV3, Version)
	case h[offByteOrder] != 1 || h[offByteOrder+1] != 2:
		return nil, bad("byte-order mark %x %x, want 01 02", h[offByteOrder], h[offByteOrder+1])
	}
	headerSize := HeaderSize
	if version == VersionV3 {
		headerSize = HeaderSizeV3
	}
	if hs := int(le.Uint16(h[offHeaderSize:])); hs != headerSize {
		return nil, bad("header size %d, MEMT v%d has %d", hs, version, headerSize)
	}
	flags := le.Uint32(h[offFlags:])
	if flags&^knownFlags != 0 {
		return nil, bad("unknown flags %#x", flags)
	}
	numCols, numChunks, chunkSize := int(le.Uint32(h[offNumCols:])), int(le.Uint32(h[offNumChunks:])), int(le.Uint32(h[offChunkSize:]))
	if numCols == 0 || numCols > 4096 {
		return nil, bad("%d columns", numCols)
	}
	if numChunks == 0 || numChunks > 1<<20 || chunkSize < ChunkHeader+8 || chunkSize%8 != 0 {
		return nil, bad("bad geometry: %d chunks of %d bytes", numChunks, chunkSize)
	}
	var g Geometry
	if version == VersionV3 {
		// v3 (probing-memtable 0.2.5 on crates.io): a 64-byte header,
		// descriptors right after it, no reader-lease area and no ring
		// counters; chunks and rows as in v5.
		g = Geometry{NumCols: numCols, NumChunks: numChunks, ChunkSize: chunkSize, DataOffset: align64(HeaderSizeV3 + DescSize*numCols)}
		if int(le.Uint32(h[offDataOffset:])) != g.DataOffset {
			return nil, bad("data offset %d does not match the v3 layout (%d)", le.Uint32(h[offDataOffset:]), g.DataOffset)
		}
	} else {
		g = NewGeometry(numCols, numChunks, chunkSize)
		if int(le.Uint32(h[offLeaseOffset:])) != g.LeaseOffset || int(le.Uint32(h[offDataOffset:])) != g.DataOffset || le.Uint32(h[offLeaseSlots:]) != LeaseSlots {
			return nil, bad("lease/data offsets %d/%d or lease slots %d do not match the layout (%d/%d/16)",
				le.Uint32(h[offLeaseOffset:]), le.Uint32(h[offDataOffset:]), le.Uint32(h[offLeaseSlots:]), g.LeaseOffset, g.DataOffset)
		}
	}
	if int64(g.FileSize()) > info.Size() {
		return nil, bad("file is %d bytes, the header describes %d", info.Size(), g.FileSize())
	}
	t = &Table{Path: path, Version: version, Geometry: g, Dedup: flags&FlagDedup != 0, TsCol: int(le.Uint16(h[offTsCol:])),
		CreatorPID: int(le.Uint32(h[offCreatorPID:])), CreatorStart: le.Uint64(h[offCreatorStart:])}
	if version == Version {
		t.InstanceID = le.Uint64(h[offInstanceID:])
	}
	desc := make([]byte, DescSize*numCols)
	if _, err := f.ReadAt(desc, int64(headerSize)); err != nil {
		return nil, bad("reading column descriptors: %v", err)
	}
	for i := 0; i < numCols; i++ {
		d := desc[DescSize*i:]
		n := int(le.Uint16(d))
		if n > maxNameLen {
			return nil, bad("column %d: name length %d > %d", i, n, maxNameLen)
		}
		// Writers cut names at 54 bytes, possibly inside a character:
		// drop the broken tail rather than hand SQL an invalid name.
		c := Column{Name: strings.ToValidUTF8(string(d[2:2+n]), ""), Type: DType(le.Uint32(d[56:]))}
		if !c.Type.valid() {
			return nil, bad("column %d (%s): unknown dtype %d", i, c.Name, c.Type)
		}
		t.Columns = append(t.Columns, c)
	}
	if t.TsCol > numCols || (t.TsCol > 0 && t.Columns[t.TsCol-1].Type != I64) {
		return nil, bad("timestamp column %d is not an I64 column", t.TsCol)
	}
	m, err := mmap.MapRegion(f, g.FileSize(), mmap.RDONLY, 0, 0)
	if err != nil {
		return nil, err
	}
	t.f, t.m = f, m
	return t, nil
}

// IsMEMT reports whether the file at path starts with the MEMT magic, so
// that a directory scan can tell a broken table (worth reporting) from
// another kind of file (Probing's MEMH hash tables share the directories).
func IsMEMT(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [4]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		return false
	}
	return le.Uint32(b[:]) == Magic
}

// Close unmaps the file.
func (t *Table) Close() error {
	err := t.m.Unmap()
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (t *Table) u32(off int) uint32 { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&t.m[off]))) }
func (t *Table) u64(off int) uint64 { return atomic.LoadUint64((*uint64)(unsafe.Pointer(&t.m[off]))) }

// Counters reads the ring statistics the writer keeps.
func (t *Table) Counters() Counters {
	if t.Version != Version {
		return Counters{} // v3 keeps none
	}
	return Counters{ChunksRecycled: t.u32(offChunksRecycled), RowsOverwritten: t.u32(offRowsOverwrote),
		WritesBlocked: t.u64(offWritesBlocked), ReaderLeaseFailures: t.u64(offLeaseFailures)}
}

// WriterAlive reports whether the process that created the table still
// runs (a dead job's tables stay readable).
func (t *Table) WriterAlive() bool { return ProcessAlive(t.CreatorPID, t.CreatorStart) }

// ScanOptions select rows.
type ScanOptions struct {
	// MinTs and MaxTs keep chunks whose timestamp range can overlap
	// [MinTs, MaxTs] (both 0: no pruning). Rows are not filtered one by one.
	MinTs, MaxTs int64
}

// ScanStats say what a scan saw, for data-quality reports.
type ScanStats struct {
	Chunks  int `json:"chunks_read"`
	Rows    int `json:"rows"`
	Pruned  int `json:"chunks_pruned"`
	Torn    int `json:"chunks_torn"`    // recycled while being read: discarded
	Invalid int `json:"chunks_invalid"` // bytes that do not walk as rows: rows after the bad one dropped
	// BadUTF8 counts Str values that are not valid UTF-8 (returned as is).
	BadUTF8 int `json:"invalid_utf8"`
}

type chunkRef struct {
	index int
	gen   uint64
}

// Chunk is one chunk's committed rows, copied out of the ring.
type Chunk struct {
	// Payload is the chunk's bytes after its header. Offsets holds, for
	// row r and column c, the offset in Payload of the value at
	// Offsets[r*len(Columns)+c] (for Str and Bytes: of its 4-byte length;
	// dedup back-references are already resolved).
	Payload []byte
	Offsets []int32
	Rows    int
	// MinTs and MaxTs are the chunk header's timestamp range.
	MinTs, MaxTs int64
}

// MaxRows bounds the rows one chunk can hold, so a caller can size
// Chunk.Offsets once (capacity MaxRows*len(Columns)) and never reallocate.
func (t *Table) MaxRows() int {
	min := 4
	for _, c := range t.Columns {
		if sz := c.Type.Size(); sz > 0 {
			min += sz
		} else {
			min += 4
		}
	}
	return (t.Geometry.ChunkSize-ChunkHeader)/min + 1
}

// ChunkIter walks a table's committed chunks oldest first, a chunk at a
// time: the SQL engine hands whole chunks to SQLite, and a chunk is the
// unit the generation check protects.
type ChunkIter struct {
	t     *Table
	opt   ScanOptions
	order []chunkRef
	next  int
	stats ScanStats
	err   error
}

// Chunks starts an iteration. The order is fixed now: chunks recycled
// after this call are skipped as torn, which keeps rows in time order.
func (t *Table) Chunks(opt ScanOptions) *ChunkIter {
	it := &ChunkIter{t: t, opt: opt}
	it.guard(func() {
		g := t.Geometry
		for i := 0; i < g.NumChunks; i++ {
			c := g.ChunkOffset(i)
			if gen := t.u64(c + chGeneration); gen != 0 && t.u32(c+chRowCount) > 0 {
				it.order = append(it.order, chunkRef{i, gen})
			}
		}
	})
	sort.Slice(it.order, func(a, b int) bool {
		if it.order[a].gen != it.order[b].gen {
			return it.order[a].gen < it.order[b].gen
		}
		return it.order[a].index < it.order[b].index
	})
	return it
}

// Stats says what the iteration saw so far.
func (it *ChunkIter) Stats() ScanStats { return it.stats }

// Err is the error that ended the iteration early, if any.
func (it *ChunkIter) Err() error { return it.err }

// guard turns a fault on the mapping (the file shrank under us) into an
// error instead of a crash.
func (it *ChunkIter) guard(fn func()) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			it.err = fmt.Errorf("memt: %s changed under the reader (truncated?): %v", it.t.Path, r)
		}
	}()
	fn()
}

// Next fills c with the next chunk that has rows and reports whether there
// was one. c's slices are reused when their capacity allows.
func (it *ChunkIter) Next(c *Chunk) bool {
	for it.err == nil && it.next < len(it.order) {
		ref := it.order[it.next]
		it.next++
		ok := false
		it.guard(func() { ok = it.copyChunk(ref, c) })
		if it.err != nil {
			return false
		}
		if ok && c.Rows > 0 {
			return true
		}
	}
	return false
}

func (it *ChunkIter) copyChunk(ref chunkRef, out *Chunk) bool {
	t, g := it.t, it.t.Geometry
	c := g.ChunkOffset(ref.index)
	if t.u32(c+chState) == stateEmpty {
		return false
	}
	g1 := t.u64(c + chGeneration)
	if g1 != ref.gen {
		// Recycled since the order was fixed: its rows are now newer than
		// the chunks still to come, so it is dropped to keep the scan in
		// order (a later scan reads it).
		it.stats.Torn++
		return false
	}
	lo, hi := int64(t.u64(c+chMinTs)), int64(t.u64(c+chMaxTs))
	if (it.opt.MinTs != 0 || it.opt.MaxTs != 0) && t.TsCol > 0 {
		if hi < it.opt.MinTs || (it.opt.MaxTs != 0 && lo > it.opt.MaxTs) {
			it.stats.Pruned++
			return false
		}
	}
	used := int(t.u32(c + chUsed))
	if used > g.ChunkSize-ChunkHeader || t.u32(c+chState) > stateSealed {
		it.stats.Invalid++
		return false
	}
	buf := append(out.Payload[:0], t.m[c+ChunkHeader:c+ChunkHeader+used]...)
	out.Payload = buf
	if t.u32(c+chState) == stateEmpty || t.u64(c+chGeneration) != g1 {
		it.stats.Torn++ // recycled while we copied
		return false
	}
	it.stats.Chunks++
	out.MinTs, out.MaxTs = lo, hi
	nc := len(t.Columns)
	offs := out.Offsets[:0]
	rows := 0
	for p := 0; p < len(buf); {
		if len(buf)-p < 4 {
			it.stats.Invalid++
			break
		}
		n := int(le.Uint32(buf[p:]))
		if n > len(buf)-p-4 {
			it.stats.Invalid++
			break
		}
		k := len(offs)
		if cap(offs)-k < nc {
			offs = append(offs, make([]int32, nc)...)
		} else {
			offs = offs[:k+nc]
		}
		if !parseRow(t, buf, p+4, n, offs[k:], &it.stats) {
			offs = offs[:k]
			it.stats.Invalid++
			break
		}
		rows++
		p += 4 + n
	}
	out.Offsets, out.Rows = offs, rows
	it.stats.Rows += rows
	return true
}

// Scan calls fn for every committed row, oldest chunk first, until fn
// returns false. Rows stay valid only during the call. A file that shrinks
// under the scan ends it with an error instead of a crash.
func (t *Table) Scan(opt ScanOptions, fn func(*Row) bool) (ScanStats, error) {
	it := t.Chunks(opt)
	var c Chunk
	row := &Row{t: t}
	nc := len(t.Columns)
	for it.Next(&c) {
		row.chunk = c.Payload
		for r := 0; r < c.Rows; r++ {
			row.offs = c.Offsets[r*nc : (r+1)*nc]
			if !fn(row) {
				return it.Stats(), it.Err()
			}
		}
	}
	return it.Stats(), it.Err()
}

// Row is one decoded row; its accessors take a column index.
type Row struct {
	t     *Table
	chunk []byte  // payload copy: chunk bytes from offset 40
	offs  []int32 // per column: offset in chunk of the value (for Str/Bytes: of its length)
}

// parseRow locates every column of the row at chunk[at:at+n] into offs.
func parseRow(t *Table, chunk []byte, at, n int, offs []int32, stats *ScanStats) bool {
	end := at + n
	p := at
	for i, c := range t.Columns {
		if sz := c.Type.Size(); sz > 0 {
			if p+sz > end {
				return false
			}
			offs[i] = int32(p)
			p += sz
			continue
		}
		if p+4 > end {
			return false
		}
		l := int32(le.Uint32(chunk[p:]))
		if l >= 0 {
			if p+4+int(l) > end {
				return false
			}
			offs[i] = int32(p)
			if c.Type == Str && !utf8.Valid(chunk[p+4:p+4+int(l)]) {
				stats.BadUTF8++
			}
			p += 4 + int(l)
			continue
		}
		// A dedup back-reference: -l is an offset from the chunk start
		// (header included) of an earlier [len][bytes] in this chunk.
		if !t.Dedup || l == math.MinInt32 {
			return false
		}
		ref := int(-l) - ChunkHeader
		if ref < 0 || ref+4 > p || ref+4 > len(chunk) {
			return false
		}
		tl := int(int32(le.Uint32(chunk[ref:])))
		if tl < 0 || ref+4+tl > at-4 { // must end before this row starts
			return false
		}
		offs[i] = int32(ref)
		p += 4
	}
	return p == end
}

// Int64 returns an I64, I32, U8 or U32 column as int64.
func (r *Row) Int64(i int) int64 {
	o := r.offs[i]
	switch r.t.Columns[i].Type {
	case I64:
		return int64(le.Uint64(r.chunk[o:]))
	case I32:
		return int64(int32(le.Uint32(r.chunk[o:])))
	case U32:
		return int64(le.Uint32(r.chunk[o:]))
	case U8:
		return int64(r.chunk[o])
	case U64:
		return int64(le.Uint64(r.chunk[o:]))
	}
	return 0
}

// Uint64 returns a U64 column.
func (r *Row) Uint64(i int) uint64 { return le.Uint64(r.chunk[r.offs[i]:]) }

// Float64 returns an F64 or F32 column as float64.
func (r *Row) Float64(i int) float64 {
	o := r.offs[i]
	if r.t.Columns[i].Type == F32 {
		return float64(math.Float32frombits(le.Uint32(r.chunk[o:])))
	}
	return math.Float64frombits(le.Uint64(r.chunk[o:]))
}

// Float32 returns an F32 column exactly as stored (a signalling NaN stays
// signalling, which widening to float64 would quiet).
func (r *Row) Float32(i int) float32 {
	return math.Float32frombits(le.Uint32(r.chunk[r.offs[i]:]))
}

// BytesAt returns a Str or Bytes column; the slice is valid during the
// callback only.
func (r *Row) BytesAt(i int) []byte {
	o := int(r.offs[i])
	n := int(le.Uint32(r.chunk[o:]))
	return r.chunk[o+4 : o+4+n]
}

// String returns a Str column (copied).
func (r *Row) String(i int) string { return string(r.BytesAt(i)) }

// Value returns column i as a Go value: int64, uint64, float32 (F32,
// bit for bit), float64, string or []byte (copied).
func (r *Row) Value(i int) any {
	switch r.t.Columns[i].Type {
	case U64:
		return r.Uint64(i)
	case F32:
		return r.Float32(i)
	case F64:
		return r.Float64(i)
	case Str:
		return r.String(i)
	case Bytes:
		return append([]byte(nil), r.BytesAt(i)...)
	}
	return r.Int64(i)
}
