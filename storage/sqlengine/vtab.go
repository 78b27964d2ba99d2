package sqlengine

/*
#cgo CFLAGS: -O2 -std=gnu99
#include <stdlib.h>
#include "memt_vtab.h"
#include "memcap.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/cgo"
	"sync"
	"unsafe"

	"github.com/probing-mcp/probing-mcp/storage"
	"github.com/probing-mcp/probing-mcp/storage/memt"
)

var (
	registerOnce sync.Once
	registerErr  error
)

// register installs the memt module into every SQLite connection opened
// afterwards (sqlite3_auto_extension).
func register() error {
	registerOnce.Do(func() {
		if rc := C.memt_register(); rc != 0 {
			registerErr = fmt.Errorf("sqlengine: cannot register the memt SQLite module (rc %d): is github.com/mattn/go-sqlite3 linked?", int(rc))
		}
	})
	return registerErr
}

// source is one SQL table: the rings of that schema.table in every process
// directory, unioned, with tag columns saying which process wrote a row.
type source struct {
	schema, table string
	cols          []vcol
	tsCol         int // index in cols of the pruning timestamp, -1 if none
	files         []*fileSrc
	q             *scanQuality
	handle        cgo.Handle
}

type vcol struct {
	name string
	typ  memt.DType
}

type fileSrc struct {
	ring     *storage.Ring
	t        *memt.Table
	colmap   []int // virtual column → file column, -1 when the file lacks it
	identity bool  // colmap is 0..n-1: offsets go straight to C
	types    []byte
	tsOK     bool // the file's timestamp column is the table's tsCol
	tagInt   [4]int64
	tagStr   [3]string
	openErr  error
}

// scanQuality collects what scans of one query saw, for the result's
// data-quality section.
type scanQuality struct {
	mu       sync.Mutex
	stats    memt.ScanStats
	failures []storage.Problem
	read     map[string]bool // ring paths scanned
}

func (q *scanQuality) add(f *fileSrc, st memt.ScanStats, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stats.Chunks += st.Chunks
	q.stats.Rows += st.Rows
	q.stats.Pruned += st.Pruned
	q.stats.Torn += st.Torn
	q.stats.Invalid += st.Invalid
	q.stats.BadUTF8 += st.BadUTF8
	if q.read == nil {
		q.read = map[string]bool{}
	}
	q.read[f.ring.Path] = true
	if err != nil {
		q.failures = append(q.failures, storage.Problem{Path: f.ring.Path, Problem: err.Error()})
	}
}

func (q *scanQuality) addFailure(f *fileSrc, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, p := range q.failures {
		if p.Path == f.ring.Path {
			return
		}
	}
	q.failures = append(q.failures, storage.Problem{Path: f.ring.Path, Problem: err.Error()})
}

// declaration is the CREATE TABLE text SQLite wants for the source.
func (s *source) declaration() string {
	b := []byte("CREATE TABLE x(")
	for i, c := range s.cols {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, quoteIdent(c.name)...)
		b = append(b, ' ')
		b = append(b, sqlType(c.typ)...)
	}
	b = append(b, ", _host TEXT, _addr TEXT, _rank INTEGER, _node_rank INTEGER, _local_rank INTEGER, _role TEXT, _pid INTEGER)"...)
	return string(b)
}

func sqlType(t memt.DType) string {
	switch t {
	case memt.F32, memt.F64:
		return "REAL"
	case memt.Str:
		return "TEXT"
	case memt.Bytes:
		return "BLOB"
	}
	return "INTEGER"
}

func handleOf(h C.longlong) (any, bool) {
	if h == 0 {
		return nil, false
	}
	defer func() { _ = recover() }() // a stale handle must not crash the server
	return cgo.Handle(uintptr(h)).Value(), true
}

//export memtGoSchema
func memtGoSchema(h C.longlong, ncols *C.int, tscol *C.int) *C.char {
	v, ok := handleOf(h)
	src, _ := v.(*source)
	if !ok || src == nil {
		return nil
	}
	*ncols = C.int(len(src.cols))
	*tscol = C.int(src.tsCol)
	return C.CString(src.declaration())
}

// scan is one cursor's walk over a source's files.
type scan struct {
	src    *source
	flags  int
	lo, hi int64
	pid    int64
	next   int
	cur    *fileSrc
	it     *memt.ChunkIter
	chunk  memt.Chunk
	types  unsafe.Pointer
	tags   [3]*C.char
	handle cgo.Handle
	// remap receives a chunk's offsets in the file's column order when
	// they must be mapped onto the table's (SQLite memory, like b's
	// buffers, so the query's memory cap covers them).
	remap      unsafe.Pointer
	remapCap   int // in int32s
	lastFailed error
}

//export memtGoOpen
func memtGoOpen(h C.longlong) C.longlong {
	v, ok := handleOf(h)
	src, _ := v.(*source)
	if !ok || src == nil {
		return 0
	}
	s := &scan{src: src, types: C.calloc(C.size_t(len(src.cols)+1), 1)}
	s.handle = cgo.NewHandle(s)
	return C.longlong(s.handle)
}

const (
	planLo  = 1
	planHi  = 2
	planPID = 8
)

//export memtGoFilter
func memtGoFilter(h C.longlong, flags C.int, lo, hi, pid C.longlong) {
	v, _ := handleOf(h)
	s, _ := v.(*scan)
	if s == nil {
		return
	}
	s.finishFile()
	s.flags, s.lo, s.hi, s.pid = int(flags), int64(lo), int64(hi), int64(pid)
	s.next = 0
}

// finishFile records the current file's scan statistics.
func (s *scan) finishFile() {
	if s.it != nil {
		s.src.q.add(s.cur, s.it.Stats(), s.it.Err())
		s.it, s.cur = nil, nil
	}
}

func (s *scan) freeTags() {
	for i, p := range s.tags {
		C.free(unsafe.Pointer(p))
		s.tags[i] = nil
	}
}

// grow makes *p hold at least n bytes of SQLite memory.
func grow(p *unsafe.Pointer, capBytes *C.longlong, n int64) error {
	if int64(*capBytes) >= n {
		return nil
	}
	q := C.memq_realloc(*p, C.longlong(n))
	if q == nil {
		return fmt.Errorf("memt: cannot allocate a %d-byte chunk buffer", n)
	}
	*p, *capBytes = q, C.longlong(n)
	return nil
}

// openFile moves to the next file the filter admits and primes b for it.
// It reports false at the end of the files.
func (s *scan) openFile(b *C.memt_batch) (bool, error) {
	for s.next < len(s.src.files) {
		f := s.src.files[s.next]
		s.next++
		if s.flags&planPID != 0 && int64(f.ring.PID) != s.pid {
			continue
		}
		if err := f.openTable(); err != nil {
			s.src.q.addFailure(f, err)
			continue
		}
		var opt memt.ScanOptions
		if f.tsOK && s.flags&(planLo|planHi) != 0 {
			opt.MinTs, opt.MaxTs = minInt64, 0
			if s.flags&planLo != 0 {
				opt.MinTs = s.lo
			}
			if s.flags&planHi != 0 {
				opt.MaxTs = s.hi // 0 reads as "no upper bound": still correct, only less pruning
			}
		}
		nv := len(s.src.cols)
		nf := len(f.t.Columns)
		data := unsafe.Pointer(b.data)
		err := grow(&data, &b.data_cap, int64(f.t.Geometry.ChunkSize))
		b.data = (*C.uchar)(data)
		if err != nil {
			return false, err
		}
		offs, offsBytes := unsafe.Pointer(b.offs), b.offs_cap*4
		err = grow(&offs, &offsBytes, int64(f.t.MaxRows())*int64(nv)*4)
		b.offs, b.offs_cap = (*C.int)(offs), offsBytes/4
		if err != nil {
			return false, err
		}
		if !f.identity {
			remapBytes := C.longlong(s.remapCap) * 4
			err = grow(&s.remap, &remapBytes, int64(f.t.MaxRows())*int64(nf)*4)
			s.remapCap = int(remapBytes / 4)
			if err != nil {
				return false, err
			}
		}
		copy(unsafe.Slice((*byte)(s.types), nv), f.types)
		b.types = (*C.uchar)(s.types)
		s.freeTags()
		for i, str := range f.tagStr {
			s.tags[i] = C.CString(str)
			b.tag_str[i] = s.tags[i]
		}
		for i, n := range f.tagInt {
			b.tag_int[i] = C.longlong(n)
		}
		s.cur, s.it = f, f.t.Chunks(opt)
		return true, nil
	}
	return false, nil
}

const minInt64 = -1 << 63

//export memtGoNext
func memtGoNext(h C.longlong, b *C.memt_batch) C.int {
	v, _ := handleOf(h)
	s, _ := v.(*scan)
	if s == nil {
		return -1
	}
	b.nrows = 0
	for {
		if s.it == nil {
			ok, err := s.openFile(b)
			if err != nil {
				return s.fail(b, err)
			}
			if !ok {
				return 0
			}
		}
		f := s.cur
		nv := len(s.src.cols)
		data := unsafe.Slice((*byte)(unsafe.Pointer(b.data)), int(b.data_cap))
		offs := unsafe.Slice((*int32)(unsafe.Pointer(b.offs)), int(b.offs_cap))
		s.chunk.Payload = data[:0]
		remap := unsafe.Slice((*int32)(s.remap), s.remapCap)
		if f.identity {
			s.chunk.Offsets = offs[:0]
		} else {
			s.chunk.Offsets = remap[:0]
		}
		if !s.it.Next(&s.chunk) {
			s.finishFile()
			continue
		}
		if unsafe.SliceData(s.chunk.Payload) != unsafe.SliceData(data) {
			return s.fail(b, errors.New("memt: chunk larger than its table's chunk size"))
		}
		rows := s.chunk.Rows
		if f.identity {
			if unsafe.SliceData(s.chunk.Offsets) != unsafe.SliceData(offs) {
				return s.fail(b, errors.New("memt: more rows in a chunk than its size allows"))
			}
		} else {
			nf := len(f.t.Columns)
			if unsafe.SliceData(s.chunk.Offsets) != unsafe.SliceData(remap) || rows*nv > len(offs) {
				return s.fail(b, errors.New("memt: more rows in a chunk than its size allows"))
			}
			src := s.chunk.Offsets
			for r := 0; r < rows; r++ {
				dst := offs[r*nv : (r+1)*nv]
				row := src[r*nf : (r+1)*nf]
				for vc, fc := range f.colmap {
					if fc < 0 {
						dst[vc] = -1
					} else {
						dst[vc] = row[fc]
					}
				}
			}
		}
		b.nrows = C.int(rows)
		return 1
	}
}

func (s *scan) fail(b *C.memt_batch, err error) C.int {
	C.free(unsafe.Pointer(b.err))
	b.err = C.CString(err.Error())
	return -1
}

//export memtGoClose
func memtGoClose(h C.longlong, b *C.memt_batch) {
	v, _ := handleOf(h)
	s, _ := v.(*scan)
	if s == nil {
		return
	}
	s.finishFile()
	s.freeTags()
	C.free(s.types)
	s.types = nil
	C.memq_free(s.remap)
	s.remap, s.remapCap = nil, 0
	s.handle.Delete()
}

// quoteIdent quotes an SQL identifier.
func quoteIdent(s string) string {
	out := []byte{'"'}
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			out = append(out, '"')
		}
		out = append(out, s[i])
	}
	return string(append(out, '"'))
}
