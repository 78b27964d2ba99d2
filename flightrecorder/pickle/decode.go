package pickle

import (
	"encoding/binary"
	"fmt"
	"math/big"
	"slices"
	"unicode/utf8"
)

// Limits bound the work and memory a hostile pickle can cost. Zero fields
// take the defaults of DefaultLimits.
type Limits struct {
	MaxDepth     int // container nesting (at most 32768)
	MaxValues    int // values created (each costs ~40 bytes)
	MaxMarkDepth int // open MARKs
	MaxBigIntLen int // bytes of one LONG1/LONG4 operand
}

// DefaultLimits are generous for Flight Recorder dumps (a 2000-entry dump is
// about 10^5 values and 5 levels deep) and small enough to refuse bombs.
var DefaultLimits = Limits{MaxDepth: 64, MaxValues: 1 << 25, MaxMarkDepth: 1024, MaxBigIntLen: 1024}

// maxDepth keeps a container's depth in its 16 bits (see container).
const maxDepth = 1 << 15

func (l Limits) withDefaults() Limits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultLimits.MaxDepth
	}
	l.MaxDepth = min(l.MaxDepth, maxDepth)
	if l.MaxValues <= 0 {
		l.MaxValues = DefaultLimits.MaxValues
	}
	if l.MaxMarkDepth <= 0 {
		l.MaxMarkDepth = DefaultLimits.MaxMarkDepth
	}
	if l.MaxBigIntLen <= 0 {
		l.MaxBigIntLen = DefaultLimits.MaxBigIntLen
	}
	return l
}

// Error is a decoding failure at a byte offset of the input.
type Error struct {
	Offset int
	Op     byte // the opcode being executed, 0 if none
	Msg    string
}

func (e *Error) Error() string {
	if name := opName(e.Op); name != "" {
		return fmt.Sprintf("pickle: offset %d: %s: %s", e.Offset, name, e.Msg)
	}
	return fmt.Sprintf("pickle: offset %d: %s", e.Offset, e.Msg)
}

// Stats describe what a decode saw; callers use them for data-quality notes.
type Stats struct {
	Protocol    int  // from PROTO, 0 if absent
	InvalidUTF8 int  // strings holding invalid UTF-8 (kept byte for byte)
	Globals     bool // allow-listed callables were used (torch typed lists)
}

// Decode runs the pickle in data and returns the document holding the value
// left by STOP. Bytes after STOP are ignored, as Python does.
func Decode(data []byte, lim Limits) (*Doc, Stats, error) {
	return NewDecoder(lim).Decode(data)
}

// Decoder decodes pickle after pickle reusing its buffers, which saves
// allocating and clearing megabytes per dump when loading a thousand ranks.
// The Doc it returns is valid until the next call to Decode.
type Decoder struct {
	d decoder
}

// NewDecoder returns a Decoder with the given limits.
func NewDecoder(lim Limits) *Decoder {
	return &Decoder{d: decoder{lim: lim.withDefaults(), doc: &Doc{}}}
}

// Decode decodes one pickle, reusing the buffers of the previous one.
func (dec *Decoder) Decode(data []byte) (*Doc, Stats, error) {
	d := &dec.d
	doc := d.doc
	clear(doc.strs) // drop references to the previous dump's strings
	doc.strs, doc.conts, doc.arena, doc.Root = doc.strs[:0], doc.conts[:0], doc.arena[:0], Value{}
	if need := min(len(data)/2, maxArenaGuess) + 16; cap(doc.arena) < need {
		// torch writes about two bytes per container item (memo references
		// and one-byte ints), so the arena rarely has to grow after this.
		// Past maxArenaGuess it grows as items come: a file of long strings
		// (rank lists) would otherwise reserve eight times its size.
		doc.arena = make([]Value, 0, need)
	}
	d.data, d.pos, d.op, d.opPos, d.nvals, d.copied, d.stats = data, 0, 0, 0, 0, 0, Stats{}
	d.stack, d.marks, d.memo = d.stack[:0], d.marks[:0], d.memo[:0]
	v, err := d.run()
	if err != nil {
		return nil, d.stats, err
	}
	doc.Root = v
	return doc, d.stats, nil
}

// maxArenaGuess caps the container items reserved before decoding (16
// MiB of Values).
const maxArenaGuess = 1 << 20

type decoder struct {
	doc    *Doc
	data   []byte
	pos    int
	op     byte
	opPos  int
	stack  []Value
	marks  []int
	memo   []Value
	nvals  int
	copied int // items reducers copied (see chargeCopies)
	lim    Limits
	stats  Stats
	// checkedOnly turns the fast paths off: tests decode both ways and
	// compare.
	checkedOnly bool
}

