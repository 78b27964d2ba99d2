package memt

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"unicode/utf8"
	"unsafe"

	"github.com/edsrzf/mmap-go"
)

// Errors an append can return.
var (
	// ErrReadersPinned: the next chunk is leased by a live reader, so the
	// ring cannot advance; the row was not written (writes_blocked counts it).
	ErrReadersPinned = errors.New("memt: next chunk is pinned by a reader")
	// ErrRowTooLarge: the row does not fit in an empty chunk.
	ErrRowTooLarge = errors.New("memt: row larger than a chunk")
)

// Options shape a new table.
type Options struct {
	ChunkSize int  // bytes per chunk, a multiple of 8, at least 48
	NumChunks int  // chunks in the ring, at least 1
	Dedup     bool // store repeated strings of a chunk as back-references
}

// Writer appends rows to one table. One process, one goroutine: MEMT has a
// single writer, enforced by an exclusive flock held while the Writer lives.
type Writer struct {
	f      *os.File
	m      mmap.MMap
	g      Geometry
	cols   []Column
	tsCol  int
	dedup  bool
	cur    int // write chunk
	row    RowBuilder
	out    []byte // row as stored (dedup rewrites it)
	seen   []map[uint64][]int32
	seed   maphash.Seed
	closed bool
}

// Create makes a new table file at path (its directory is created). An
// existing file is never truncated: Create fails instead.
func Create(path string, cols []Column, opt Options) (*Writer, error) {
	if len(cols) == 0 {
		return nil, errors.New("memt: a table needs at least one column")
	}
	for i, c := range cols {
		if !c.Type.valid() {
			return nil, fmt.Errorf("memt: column %d (%s): unknown dtype %d", i, c.Name, c.Type)
		}
		if len(c.Name) > maxNameLen {
			// Cut on a character boundary: readers that validate UTF-8
			// (probing-memtable's) would otherwise drop the whole name.
			n := maxNameLen
			for n > 0 && !utf8.RuneStart(c.Name[n]) {
				n--
			}
			cols[i].Name = c.Name[:n]
		}
	}
	if opt.NumChunks < 1 || opt.ChunkSize < ChunkHeader+8 || opt.ChunkSize%8 != 0 {
		return nil, fmt.Errorf("memt: bad geometry: %d chunks of %d bytes (want >= 1 chunk of a multiple of 8, >= 48 bytes)", opt.NumChunks, opt.ChunkSize)
	}
	if opt.Dedup && len(cols) > 64 {
		return nil, errors.New("memt: dedup supports at most 64 columns")
	}
	g := NewGeometry(len(cols), opt.NumChunks, opt.ChunkSize)
	if int64(g.FileSize()) > math.MaxInt32 {
		return nil, fmt.Errorf("memt: %d bytes is too large a table", g.FileSize())
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Writer, error) {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fail(fmt.Errorf("memt: %s is locked by another writer: %w", path, err))
	}
	// The pages are reserved now: a write through the mapping into a hole
	// that a full disk (or /dev/shm) cannot back is a SIGBUS that kills
	// the writer, where a failed Create is an error it can report.
	if err := reserve(f, int64(g.FileSize())); err != nil {
		return fail(fmt.Errorf("memt: reserving %d bytes for %s: %w (is the file system full?)", g.FileSize(), path, err))
	}
	if err := f.Truncate(int64(g.FileSize())); err != nil {
		return fail(err)
	}
	m, err := mmap.Map(f, mmap.RDWR, 0)
	if err != nil {
		return fail(err)
	}
	w := &Writer{f: f, m: m, g: g, cols: cols, tsCol: tsColumn(cols), dedup: opt.Dedup, seed: maphash.MakeSeed()}
	w.row.w = w
	w.init()
	return w, nil
}

func (w *Writer) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&w.m[off])) }
func (w *Writer) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&w.m[off])) }

