// Package pickle decodes the safe subset of Python's pickle format that
// PyTorch writes for Flight Recorder dumps (torch's C++ "jit" pickler and
// CPython pickles of protocols 2 to 5).
//
// A pickle is a program for a stack machine, and an untrusted one: this
// decoder never imports or calls anything. The only callables it accepts are
// a short allow-list of pure list/set builders (see allowedGlobals); every
// other global, and every object-construction opcode, is refused with an
// error that names the offset and the opcode.
//
// Values are returned as a small tagged union (Value) instead of Go
// interfaces: a dump holds millions of small integers, and boxing each one in
// an interface would dominate the decode time.
package pickle

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Kind is the type of a decoded Value.
type Kind uint8

// The kinds a pickle can decode to.
const (
	None Kind = iota
	Bool
	Int
	BigInt // an integer that does not fit int64; its decimal text is kept
	Float
	String
	Bytes
	List
	Tuple
	Dict
	Set
	global   // a callable on the stack; never escapes Decode
	memoHole // an unset memo slot
)

var kindNames = [...]string{"None", "bool", "int", "int", "float", "str", "bytes", "list", "tuple", "dict", "set", "global"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is one decoded pickle value: a kind and a number. The number is the
// value of an int or bool, the bits of a float, or an index into the Doc for
// strings and containers. Values hold no pointers, so the millions of them
// in a large dump cost the garbage collector nothing. The zero Value is
// None.
type Value struct {
	kind Kind
	n    int64
}

// Doc is a decoded pickle: the root value and the storage its strings and
// containers live in. Read values through the Doc's methods.
type Doc struct {
	Root  Value
	strs  []string
	conts []container
	arena []Value // container items, each container's items contiguous
}

// container is a list, tuple, dict or set: items arena[off:off+n] (a dict
// lays its pairs out flat as k0, v0, k1, v1, ...). arena[off:off+cap] is
// reserved for it, so that a container that grows while others are built
// moves only when its room doubles (see decoder.grow).
type container struct {
	off, n, cap int32
	depth       uint16 // nesting depth below this container, for the depth limit
	frozen      bool   // a tuple or frozenset: no more items
	unhashable  bool   // a tuple holding an unhashable value, found when it was built
}

// Kind reports the type of v.
func (v Value) Kind() Kind { return v.kind }

// IsNone reports whether v is None.
func (v Value) IsNone() bool { return v.kind == None }

// Int returns v as an int64. Bools convert to 0/1 (as in Python); ok is false
// for every other kind.
func (v Value) Int() (int64, bool) {
	if v.kind == Int || v.kind == Bool {
		return v.n, true
	}
	return 0, false
}

// Float returns v as a float64; ints convert. ok is false for other kinds.
func (v Value) Float() (float64, bool) {
	switch v.kind {
	case Float:
		return math.Float64frombits(uint64(v.n)), true
	case Int, Bool:
		return float64(v.n), true
	}
	return 0, false
}

// Bool returns v as a bool; ok is false unless v is a bool.
func (v Value) Bool() (bool, bool) {
	if v.kind == Bool {
		return v.n != 0, true
	}
	return false, false
}

func (v Value) isContainer() bool {
	switch v.kind {
	case List, Tuple, Dict, Set:
		return true
	}
	return false
}

// Str returns the text of a String value; ok is false for other kinds.
func (d *Doc) Str(v Value) (string, bool) {
	if v.kind == String {
		return d.strs[v.n], true
	}
	return "", false
}

// StrIndex numbers the string behind a String value: equal numbers mean the
// same decoded string (a memo reference). It lets callers cache facts per
// distinct string; ok is false for other kinds.
func (d *Doc) StrIndex(v Value) (int, bool) {
	if v.kind == String {
		return int(v.n), true
	}
	return 0, false
}

// NumStrings is the number of strings decoded so far (StrIndex < it).
func (d *Doc) NumStrings() int { return len(d.strs) }

// NumContainers is the number of containers decoded (ID < it).
func (d *Doc) NumContainers() int { return len(d.conts) }

// Text returns the text of a String, Bytes or BigInt (decimal) value.
func (d *Doc) Text(v Value) (string, bool) {
	switch v.kind {
	case String, Bytes, BigInt, global:
		return d.strs[v.n], true
	}
	return "", false
}

// Len is the number of elements of a list, tuple or set, or of pairs of a
// dict; 0 for scalars.
func (d *Doc) Len(v Value) int {
	if !v.isContainer() {
		return 0
	}
	n := int(d.conts[v.n].n)
	if v.kind == Dict {
		return n / 2
	}
	return n
}

// Items returns the elements of a list, tuple or set. The slice is shared
// with the Doc and must not be modified.
func (d *Doc) Items(v Value) []Value {
	if !v.isContainer() || v.kind == Dict {
		return nil
	}
	c := d.conts[v.n]
	return d.arena[c.off : c.off+c.n : c.off+c.n]
}

// Pair returns the i-th key and value of a dict, in insertion order.
func (d *Doc) Pair(v Value, i int) (key, val Value) {
	c := d.conts[v.n]
	return d.arena[int(c.off)+2*i], d.arena[int(c.off)+2*i+1]
}

// Pairs returns a dict's keys and values laid out flat (k0, v0, k1, v1,
// ...), in insertion order; nil for anything else. The slice is shared
// with the Doc and must not be modified.
func (d *Doc) Pairs(v Value) []Value {
	if v.kind != Dict {
		return nil
	}
	c := d.conts[v.n]
	return d.arena[c.off : c.off+c.n : c.off+c.n]
}

// Get returns the value of a dict's string key. Later duplicates win, as in
// Python. It scans linearly: use Pair to walk large dicts.
func (d *Doc) Get(v Value, key string) (Value, bool) {
	if v.kind != Dict {
		return Value{}, false
	}
	c := d.conts[v.n]
	for i := int(c.off + c.n - 2); i >= int(c.off); i -= 2 {
		if k := d.arena[i]; k.kind == String && d.strs[k.n] == key {
			return d.arena[i+1], true
		}
	}
	return Value{}, false
}

// ID identifies the container behind a list, tuple, dict or set value (-1
// for scalars). Pickles share one container through the memo (torch shares
// stack-frame dicts between entries); callers use ID to convert a shared
// container once.
func (d *Doc) ID(v Value) int64 {
	if v.isContainer() {
		return v.n
	}
	return -1
}

// Repr renders v like Python's repr, bounded in depth and length so that
// hostile cyclic or huge values still print quickly.
func (d *Doc) Repr(v Value) string {
	var b strings.Builder
	d.repr(&b, v, 0)
	return b.String()
}

// clip shortens long strings for repr.
func clip(s string) string {
	if len(s) > 256 {
		return s[:256] + "..."
	}
	return s
}

const reprMaxDepth = 8
const reprMaxLen = 4096

func (d *Doc) repr(b *strings.Builder, v Value, depth int) {
	if b.Len() > reprMaxLen {
		b.WriteString("...")
		return
	}
	switch v.kind {
	case None:
		b.WriteString("None")
	case Bool:
		if v.n != 0 {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case Int:
		b.WriteString(strconv.FormatInt(v.n, 10))
	case BigInt:
		b.WriteString(d.strs[v.n])
	case Float:
		f, _ := v.Float()
		b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	case String:
		b.WriteString(strconv.Quote(clip(d.strs[v.n])))
	case Bytes:
		b.WriteString("b" + strconv.Quote(clip(d.strs[v.n])))
	case global:
		b.WriteString("<global " + d.strs[v.n] + ">")
	case List, Tuple, Set, Dict:
		open, close := "[", "]"
		switch v.kind {
		case Tuple:
			open, close = "(", ")"
		case Set, Dict:
			open, close = "{", "}"
		}
		b.WriteString(open)
		c := d.conts[v.n]
		items := d.arena[c.off : c.off+c.n]
		if depth >= reprMaxDepth {
			b.WriteString("...")
		} else {
			for i := 0; i < len(items); i++ {
				if i > 0 {
					b.WriteString(", ")
				}
				if b.Len() > reprMaxLen {
					b.WriteString("...") // the rest of a wide container costs nothing
					break
				}
				d.repr(b, items[i], depth+1)
				if v.kind == Dict {
					i++
					b.WriteString(": ")
					d.repr(b, items[i], depth+1)
				}
			}
		}
		b.WriteString(close)
	default:
		fmt.Fprintf(b, "<%v>", v.kind)
	}
}

// Constructors, used by tests and by callers that build values by hand.

// IntValue returns an Int value.
func IntValue(n int64) Value { return Value{kind: Int, n: n} }

// FloatValue returns a Float value.
func FloatValue(f float64) Value { return Value{kind: Float, n: int64(math.Float64bits(f))} }

// BoolValue returns a Bool value.
func BoolValue(b bool) Value {
	if b {
		return Value{kind: Bool, n: 1}
	}
	return Value{kind: Bool}
}
