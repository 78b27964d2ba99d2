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
	"unsafe"
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
	global // a callable on the stack; never escapes Decode
)

var kindNames = [...]string{"None", "bool", "int", "int", "float", "str", "bytes", "list", "tuple", "dict", "set", "global"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is one decoded pickle value. The zero Value is None.
type Value struct {
	kind Kind
	n    int64      // Bool (0/1), Int, Float (IEEE bits)
	s    string     // String, Bytes, BigInt (decimal), global (module.name)
	c    *container // List, Tuple, Dict, Set
}

// container holds the elements of a list, tuple or set, or the key/value
// pairs of a dict laid out flat as k0, v0, k1, v1, ...
type container struct {
	items []Value
	depth int // nesting depth below this container, for the depth limit
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

// Str returns the text of a String value; ok is false for other kinds.
func (v Value) Str() (string, bool) {
	if v.kind == String {
		return v.s, true
	}
	return "", false
}

// BigText returns the decimal text of a BigInt value.
func (v Value) BigText() (string, bool) {
	if v.kind == BigInt {
		return v.s, true
	}
	return "", false
}

// Len is the number of elements of a list, tuple or set, or of pairs of a
// dict; 0 for scalars.
func (v Value) Len() int {
	if v.c == nil {
		return 0
	}
	if v.kind == Dict {
		return len(v.c.items) / 2
	}
	return len(v.c.items)
}

// Items returns the elements of a list, tuple or set. The slice is shared
// with the decoded structure and must not be modified.
func (v Value) Items() []Value {
	if v.c == nil || v.kind == Dict {
		return nil
	}
	return v.c.items
}

// Pair returns the i-th key and value of a dict, in insertion order.
func (v Value) Pair(i int) (key, val Value) {
	return v.c.items[2*i], v.c.items[2*i+1]
}

// Get returns the value of a dict's string key. Later duplicates win, as in
// Python. It scans linearly: use Pair to walk large dicts.
func (v Value) Get(key string) (Value, bool) {
	if v.kind != Dict || v.c == nil {
		return Value{}, false
	}
	for i := len(v.c.items) - 2; i >= 0; i -= 2 {
		if k := v.c.items[i]; k.kind == String && k.s == key {
			return v.c.items[i+1], true
		}
	}
	return Value{}, false
}

// String renders v like Python's repr, bounded in depth and length so that
// hostile cyclic or huge values still print quickly.
func (v Value) String() string {
	var b strings.Builder
	v.repr(&b, 0)
	return b.String()
}

const reprMaxDepth = 8
const reprMaxLen = 4096

func (v Value) repr(b *strings.Builder, depth int) {
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
		b.WriteString(v.s)
	case Float:
		f, _ := v.Float()
		b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	case String:
		b.WriteString(strconv.Quote(v.s))
	case Bytes:
		b.WriteString("b" + strconv.Quote(v.s))
	case global:
		b.WriteString("<global " + v.s + ">")
	case List, Tuple, Set, Dict:
		open, close := "[", "]"
		switch v.kind {
		case Tuple:
			open, close = "(", ")"
		case Set, Dict:
			open, close = "{", "}"
		}
		b.WriteString(open)
		if depth >= reprMaxDepth {
			b.WriteString("...")
		} else if v.kind == Dict {
			for i := 0; i < v.Len(); i++ {
				if i > 0 {
					b.WriteString(", ")
				}
				k, val := v.Pair(i)
				k.repr(b, depth+1)
				b.WriteString(": ")
				val.repr(b, depth+1)
			}
		} else {
			for i, it := range v.c.items {
				if i > 0 {
					b.WriteString(", ")
				}
				it.repr(b, depth+1)
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

// StringValue returns a String value.
func StringValue(s string) Value { return Value{kind: String, s: s} }

// FloatValue returns a Float value.
func FloatValue(f float64) Value { return Value{kind: Float, n: int64(math.Float64bits(f))} }

// BoolValue returns a Bool value.
func BoolValue(b bool) Value {
	if b {
		return Value{kind: Bool, n: 1}
	}
	return Value{kind: Bool}
}

// ID identifies the container behind a list, tuple, dict or set value (0
// for scalars). Pickles share one container through the memo (torch shares
// stack-frame dicts between entries); callers use ID to convert a shared
// container once.
func (v Value) ID() uintptr { return uintptr(unsafe.Pointer(v.c)) }