// init lays out the header, descriptors, lease area and chunk headers.
func (w *Writer) init() {
	m := w.m
	le.PutUint32(m[offMagic:], Magic)
	le.PutUint16(m[offVersion:], Version)
	le.PutUint16(m[offHeaderSize:], HeaderSize)
	m[offByteOrder], m[offByteOrder+1] = 1, 2
	le.PutUint16(m[offTsCol:], uint16(w.tsCol))
	flags := uint32(0)
	if w.dedup {
		flags = FlagDedup
	}
	le.PutUint32(m[offFlags:], flags)
	le.PutUint32(m[offNumCols:], uint32(len(w.cols)))
	le.PutUint32(m[offNumChunks:], uint32(w.g.NumChunks))
	le.PutUint32(m[offChunkSize:], uint32(w.g.ChunkSize))
	le.PutUint32(m[offDataOffset:], uint32(w.g.DataOffset))
	le.PutUint32(m[offRefcount:], 1)
	pid := os.Getpid()
	le.PutUint32(m[offCreatorPID:], uint32(pid))
	if st, err := ProcessStartTime(pid); err == nil {
		le.PutUint64(m[offCreatorStart:], st)
	}
	le.PutUint32(m[offLeaseOffset:], uint32(w.g.LeaseOffset))
	le.PutUint32(m[offLeaseSlots:], LeaseSlots)
	var id [8]byte
	_, _ = rand.Read(id[:])
	if binary.LittleEndian.Uint64(id[:]) == 0 {
		id[0] = 1
	}
	copy(m[offInstanceID:], id[:])
	for i, c := range w.cols {
		d := m[HeaderSize+DescSize*i:]
		le.PutUint16(d, uint16(len(c.Name)))
		copy(d[2:56], c.Name)
		le.PutUint32(d[56:], uint32(c.Type))
		le.PutUint32(d[60:], uint32(c.Type.Size()))
	}
	for i := 0; i < w.g.NumChunks; i++ {
		c := w.g.ChunkOffset(i)
		le.PutUint64(m[c+chMinTs:], uint64(int64(minTsEmpty)))
		mn := int64(maxTsEmpty)
		le.PutUint64(m[c+chMaxTs:], uint64(mn))
	}
	c0 := w.g.ChunkOffset(0)
	atomic.StoreUint64(w.u64(c0+chGeneration), 1)
	atomic.StoreUint32(w.u32(c0+chState), stateWriting)
	w.resetDedup()
}

// Columns returns the table's columns.
func (w *Writer) Columns() []Column { return w.cols }

// Row starts a row; add values in column order with the typed methods,
// then Commit.
func (w *Writer) Row() *RowBuilder {
	b := &w.row
	b.buf, b.col, b.err, b.ts = b.buf[:0], 0, nil, 0
	return b
}

// RowBuilder encodes one row. Its methods are chained; the first type error
// is kept and returned by Commit.
type RowBuilder struct {
	w   *Writer
	buf []byte
	col int
	err error
	ts  int64
}

func (b *RowBuilder) next(t DType) bool {
	if b.err != nil {
		return false
	}
	if b.col >= len(b.w.cols) {
		b.err = fmt.Errorf("memt: row has more values than the %d columns", len(b.w.cols))
		return false
	}
	if c := b.w.cols[b.col]; c.Type != t {
		b.err = fmt.Errorf("memt: column %d (%s) is %s, got a %s", b.col, c.Name, c.Type, t)
		return false
	}
	return true
}

// I64 adds an I64 value.
func (b *RowBuilder) I64(v int64) *RowBuilder {
	if b.next(I64) {
		if b.col == b.w.tsCol-1 {
			b.ts = v
		}
		b.buf = le.AppendUint64(b.buf, uint64(v))
		b.col++
	}
	return b
}

// I32 adds an I32 value.
func (b *RowBuilder) I32(v int32) *RowBuilder {
	if b.next(I32) {
		b.buf = le.AppendUint32(b.buf, uint32(v))
		b.col++
	}
	return b
}

// U8 adds a U8 value.
func (b *RowBuilder) U8(v uint8) *RowBuilder {
	if b.next(U8) {
		b.buf = append(b.buf, v)
		b.col++
	}
	return b
}

// U32 adds a U32 value.
func (b *RowBuilder) U32(v uint32) *RowBuilder {
	if b.next(U32) {
		b.buf = le.AppendUint32(b.buf, v)
		b.col++
	}
	return b
}

// U64 adds a U64 value.
func (b *RowBuilder) U64(v uint64) *RowBuilder {
	if b.next(U64) {
		b.buf = le.AppendUint64(b.buf, v)
		b.col++
	}
	return b
}

