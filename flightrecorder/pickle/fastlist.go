package pickle

import "encoding/binary"

// fastList decodes, at an EMPTY_LIST, the shape torch writes for every
// entry's frames, shapes and dtypes: "EMPTY_LIST MARK item... APPENDS"
// where each item is a memo reference or a small scalar. It appends the
// items straight to the arena instead of pushing each on the stack and
// copying them at APPENDS. It reports false, having changed nothing, for
// anything else or anything the checked path must report (a bad memo
// reference, a limit), and the caller takes the checked path.
func (d *decoder) fastList() bool {
	data, p := d.data, d.pos
	if p >= len(data) || data[p] != opMark || len(d.marks) >= d.lim.MaxMarkDepth {
		return false
	}
	p++
	doc := d.doc
	off := len(doc.arena)
	depth := uint16(1)
	undo := func() bool {
		doc.arena = doc.arena[:off]
		return false
	}
	for p < len(data) {
		var v Value
		switch data[p] {
		case opAppends:
			n := len(doc.arena) - off
			if d.nvals+n+1 > d.lim.MaxValues || int64(len(doc.arena))+int64(n) > 1<<30 {
				return undo()
			}
			doc.conts = append(doc.conts, container{off: int32(off), n: int32(n), cap: int32(n), depth: depth})
			if len(d.stack) == cap(d.stack) {
				d.growStack()
			}
			d.stack = append(d.stack, Value{kind: List, n: int64(len(doc.conts) - 1)})
			d.nvals += n + 1
			d.pos = p + 1
			return true
		case opBinGet:
			if p+1 >= len(data) || int(data[p+1]) >= len(d.memo) {
				return undo()
			}
			v, p = d.memo[data[p+1]], p+2
		case opLongBinGet:
			if p+4 >= len(data) {
				return undo()
			}
			i := binary.LittleEndian.Uint32(data[p+1:])
			if uint64(i) >= uint64(len(d.memo)) {
				return undo()
			}
			v, p = d.memo[i], p+5
		case opBinInt1:
			if p+1 >= len(data) {
				return undo()
			}
			v, p = Value{kind: Int, n: int64(data[p+1])}, p+2
		case opBinInt2:
			if p+2 >= len(data) {
				return undo()
			}
			v, p = Value{kind: Int, n: int64(binary.LittleEndian.Uint16(data[p+1:]))}, p+3
		default:
			return undo()
		}
		switch {
		case v.kind == memoHole || v.kind == global:
			return undo()
		case v.isContainer():
			if cd := doc.conts[v.n].depth; cd+1 > depth {
				if int(cd)+1 > d.lim.MaxDepth {
					return undo()
				}
				depth = cd + 1
			}
		}
		doc.arena = append(doc.arena, v)
	}
	return undo()
}
