package pickle

import (
	"math"
	"slices"
)

// Containers: how decoded lists, tuples, dicts and sets are built and
// grown in the document's one arena, within the depth and size limits.

// newValue returns an empty container of the given kind.
func (d *decoder) newValue(kind Kind) Value {
	doc := d.doc
	doc.conts = append(doc.conts, container{off: int32(len(doc.arena)), depth: 1})
	return Value{kind: kind, n: int64(len(doc.conts) - 1)}
}

// grow appends items to container ci. Items stay contiguous. A container
// fills in its reserved room, or in place when it is the last one in the
// arena; otherwise it moves to the end. Pickles usually fill a container
// once, right after building its children: an empty container moves with
// no spare room. One that already holds items and grows again (containers
// appended to in turn) moves with room for as many again, so that its
// moves cost O(its final size) in all, not O(n^2).
func (d *decoder) grow(ci int64, items []Value) error {
	doc := d.doc
	c := &doc.conts[ci]
	need := int64(c.n) + int64(len(items))
	if int64(len(doc.arena))+2*need > math.MaxInt32 {
		return d.fail("more than 2^30 container items")
	}
	end := int(c.off + c.n)
	switch {
	case need <= int64(c.cap):
		copy(doc.arena[end:], items)
	case int(c.off+c.cap) == len(doc.arena):
		doc.arena = append(doc.arena[:end], items...)
		c.cap = int32(need)
	default:
		room := need
		if c.n > 0 {
			room = 2 * need
		}
		off := len(doc.arena)
		doc.arena = append(doc.arena, doc.arena[c.off:end]...)
		doc.arena = append(doc.arena, items...)
		doc.arena = slices.Grow(doc.arena, int(room-need))
		doc.arena = doc.arena[:off+int(room)] // the spare slots are never read
		c.off, c.cap = int32(off), int32(room)
	}
	c.n = int32(need)
	return nil
}

func (d *decoder) newContainer(kind Kind, items []Value) (Value, error) {
	v := d.newValue(kind)
	for i := range items {
		if err := d.nest(v.n, items[i]); err != nil {
			return Value{}, err
		}
	}
	return v, d.grow(v.n, items)
}

// nest records that child now lives inside container parent and enforces
// the depth limit. Walkers of decoded values still bound their own depth: a
// memo reference can close a cycle that this bookkeeping cannot see.
func (d *decoder) nest(parent int64, child Value) error {
	if !child.isContainer() {
		return nil
	}
	if child.n == parent {
		return d.fail("container contains itself")
	}
	cd, p := d.doc.conts[child.n].depth, &d.doc.conts[parent]
	if cd+1 > p.depth {
		p.depth = cd + 1
		if int(p.depth) > d.lim.MaxDepth {
			return d.fail("nesting deeper than %d", d.lim.MaxDepth)
		}
	}
	return nil
}

func (d *decoder) hashable(v Value) bool {
	switch v.kind {
	case None, Bool, Int, BigInt, Float, String, Bytes:
		return true
	case Tuple:
		// Decided when the tuple was built, from its items' own flags: a
		// walk here would follow memo-shared tuples down every path, 2^depth
		// of them.
		return !d.doc.conts[v.n].unhashable
	case Set: // only frozensets reach a key position through FROZENSET
		return true
	}
	return false
}

func (d *decoder) appendTo(target Value, items []Value) error {
	if target.kind != List {
		return d.fail("append to %v, want list", target.kind)
	}
	for i := range items {
		if err := d.nest(target.n, items[i]); err != nil {
			return err
		}
	}
	return d.grow(target.n, items)
}

func (d *decoder) setItems(target Value, kv []Value) error {
	if target.kind != Dict {
		return d.fail("set item on %v, want dict", target.kind)
	}
	if len(kv)%2 != 0 {
		return d.fail("odd number of items (%d) for key/value pairs", len(kv))
	}
	for i := 0; i < len(kv); i += 2 {
		if !d.hashable(kv[i]) {
			return d.fail("unhashable dict key of type %v", kv[i].kind)
		}
		if err := d.nest(target.n, kv[i+1]); err != nil {
			return err
		}
	}
	return d.grow(target.n, kv)
}

func (d *decoder) addItems(target Value, items []Value) error {
	if target.kind != Set || d.doc.conts[target.n].frozen {
		return d.fail("add items to %v, want set", target.kind)
	}
	for _, it := range items {
		if !d.hashable(it) {
			return d.fail("unhashable set element of type %v", it.kind)
		}
	}
	return d.grow(target.n, items)
}