// F32 adds an F32 value.
func (b *RowBuilder) F32(v float32) *RowBuilder {
	if b.next(F32) {
		b.buf = le.AppendUint32(b.buf, math.Float32bits(v))
		b.col++
	}
	return b
}

// F64 adds an F64 value.
func (b *RowBuilder) F64(v float64) *RowBuilder {
	if b.next(F64) {
		b.buf = le.AppendUint64(b.buf, math.Float64bits(v))
		b.col++
	}
	return b
}

// Str adds a Str value.
func (b *RowBuilder) Str(v string) *RowBuilder {
	if b.next(Str) {
		b.buf = le.AppendUint32(b.buf, uint32(len(v)))
		b.buf = append(b.buf, v...)
		b.col++
	}
	return b
}

// Bytes adds a Bytes value.
func (b *RowBuilder) Bytes(v []byte) *RowBuilder {
	if b.next(Bytes) {
		b.buf = le.AppendUint32(b.buf, uint32(len(v)))
		b.buf = append(b.buf, v...)
		b.col++
	}
	return b
}

// Commit appends the row, advancing (and recycling) chunks as needed.
func (b *RowBuilder) Commit() error {
	w := b.w
	if b.err != nil {
		return b.err
	}
	if b.col != len(w.cols) {
		return fmt.Errorf("memt: row has %d values, the table has %d columns", b.col, len(w.cols))
	}
	if w.closed {
		return errors.New("memt: writer closed")
	}
	return w.append(b.buf, b.ts)
}

func (w *Writer) append(row []byte, ts int64) error {
	for attempt := 0; attempt < 2; attempt++ {
		c := w.g.ChunkOffset(w.cur)
		used := int(atomic.LoadUint32(w.u32(c + chUsed)))
		out := row
		if w.dedup {
			out = w.dedupRow(row, used)
		}
		if ChunkHeader+used+4+len(out) > w.g.ChunkSize {
			if attempt == 1 || used == 0 {
				return ErrRowTooLarge
			}
			if err := w.advance(); err != nil {
				return err
			}
			continue
		}
		at := c + ChunkHeader + used
		le.PutUint32(w.m[at:], uint32(len(out)))
		copy(w.m[at+4:], out)
		if w.tsCol > 0 {
			if ts < int64(le.Uint64(w.m[c+chMinTs:])) {
				le.PutUint64(w.m[c+chMinTs:], uint64(ts))
			}
			if ts > int64(le.Uint64(w.m[c+chMaxTs:])) {
				le.PutUint64(w.m[c+chMaxTs:], uint64(ts))
			}
		}
		if w.dedup {
			w.remember(row, used)
		}
		// Publish: readers trust used first, then row_count.
		atomic.StoreUint32(w.u32(c+chUsed), uint32(used+4+len(out)))
		atomic.AddUint32(w.u32(c+chRowCount), 1)
		return nil
	}
	return ErrRowTooLarge
}

// advance moves to the next chunk, recycling it unless a live reader holds
// a lease on it.
func (w *Writer) advance() error {
	n := (w.cur + 1) % w.g.NumChunks
	nc := w.g.ChunkOffset(n)
	stateN := w.u32(nc + chState)
	old := atomic.LoadUint32(stateN)
	atomic.StoreUint32(stateN, stateEmpty) // no new pins from here on
	pinned := true
	for spin := 0; spin < 1024 && pinned; spin++ {
		pinned = w.leased(n)
	}
	if pinned {
		atomic.StoreUint32(stateN, old)
		atomic.AddUint64(w.u64(offWritesBlocked), 1)
		return ErrReadersPinned
	}
	if n != w.cur {
		atomic.StoreUint32(w.u32(w.g.ChunkOffset(w.cur)+chState), stateSealed)
	}
	if rows := atomic.LoadUint32(w.u32(nc + chRowCount)); rows > 0 {
		atomic.AddUint32(w.u32(offChunksRecycled), 1)
		atomic.AddUint32(w.u32(offRowsOverwrote), rows)
	}
	atomic.AddUint64(w.u64(nc+chGeneration), 1)
	atomic.StoreUint32(w.u32(nc+chUsed), 0)
	atomic.StoreUint32(w.u32(nc+chRowCount), 0)
	le.PutUint64(w.m[nc+chMinTs:], uint64(int64(minTsEmpty)))
	mn := int64(maxTsEmpty)
	le.PutUint64(w.m[nc+chMaxTs:], uint64(mn))
	atomic.StoreUint32(stateN, stateWriting)
	atomic.StoreUint32(w.u32(offWriteChunk), uint32(n))
	w.cur = n
	w.resetDedup()
	return nil
}

