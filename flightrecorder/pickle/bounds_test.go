package pickle

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// allocated runs f and returns the bytes it allocated (TotalAlloc, which
// also bounds the peak). Tests using it do not run in parallel.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// alternatingAppends is two memoised lists appended to in turn: BINGET 0,
// BININT1 7, APPEND, POP, BINGET 1, BININT1 7, APPEND, POP, ... (12 bytes
// a round). Every append lands on a list that is not the last one stored.
func alternatingAppends(size int) []byte {
	b := []byte("\x80\x02]q\x00]q\x010") // two lists in memo 0 and 1; one left on the stack
	for len(b) < size {
		b = append(b, "h\x00K\x07a0h\x01K\x07a0"...)
	}
	return append(b, '.')
}

// TestAlternatingAppendsLinear: container growth is amortised, so memory
// follows the input even when appends alternate between containers. The
// old decoder moved the list to the end of its storage on every append:
// 48 KB took 350 MB, 192 KB over 5 GB.
func TestAlternatingAppendsLinear(t *testing.T) {
	dec := NewDecoder(Limits{})
	for _, size := range []int{24 << 10, 48 << 10, 96 << 10, 192 << 10} {
		data := alternatingAppends(size)
		var doc *Doc
		var err error
		got := allocated(func() { doc, _, err = dec.Decode(data) })
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		// 16 bytes a value, a few copies while containers double: 64x the
		// input is generous; the old code took 7000x at 48 KB.
		if ceiling := uint64(64*len(data) + 1<<20); got > ceiling {
			t.Fatalf("%d-byte pickle allocated %d bytes, over %d", len(data), got, ceiling)
		}
		t.Logf("%d-byte pickle: %d bytes allocated", len(data), got)
		rounds := (len(data) - 10) / 12
		if n := doc.Len(doc.Root); n != rounds {
			t.Fatalf("%d bytes: list 1 holds %d items, want %d", size, n, rounds)
		}
		for i, v := range doc.Items(doc.Root) {
			if n, _ := v.Int(); n != 7 {
				t.Fatalf("item %d is %v", i, doc.Repr(v))
			}
		}
	}
}

// TestInterleavedContainersKeepItems: containers that grow in turn, by
// APPEND, APPENDS and SETITEMS, keep their items in order (the relocation
// with spare capacity must not mix them up).
func TestInterleavedContainersKeepItems(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("\x80\x02]q\x00}q\x01]q\x02") // list 0, dict 1, list 2 (left on the stack)
	for i := 0; i < 300; i++ {
		k := byte(i % 200)
		b.WriteString("h\x00K")
		b.WriteByte(k)
		b.WriteString("a0h\x01(K")
		b.WriteByte(k)
		b.WriteString("K")
		b.WriteByte(k)
		b.WriteString("u0h\x02(K")
		b.WriteByte(k)
		b.WriteString("K")
		b.WriteByte(k)
		b.WriteString("e0")
	}
	b.WriteString("0h\x00h\x01h\x02\x87.") // (list 0, dict 1, list 2)
	doc, _, err := Decode(b.Bytes(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	items := doc.Items(doc.Root)
	l0, d1, l2 := items[0], items[1], items[2]
	if doc.Len(l0) != 300 || doc.Len(d1) != 300 || doc.Len(l2) != 600 {
		t.Fatalf("lengths %d %d %d", doc.Len(l0), doc.Len(d1), doc.Len(l2))
	}
	for i := 0; i < 300; i++ {
		want := int64(i % 200)
		if n, _ := doc.Items(l0)[i].Int(); n != want {
			t.Fatalf("list 0 item %d = %d", i, n)
		}
		k, v := doc.Pair(d1, i)
		if kn, _ := k.Int(); kn != want {
			t.Fatalf("dict key %d = %d", i, kn)
		}
		if vn, _ := v.Int(); vn != want {
			t.Fatalf("dict value %d = %d", i, vn)
		}
		if n, _ := doc.Items(l2)[2*i+1].Int(); n != want {
			t.Fatalf("list 2 item %d = %d", 2*i+1, n)
		}
	}
}

// decodeWithin decodes data in a goroutine and fails the test if that has
// not finished after a minute: the inputs here take microseconds when the
// work is linear and years when it is not.
func decodeWithin(t *testing.T, data []byte) (*Doc, error) {
	t.Helper()
	type result struct {
		doc *Doc
		err error
	}
	done := make(chan result, 1)
	go func() {
		doc, _, err := Decode(data, Limits{})
		done <- result{doc, err}
	}()
	select {
	case r := <-done:
		return r.doc, r.err
	case <-time.After(time.Minute):
		t.Fatal("decoding did not finish: the work is not linear in the input")
		return nil, nil
	}
}

// TestNestedTupleKeyIsLinear: a dict key that is a tuple of a tuple of ...
// each level holding the level below twice (through the memo) is 2^40
// paths; checking it is hashable must not walk them. 250 bytes.
func TestNestedTupleKeyIsLinear(t *testing.T) {
	b := []byte("\x80\x02)q\x00") // T0 = ()
	for i := 1; i <= 40; i++ {
		b = append(b, 'h', byte(i-1), 'h', byte(i-1), opTuple2, 'q', byte(i), '0')
	}
	b = append(b, '}', 'h', 40, 'N', 's', '.')
	doc, err := decodeWithin(t, b)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Len(doc.Root) != 1 {
		t.Fatalf("dict of %d pairs", doc.Len(doc.Root))
	}
	// A tuple holding a list is still refused as a key, however deep.
	bad := []byte("\x80\x02]\x85q\x00")
	for i := 1; i <= 5; i++ {
		bad = append(bad, 'h', byte(i-1), 'h', byte(i-1), opTuple2, 'q', byte(i), '0')
	}
	bad = append(bad, '}', 'h', 5, 'N', 's', '.')
	if _, err := decodeWithin(t, bad); err == nil || !strings.Contains(err.Error(), "unhashable dict key") {
		t.Fatalf("tuple holding a list as a key: %v", err)
	}
}

// TestSetOfSharedListIsBounded: builtins.set(L) copies L's items, and a
// pickle can call it again and again on one memoised list (5 bytes a
// call). Copies count against a budget of the input size.
func TestSetOfSharedListIsBounded(t *testing.T) {
	b := []byte("\x80\x02](")
	for i := 0; i < 1000; i++ {
		b = append(b, 'K', byte(i))
	}
	b = append(b, "eq\x00h\x00\x85q\x01cbuiltins\nset\nq\x02]q\x03"...) // L, (L,), set, and an output list
	for i := 0; i < 20000; i++ {
		b = append(b, "h\x03h\x02h\x01Ra0"...)
	}
	b = append(b, "h\x03."...)
	var err error
	got := allocated(func() { _, _, err = Decode(b, Limits{}) })
	if ceiling := uint64(64*len(b) + 1<<20); got > ceiling {
		t.Fatalf("%d-byte pickle allocated %d bytes, over %d", len(b), got, ceiling)
	}
	t.Logf("%d-byte pickle: %d bytes allocated", len(b), got)
	if err == nil || !strings.Contains(err.Error(), "copied") {
		t.Fatalf("err = %v, want the copy budget named", err)
	}
}
