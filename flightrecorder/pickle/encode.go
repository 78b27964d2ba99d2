package pickle

import (
	"encoding/binary"
	"math"
)

// Writer emits pickles the way torch's C++ (jit) pickler does for Flight
// Recorder dumps: protocol 2, every distinct string written once and then
// referenced through the memo, and a MARK before the items of every dict and
// list, even an empty one. It exists to build realistic synthetic dumps for
// tests and benchmarks; the production path only decodes.
type Writer struct {
	buf     []byte
	strMemo map[string]uint32
	next    uint32
}

// NewWriter starts a protocol-2 pickle.
func NewWriter() *Writer {
	return &Writer{buf: []byte{opProto, 2}, strMemo: map[string]uint32{}}
}

// Finish appends STOP and returns the pickle.
func (w *Writer) Finish() []byte { return append(w.buf, opStop) }

// None writes None.
func (w *Writer) None() { w.buf = append(w.buf, opNone) }

// Bool writes True or False.
func (w *Writer) Bool(b bool) {
	if b {
		w.buf = append(w.buf, opNewTrue)
	} else {
		w.buf = append(w.buf, opNewFalse)
	}
}

// Int writes n with the shortest opcode the C++ pickler would choose.
func (w *Writer) Int(n int64) {
	switch {
	case n >= 0 && n <= 0xff:
		w.buf = append(w.buf, opBinInt1, byte(n))
	case n >= 0 && n <= 0xffff:
		w.buf = append(w.buf, opBinInt2, byte(n), byte(n>>8))
	case n >= math.MinInt32 && n <= math.MaxInt32:
		w.buf = append(w.buf, opBinInt)
		w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(int32(n)))
	default:
		w.buf = append(w.buf, opLong1, 8)
		w.buf = binary.LittleEndian.AppendUint64(w.buf, uint64(n))
	}
}

// Float writes f as BINFLOAT (big-endian).
func (w *Writer) Float(f float64) {
	w.buf = append(w.buf, opBinFloat)
	w.buf = binary.BigEndian.AppendUint64(w.buf, math.Float64bits(f))
}

// String writes s once and memo references to it afterwards.
func (w *Writer) String(s string) {
	if id, ok := w.strMemo[s]; ok {
		w.get(id)
		return
	}
	w.buf = append(w.buf, opBinUnicode)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(len(s)))
	w.buf = append(w.buf, s...)
	w.strMemo[s] = w.Memo()
}

// Memo stores the value on top of the stack in the next memo slot and
// returns the slot, for Get.
func (w *Writer) Memo() uint32 {
	id := w.next
	w.next++
	if id <= 0xff {
		w.buf = append(w.buf, opBinPut, byte(id))
	} else {
		w.buf = append(w.buf, opLongBinPut)
		w.buf = binary.LittleEndian.AppendUint32(w.buf, id)
	}
	return id
}

// Get pushes the value stored in memo slot id (a shared container).
func (w *Writer) Get(id uint32) { w.get(id) }

func (w *Writer) get(id uint32) {
	if id <= 0xff {
		w.buf = append(w.buf, opBinGet, byte(id))
	} else {
		w.buf = append(w.buf, opLongBinGet)
		w.buf = binary.LittleEndian.AppendUint32(w.buf, id)
	}
}

// BeginDict opens a dict; write key, value, key, value ..., then EndDict.
func (w *Writer) BeginDict() { w.buf = append(w.buf, opEmptyDict, opMark) }

// EndDict closes the dict opened by BeginDict.
func (w *Writer) EndDict() { w.buf = append(w.buf, opSetItems) }

// BeginList opens a list; write its items, then EndList.
func (w *Writer) BeginList() { w.buf = append(w.buf, opEmptyList, opMark) }

// EndList closes the list opened by BeginList.
func (w *Writer) EndList() { w.buf = append(w.buf, opAppends) }

// Tuple2 packs the two values written before it into a tuple.
func (w *Writer) Tuple2() { w.buf = append(w.buf, opTuple2) }

// TypedIntList writes ns in the older typed-list form:
// torch.jit._pickle.build_intlist([...]).
func (w *Writer) TypedIntList(ns []int64) {
	const key = "\x00global:build_intlist"
	if id, ok := w.strMemo[key]; ok {
		w.get(id)
	} else {
		w.buf = append(w.buf, opGlobal)
		w.buf = append(w.buf, "torch.jit._pickle\nbuild_intlist\n"...)
		w.strMemo[key] = w.Memo()
	}
	w.buf = append(w.buf, opMark)
	w.BeginList()
	for _, n := range ns {
		w.Int(n)
	}
	w.EndList()
	w.buf = append(w.buf, opTuple, opReduce)
}