// leased reports a live reader lease on chunk n, freeing dead owners' slots.
func (w *Writer) leased(n int) bool {
	live := false
	for s := 0; s < LeaseSlots; s++ {
		off := w.g.LeaseOffset + (n*LeaseSlots+s)*LeaseSlotSize
		st := atomic.LoadUint64(w.u64(off))
		if st == 0 {
			continue
		}
		if ProcessAlive(int(st>>32), atomic.LoadUint64(w.u64(off+8))) {
			live = true
			continue
		}
		atomic.CompareAndSwapUint64(w.u64(off), st, 0)
	}
	return live
}

func (w *Writer) resetDedup() {
	if !w.dedup {
		return
	}
	w.seen = make([]map[uint64][]int32, len(w.cols))
}

// dedupRow rewrites row so that every Str/Bytes value already stored in the
// current chunk (same column, same bytes) becomes a back-reference.
func (w *Writer) dedupRow(row []byte, used int) []byte {
	w.out = w.out[:0]
	pos := 0
	for i, c := range w.cols {
		if sz := c.Type.Size(); sz > 0 {
			w.out = append(w.out, row[pos:pos+sz]...)
			pos += sz
			continue
		}
		n := int(le.Uint32(row[pos:]))
		val := row[pos+4 : pos+4+n]
		if ref := w.lookup(i, val); ref > 0 {
			w.out = le.AppendUint32(w.out, uint32(int32(-ref)))
		} else {
			w.out = append(w.out, row[pos:pos+4+n]...)
		}
		pos += 4 + n
	}
	return w.out
}

// lookup finds an earlier copy of val in column col of the current chunk.
func (w *Writer) lookup(col int, val []byte) int {
	h := maphash.Bytes(w.seed, val) ^ uint64(col)
	c := w.g.ChunkOffset(w.cur)
	for _, off := range w.seen[col][h] {
		o := int(off)
		if n := int(le.Uint32(w.m[c+o:])); n == len(val) && string(w.m[c+o+4:c+o+4+n]) == string(val) {
			return o
		}
	}
	return 0
}

// remember records where this row's literal Str/Bytes values now lie
// (offsets from the chunk start), for later rows to refer to.
func (w *Writer) remember(row []byte, used int) {
	c := w.g.ChunkOffset(w.cur)
	at := ChunkHeader + used + 4 // the stored row's first column
	for i, col := range w.cols {
		if sz := col.Type.Size(); sz > 0 {
			at += sz
			continue
		}
		n := int32(le.Uint32(w.m[c+at:]))
		if n < 0 { // a back-reference: nothing new to remember
			at += 4
			continue
		}
		h := maphash.Bytes(w.seed, w.m[c+at+4:c+at+4+int(n)]) ^ uint64(i)
		if w.seen[i] == nil {
			w.seen[i] = map[uint64][]int32{}
		}
		w.seen[i][h] = append(w.seen[i][h], int32(at))
		at += 4 + int(n)
	}
}

// Counters are the table's ring statistics.
type Counters struct {
	ChunksRecycled      uint32 `json:"chunks_recycled"`
	RowsOverwritten     uint32 `json:"rows_overwritten"`
	WritesBlocked       uint64 `json:"writes_blocked"`
	ReaderLeaseFailures uint64 `json:"reader_lease_failures"`
}

// Counters reads the ring statistics.
func (w *Writer) Counters() Counters {
	return Counters{
		ChunksRecycled:      atomic.LoadUint32(w.u32(offChunksRecycled)),
		RowsOverwritten:     atomic.LoadUint32(w.u32(offRowsOverwrote)),
		WritesBlocked:       atomic.LoadUint64(w.u64(offWritesBlocked)),
		ReaderLeaseFailures: atomic.LoadUint64(w.u64(offLeaseFailures)),
	}
}

// Flush asks the kernel to write the mapping back to the file (a tmpfs
// data dir needs nothing; a disk-backed one keeps rows across a reboot).
func (w *Writer) Flush() error { return w.m.Flush() }

// Close unmaps the table and releases the writer lock. The file stays.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	err := w.m.Unmap()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}
