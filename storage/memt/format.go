// Package memt reads and writes MEMT v5 ring tables, the mmap'd
// ring-buffer files the in-process agents (ours and Probing's) record into.
// The byte layout is Probing's (shared/reference/probing-contract.md §4):
// a 128-byte header, 64-byte column descriptors, a reader-lease area, then
// fixed-size chunks of length-prefixed rows. One process writes a table;
// any number read it, lock-free, by copying a chunk and checking that its
// generation did not move meanwhile.
package memt

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Format constants.
const (
	Magic      = 0x4D454D54 // "TMEM" on disk (little-endian "MEMT")
	Version    = 5
	HeaderSize = 128
	// VersionV3 is what probing-memtable 0.2.5 (crates.io) writes: the v5
	// chunk and row format behind a 64-byte header without reader leases
	// or counters. The reader accepts it; the writer writes v5 only.
	VersionV3     = 3
	HeaderSizeV3  = 64
	DescSize      = 64
	LeaseSlots    = 16
	LeaseSlotSize = 16
	ChunkHeader   = 40
	FlagDedup     = 1
	maxNameLen    = 54
	knownFlags    = FlagDedup
)

// DType is a column type.
type DType uint32

// The column types and their codes.
const (
	U8    DType = 1
	I32   DType = 2
	I64   DType = 3
	F32   DType = 4
	F64   DType = 5
	U64   DType = 6
	U32   DType = 7
	Str   DType = 8
	Bytes DType = 9
)

var dtypeNames = [...]string{"", "U8", "I32", "I64", "F32", "F64", "U64", "U32", "Str", "Bytes"}

func (t DType) String() string {
	if t >= 1 && int(t) < len(dtypeNames) {
		return dtypeNames[t]
	}
	return fmt.Sprintf("dtype(%d)", uint32(t))
}

// Size is the fixed byte width of a value, 0 for Str and Bytes.
func (t DType) Size() int {
	switch t {
	case U8:
		return 1
	case I32, F32, U32:
		return 4
	case I64, F64, U64:
		return 8
	}
	return 0
}

func (t DType) valid() bool { return t >= U8 && t <= Bytes }

// Column is a column's name and type.
type Column struct {
	Name string
	Type DType
}

// Chunk states.
const (
	stateEmpty   = 0
	stateWriting = 1
	stateSealed  = 2
)

// Header offsets.
const (
	offMagic          = 0
	offVersion        = 4
	offHeaderSize     = 6
	offByteOrder      = 8
	offTsCol          = 10
	offFlags          = 12
	offNumCols        = 16
	offNumChunks      = 20
	offChunkSize      = 24
	offDataOffset     = 28
	offWriteChunk     = 32
	offRefcount       = 36
	offCreatorPID     = 40
	offCreatorStart   = 48
	offChunksRecycled = 56
	offRowsOverwrote  = 60
	offLeaseOffset    = 64
	offLeaseSlots     = 68
	offInstanceID     = 72
	offWritesBlocked  = 80
	offLeaseFailures  = 88
)

// Chunk header offsets (relative to the chunk start).
const (
	chGeneration = 0
	chUsed       = 8
	chRowCount   = 12
	chState      = 16
	chMinTs      = 24
	chMaxTs      = 32
)

func align64(n int) int { return (n + 63) &^ 63 }

// Geometry is where things are in a file with the given shape.
type Geometry struct {
	NumCols, NumChunks, ChunkSize int
	LeaseOffset, DataOffset       int
}

// NewGeometry computes the offsets of a table.
func NewGeometry(numCols, numChunks, chunkSize int) Geometry {
	g := Geometry{NumCols: numCols, NumChunks: numChunks, ChunkSize: chunkSize}
	g.LeaseOffset = align64(HeaderSize + DescSize*numCols)
	g.DataOffset = align64(g.LeaseOffset + LeaseSlots*LeaseSlotSize*numChunks)
	return g
}

// FileSize is the size of the whole file.
func (g Geometry) FileSize() int { return g.DataOffset + g.ChunkSize*g.NumChunks }

// ChunkOffset is where chunk i starts.
func (g Geometry) ChunkOffset(i int) int { return g.DataOffset + i*g.ChunkSize }

// tsColumn is index+1 of the first I64 column named timestamp or ts.
func tsColumn(cols []Column) int {
	for i, c := range cols {
		if c.Type == I64 && (c.Name == "timestamp" || c.Name == "ts") {
			return i + 1
		}
	}
	return 0
}

// Sizing of Python rings, as Probing's writers do it (contract §4.9).
const (
	DefaultTableMB = 20
	minCapacity    = 32 << 10
	maxCapacity    = 1 << 30
	minChunk       = 4 << 10
	maxChunk       = 8 << 20
	PythonChunks   = 8
)

// SizeFor returns the chunk size and count of an 8-chunk ring of the given
// capacity, clamped like Probing's Python writer.
func SizeFor(capacity int64) (chunkSize, numChunks int) {
	capacity = min(max(capacity, minCapacity), maxCapacity)
	chunk := min(max(capacity/PythonChunks, minChunk), maxChunk)
	return int(chunk &^ 7), PythonChunks
}

// explicitCapacity are the tables Probing sizes explicitly.
var explicitCapacity = map[string]int64{
	"torch_trace":       8 << 20,
	"torch_step_timing": 2 << 20,
	"variables":         4 << 20,
}

// CapacityFor is a Python table's ring capacity: its explicit size if it
// has one, else PROBING_TABLE_DEFAULT_MB MiB (default 20). A bad value is an
// error naming the variable.
func CapacityFor(table string, getenv func(string) string) (int64, error) {
	if c, ok := explicitCapacity[table]; ok {
		return c, nil
	}
	mb := int64(DefaultTableMB)
	if v := getenv("PROBING_TABLE_DEFAULT_MB"); v != "" {
		var n int64
		if _, err := fmt.Sscan(v, &n); err != nil || n <= 0 || fmt.Sprint(n) != v {
			return 0, fmt.Errorf("PROBING_TABLE_DEFAULT_MB=%q: want a positive whole number of MiB", v)
		}
		mb = n
	}
	return mb << 20, nil
}

var le = binary.LittleEndian

const (
	minTsEmpty = math.MaxInt64
	maxTsEmpty = math.MinInt64
)