func (d *decoder) fail(format string, args ...any) error {
	return &Error{Offset: d.opPos, Op: d.op, Msg: fmt.Sprintf(format, args...)}
}

// need makes sure n more operand bytes exist, before anything is allocated
// from a length the input claims.
func (d *decoder) need(n uint64) error {
	if n > uint64(len(d.data)-d.pos) {
		return d.fail("truncated: operand needs %d bytes, %d left", n, len(d.data)-d.pos)
	}
	return nil
}

func (d *decoder) take(n uint64) ([]byte, error) {
	if err := d.need(n); err != nil {
		return nil, err
	}
	b := d.data[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return b, nil
}

func (d *decoder) push(v Value) error {
	d.nvals++
	if d.nvals > d.lim.MaxValues {
		return d.fail("more than %d values", d.lim.MaxValues)
	}
	if len(d.stack) == cap(d.stack) {
		d.growStack()
	}
	d.stack = append(d.stack, v)
	return nil
}

// growStack doubles the stack. append grows a large slice by a quarter at
// a time, which for a list of millions of items pushed before one APPENDS
// allocates five times the final stack in all; doubling allocates two.
func (d *decoder) growStack() {
	d.stack = slices.Grow(d.stack, max(len(d.stack), 64))
}

func (d *decoder) pop() (Value, error) {
	if len(d.stack) == 0 || (len(d.marks) > 0 && len(d.stack) <= d.marks[len(d.marks)-1]) {
		return Value{}, d.fail("stack underflow")
	}
	v := d.stack[len(d.stack)-1]
	d.stack = d.stack[:len(d.stack)-1]
	return v, nil
}

func (d *decoder) top() (*Value, error) {
	if len(d.stack) == 0 || (len(d.marks) > 0 && len(d.stack) <= d.marks[len(d.marks)-1]) {
		return nil, d.fail("stack underflow")
	}
	return &d.stack[len(d.stack)-1], nil
}

// popMark returns the values pushed since the last MARK and removes them and
// the mark. The returned slice aliases the stack; copy before pushing.
func (d *decoder) popMark() ([]Value, error) {
	if len(d.marks) == 0 {
		return nil, d.fail("no MARK on the stack")
	}
	m := d.marks[len(d.marks)-1]
	d.marks = d.marks[:len(d.marks)-1]
	items := d.stack[m:]
	d.stack = d.stack[:m]
	return items, nil
}

func (d *decoder) memoGet(idx uint64) error {
	if idx >= uint64(len(d.memo)) || d.memo[idx].kind == memoHole {
		return d.fail("memo key %d was never stored", idx)
	}
	return d.push(d.memo[idx])
}

func (d *decoder) memoPut(idx uint64) error {
	v, err := d.top()
	if err != nil {
		return err
	}
	// Writers number memo slots densely from 0, so an index beyond the input
	// length is an attack on the memo table, not a dump.
	if idx > uint64(len(d.data)) {
		return d.fail("memo key %d out of range", idx)
	}
	for uint64(len(d.memo)) <= idx {
		d.memo = append(d.memo, Value{kind: memoHole})
	}
	d.memo[idx] = *v
	return nil
}

func (d *decoder) strValue(kind Kind, s string) Value {
	d.doc.strs = append(d.doc.strs, s)
	return Value{kind: kind, n: int64(len(d.doc.strs) - 1)}
}

func (d *decoder) str(n uint64, kind Kind) error {
	b, err := d.take(n)
	if err != nil {
		return err
	}
	if kind == String && !utf8.Valid(b) {
		d.stats.InvalidUTF8++
	}
	return d.push(d.strValue(kind, string(b)))
}

func (d *decoder) long(n uint64) error {
	if n > uint64(d.lim.MaxBigIntLen) {
		return d.fail("integer of %d bytes is longer than the %d-byte limit", n, d.lim.MaxBigIntLen)
	}
	b, err := d.take(n)
	if err != nil {
		return err
	}
	if n <= 8 {
		var u uint64
		for i := int(n) - 1; i >= 0; i-- {
			u = u<<8 | uint64(b[i])
		}
		if n > 0 && n < 8 && b[n-1]&0x80 != 0 { // sign-extend
			u |= ^uint64(0) << (8 * n)
		}
		return d.push(Value{kind: Int, n: int64(u)})
	}
	// Two's complement little-endian of arbitrary length.
	be := make([]byte, n)
	for i := range b {
		be[int(n)-1-i] = b[i]
	}
	x := new(big.Int).SetBytes(be)
	if b[n-1]&0x80 != 0 {
		x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	}
	if x.IsInt64() {
		return d.push(Value{kind: Int, n: x.Int64()})
	}
	return d.push(d.strValue(BigInt, x.String()))
}

func (d *decoder) run() (Value, error) {
	data := d.data
	for {
		if d.pos >= len(data) {
			d.opPos, d.op = d.pos, 0
			return Value{}, d.fail("truncated: no STOP opcode")
		}
		d.opPos = d.pos
		op := data[d.pos]
		d.op = op
		d.pos++
		var err error
		switch op {
		case opProto:
			var b []byte
			if b, err = d.take(1); err == nil {
				if b[0] < 2 || b[0] > 5 {
					err = d.fail("unsupported protocol %d (want 2 to 5)", b[0])
				}
				d.stats.Protocol = int(b[0])
			}
		case opFrame:
			_, err = d.take(8) // framing is a hint for buffered readers; we hold it all
		case opStop:
			v, err := d.pop()
			if err != nil {
				return Value{}, err
			}
			if v.kind == global {
				return Value{}, d.fail("result is a bare callable")
			}
			return v, nil
		case opMark:
			if len(d.marks) >= d.lim.MaxMarkDepth {
				return Value{}, d.fail("more than %d nested MARKs", d.lim.MaxMarkDepth)
			}
			d.marks = append(d.marks, len(d.stack))
		case opPop:
			if len(d.marks) > 0 && d.marks[len(d.marks)-1] == len(d.stack) {
				d.marks = d.marks[:len(d.marks)-1] // Python pops a mark when it is on top
			} else {
				_, err = d.pop()
			}
		case opPopMark:
			_, err = d.popMark()
		case opDup:
			var v *Value
			if v, err = d.top(); err == nil {
				err = d.push(*v)
			}
		case opNone:
			err = d.push(Value{})
		case opNewTrue:
			err = d.push(Value{kind: Bool, n: 1})
		case opNewFalse:
			err = d.push(Value{kind: Bool})
		case opBinInt1:
			if d.pos < len(data) && d.nvals < d.lim.MaxValues {
				if len(d.stack) == cap(d.stack) {
					d.growStack()
				}
				d.stack = append(d.stack, Value{kind: Int, n: int64(data[d.pos])})
				d.pos++
				d.nvals++
				continue
			}
			var b []byte
			if b, err = d.take(1); err == nil {
				err = d.push(Value{kind: Int, n: int64(b[0])})
			}
		case opBinInt2:
			var b []byte
			if b, err = d.take(2); err == nil {
				err = d.push(Value{kind: Int, n: int64(binary.LittleEndian.Uint16(b))})
			}
		case opBinInt:
			var b []byte
			if b, err = d.take(4); err == nil {
				err = d.push(Value{kind: Int, n: int64(int32(binary.LittleEndian.Uint32(b)))})
			}
		case opLong1:
			var b []byte
			if b, err = d.take(1); err == nil {
				err = d.long(uint64(b[0]))
			}
		case opLong4:
			var b []byte
			if b, err = d.take(4); err == nil {
				n := int32(binary.LittleEndian.Uint32(b))
				if n < 0 {
					err = d.fail("negative length %d", n)
				} else {
					err = d.long(uint64(n))
				}
			}
		case opBinFloat:
			var b []byte
			if b, err = d.take(8); err == nil {
				err = d.push(Value{kind: Float, n: int64(binary.BigEndian.Uint64(b))})
			}
		case opShortBinUnicode, opShortBinBytes:
			var b []byte
			if b, err = d.take(1); err == nil {
				err = d.str(uint64(b[0]), strKind(op))
			}
		case opBinUnicode, opBinBytes:
			var b []byte
			if b, err = d.take(4); err == nil {
				err = d.str(uint64(binary.LittleEndian.Uint32(b)), strKind(op))
			}
		case opBinUnicode8, opBinBytes8:
			var b []byte
			if b, err = d.take(8); err == nil {
				err = d.str(binary.LittleEndian.Uint64(b), strKind(op))
			}
		case opEmptyList:
			if !d.checkedOnly && d.fastList() {
				continue
			}
			err = d.push(d.newValue(List))
		case opEmptyDict:
			err = d.push(d.newValue(Dict))
		case opEmptySet:
			err = d.push(d.newValue(Set))
		case opEmptyTuple:
			err = d.push(d.newValue(Tuple))
		case opAppend:
			var v Value
			if v, err = d.pop(); err == nil {
				var t *Value
				if t, err = d.top(); err == nil {
					err = d.appendTo(*t, []Value{v})
				}
			}
		case opAppends, opSetItems, opAddItems:
			var items []Value
			if items, err = d.popMark(); err == nil {
				var t *Value
				if t, err = d.top(); err == nil {
					switch op {
					case opAppends:
						err = d.appendTo(*t, items)
					case opSetItems:
						err = d.setItems(*t, items)
					default:
						err = d.addItems(*t, items)
					}
				}
			}
		case opSetItem:
			var k, v Value
			if v, err = d.pop(); err == nil {
				if k, err = d.pop(); err == nil {
					var t *Value
					if t, err = d.top(); err == nil {
						err = d.setItems(*t, []Value{k, v})
					}
				}
			}
		case opTuple, opFrozenSet:
			var items []Value
			if items, err = d.popMark(); err == nil {
				err = d.pushTuple(op, items)
			}
		case opTuple1, opTuple2, opTuple3:
			n := int(op-opTuple1) + 1
			if len(d.stack) < n || (len(d.marks) > 0 && len(d.stack)-n < d.marks[len(d.marks)-1]) {
				err = d.fail("stack underflow")
			} else {
				items := d.stack[len(d.stack)-n:]
				d.stack = d.stack[:len(d.stack)-n]
				err = d.pushTuple(op, items)
			}
		case opBinGet:
			// The commonest opcode (every repeated string is one): fast path
			// for a valid reference, the checked path for everything else.
			if d.pos < len(data) {
				if i := int(data[d.pos]); i < len(d.memo) && d.memo[i].kind != memoHole && d.nvals < d.lim.MaxValues {
					d.pos++
					d.nvals++
					if len(d.stack) == cap(d.stack) {
						d.growStack()
					}
					d.stack = append(d.stack, d.memo[i])
					continue
				}
			}
			var b []byte
			if b, err = d.take(1); err == nil {
				err = d.memoGet(uint64(b[0]))
			}
		case opLongBinGet:
			var b []byte
			if b, err = d.take(4); err == nil {
				err = d.memoGet(uint64(binary.LittleEndian.Uint32(b)))
			}
		case opBinPut:
			var b []byte
			if b, err = d.take(1); err == nil {
				err = d.memoPut(uint64(b[0]))
			}
		case opLongBinPut:
			var b []byte
			if b, err = d.take(4); err == nil {
				err = d.memoPut(uint64(binary.LittleEndian.Uint32(b)))
			}
		case opMemoize:
			err = d.memoPut(uint64(len(d.memo)))
		case opGlobal:
			err = d.global()
		case opStackGlobal:
			var mod, name Value
			if name, err = d.pop(); err == nil {
				if mod, err = d.pop(); err == nil {
					if mod.kind != String || name.kind != String {
						err = d.fail("module and name must be strings")
					} else {
						err = d.lookupGlobal(d.doc.strs[mod.n], d.doc.strs[name.n])
					}
				}
			}
		case opReduce:
			err = d.reduce()
		default:
			switch op {
			case opFloat, opInt, opLong, opString, opBinString, opShortBinString, opUnicode, opDict, opGet, opList, opPut:
				return Value{}, d.fail("text-protocol opcode not supported (dumps are pickled with protocol 2 or later)")
			}
			if opName(op) != "" {
				return Value{}, d.fail("refused: the decoder never builds objects or runs code from a dump")
			}
			return Value{}, d.fail("unknown opcode 0x%02x", op)
		}
		if err != nil {
			return Value{}, err
		}
	}
}

func strKind(op byte) Kind {
	switch op {
	case opShortBinBytes, opBinBytes, opBinBytes8:
		return Bytes
	}
	return String
}

func (d *decoder) pushTuple(op byte, items []Value) error {
	kind := Tuple
	if op == opFrozenSet {
		kind = Set
		for _, it := range items {
			if !d.hashable(it) {
				return d.fail("unhashable set element of type %v", it.kind)
			}
		}
	}
	v, err := d.newContainer(kind, items)
	if err != nil {
		return err
	}
	c := &d.doc.conts[v.n]
	c.frozen = true
	if kind == Tuple {
		for _, it := range items {
			if !d.hashable(it) {
				c.unhashable = true
				break
			}
		}
	}
	return d.push(v)
}

// global reads GLOBAL's two newline-terminated operands.
func (d *decoder) global() error {
	readLine := func() (string, error) {
		for i := d.pos; i < len(d.data) && i-d.pos < 256; i++ {
			if d.data[i] == '\n' {
				s := string(d.data[d.pos:i])
				d.pos = i + 1
				return s, nil
			}
		}
		return "", d.fail("truncated or overlong module/name line")
	}
	mod, err := readLine()
	if err != nil {
		return err
	}
	name, err := readLine()
	if err != nil {
		return err
	}
	return d.lookupGlobal(mod, name)
}

// allowedGlobals are the only callables a dump may name. Each is a pure
// constructor of a plain value.
var allowedGlobals = map[string]bool{
	"torch.jit._pickle.build_intlist":    true,
	"torch.jit._pickle.build_doublelist": true,
	"torch.jit._pickle.build_boollist":   true,
	"torch.jit._pickle.restore_type_tag": true,
	"builtins.set":                       true,
	"builtins.frozenset":                 true,
	"__builtin__.set":                    true,
	"__builtin__.frozenset":              true,
	"collections.OrderedDict":            true,
}

func (d *decoder) lookupGlobal(mod, name string) error {
	full := mod + "." + name
	if !allowedGlobals[full] {
		// The name is not quoted: errors never echo the input, which may be
		// any file handed over by mistake.
		return d.fail("forbidden global (a %d-byte module.name): a dump may only use torch.jit._pickle list builders, set and OrderedDict; it is never executed", len(full))
	}
	d.stats.Globals = true
	return d.push(d.strValue(global, full))
}

// chargeCopies counts the items a reducer copies out of an existing
// container. Every other value costs at least one input byte; copies cost
// none, since one memoised list can be passed to set() again and again, so
// they get a budget of their own: one item per two input bytes, what a
// pickle that writes each item once (two bytes at least) can need.
func (d *decoder) chargeCopies(fname string, n int) error {
	d.copied += n
	if limit := len(d.data)/2 + 16; d.copied > limit {
		return d.fail("%s copied %d items in all, over the %d that a %d-byte pickle can hold: one shared container rebuilt again and again is not a dump", fname, d.copied, limit, len(d.data))
	}
	return nil
}

func (d *decoder) reduce() error {
	args, err := d.pop()
	if err != nil {
		return err
	}
	fn, err := d.pop()
	if err != nil {
		return err
	}
	if fn.kind != global {
		return d.fail("REDUCE of a %v, want an allowed callable", fn.kind)
	}
	if args.kind != Tuple {
		return d.fail("REDUCE arguments are a %v, want a tuple", args.kind)
	}
	a := d.doc.Items(args)
	fname := d.doc.strs[fn.n]
	switch fname {
	case "torch.jit._pickle.build_intlist", "torch.jit._pickle.build_doublelist", "torch.jit._pickle.build_boollist":
		if len(a) != 1 || a[0].kind != List {
			return d.fail("%s expects one list argument", fname)
		}
		return d.push(a[0])
	case "torch.jit._pickle.restore_type_tag":
		if len(a) < 1 {
			return d.fail("%s expects a value and a type string", fname)
		}
		return d.push(a[0])
	case "builtins.set", "builtins.frozenset", "__builtin__.set", "__builtin__.frozenset":
		var items []Value
		if len(a) > 1 {
			return d.fail("%s takes at most one argument", fname)
		}
		if len(a) == 1 {
			switch a[0].kind {
			case List, Tuple, Set:
				if err := d.chargeCopies(fname, d.doc.Len(a[0])); err != nil {
					return err
				}
				items = append(items, d.doc.Items(a[0])...)
			default:
				return d.fail("%s of a %v, want an iterable", fname, a[0].kind)
			}
		}
		for _, it := range items {
			if !d.hashable(it) {
				return d.fail("unhashable set element of type %v", it.kind)
			}
		}
		v, err := d.newContainer(Set, items)
		if err != nil {
			return err
		}
		return d.push(v)
	case "collections.OrderedDict":
		dict, err := d.newContainer(Dict, nil)
		if err != nil {
			return err
		}
		if len(a) > 1 {
			return d.fail("OrderedDict takes at most one argument")
		}
		if len(a) == 1 {
			if a[0].kind != List && a[0].kind != Tuple {
				return d.fail("OrderedDict of a %v, want a list of pairs", a[0].kind)
			}
			if err := d.chargeCopies(fname, 2*d.doc.Len(a[0])); err != nil {
				return err
			}
			for _, p := range append([]Value(nil), d.doc.Items(a[0])...) {
				if (p.kind != Tuple && p.kind != List) || d.doc.Len(p) != 2 {
					return d.fail("OrderedDict item is not a pair")
				}
				if err := d.setItems(dict, append([]Value(nil), d.doc.Items(p)...)); err != nil {
					return err
				}
			}
		}
		return d.push(dict)
	}
	return d.fail("no reducer for %s", fname)
}
