package pickle

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the decoder: it must return a value or
// an error, never panic, and what it returns must print in bounded time.
//
//	go test ./flightrecorder/pickle -run '^$' -fuzz FuzzDecode -fuzztime 60s
func FuzzDecode(f *testing.F) {
	raw, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		f.Fatal(err)
	}
	var vectors []struct{ Pickle string }
	if err := json.Unmarshal(raw, &vectors); err != nil {
		f.Fatal(err)
	}
	for _, v := range vectors {
		b, _ := base64.StdEncoding.DecodeString(v.Pickle)
		f.Add(b)
	}
	w := NewWriter()
	w.BeginDict()
	w.String("entries")
	w.TypedIntList([]int64{1, 2, 3})
	w.EndDict()
	f.Add(w.Finish())
	// The attacks of bounds_test.go, small: alternating appends, a
	// memo-shared nested tuple as a dict key, set() of one shared list.
	f.Add(alternatingAppends(256))
	f.Add([]byte("\x80\x02)q\x00h\x00h\x00\x86q\x010h\x01h\x01\x86q\x020}h\x02Ns."))
	f.Add([]byte("\x80\x02](K\x01K\x02eq\x00h\x00\x85q\x01cbuiltins\nset\nq\x02]q\x03h\x03h\x02h\x01Ra0h\x03h\x02h\x01Ra0h\x03."))
	f.Add([]byte("\x80\x02](h\x00K\x01M\x02\x01j\x00\x00\x00\x00eq\x00](h\x00h\x00e."))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, _, err := Decode(data, Limits{MaxValues: 1 << 16})
		sameAsChecked(t, data, Limits{MaxValues: 1 << 16}, doc, err)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if r := doc.Repr(doc.Root); len(r) > 2*reprMaxLen+64 {
			t.Fatalf("repr not bounded: %d bytes", len(r))
		}
	})
}

// sameAsChecked decodes data again with the fast paths off: the result
// must be the same, to the error message.
func sameAsChecked(t *testing.T, data []byte, lim Limits, doc *Doc, err error) {
	t.Helper()
	slow := NewDecoder(lim)
	slow.d.checkedOnly = true
	sdoc, _, serr := slow.Decode(data)
	if (err == nil) != (serr == nil) || (err != nil && err.Error() != serr.Error()) {
		t.Fatalf("fast path: %v; checked path: %v", err, serr)
	}
	if err == nil && (doc.Repr(doc.Root) != sdoc.Repr(sdoc.Root) || doc.NumContainers() != sdoc.NumContainers() || doc.NumStrings() != sdoc.NumStrings()) {
		t.Fatalf("fast path decoded %s, checked path %s", doc.Repr(doc.Root), sdoc.Repr(sdoc.Root))
	}
}

// TestFastListSameAsChecked: torch-shaped dumps and the lists the fast
// path must leave to the checked one (a bad memo reference, a global, the
// value and depth limits) decode the same both ways.
func TestFastListSameAsChecked(t *testing.T) {
	w := NewWriter()
	w.BeginList()
	for i := 0; i < 300; i++ {
		w.BeginDict()
		w.String("name")
		w.String(fmt.Sprint("f", i))
		w.EndDict()
		w.Memo()
	}
	w.EndList()
	w.Memo()
	w.BeginList()
	for i := 0; i < 300; i += 7 {
		w.Get(uint32(2*i + 1))
	}
	w.Int(7)
	w.Int(700)
	w.EndList()
	w.Tuple2()
	torchLike := w.Finish()
	cases := map[string][]byte{
		"torch-like":   torchLike,
		"hole":         []byte("\x80\x02]q\x02](h\x01e."),
		"beyond memo":  []byte("\x80\x02]q\x00](j\x05\x00\x00\x00e."),
		"global":       []byte("\x80\x02ctorch.jit._pickle\nbuild_intlist\nq\x00](h\x00e."),
		"truncated":    []byte("\x80\x02](K"),
		"no appends":   []byte("\x80\x02](K\x01."),
		"nested depth": []byte("\x80\x02]q\x00](h\x00eq\x01](h\x01eq\x02](h\x02e."),
	}
	for name, data := range cases {
		for _, lim := range []Limits{{}, {MaxValues: 5}, {MaxDepth: 3}} {
			doc, _, err := Decode(data, lim)
			t.Run(name, func(t *testing.T) { sameAsChecked(t, data, lim, doc, err) })
		}
	}
}

// TestLengthClaimsAllocateNothing: a tiny input that claims a huge string,
// big int or memo index must fail before allocating for the claim.
func TestLengthClaimsAllocateNothing(t *testing.T) {
	inputs := []string{
		"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7f.",
		"\x80\x02X\xff\xff\xff\xff.",
		"\x80\x02\x8b\xff\xff\xff\x7f.",
		"\x80\x02Nr\xfe\xff\xff\xff.",
		"\x80\x02\x8e\xff\xff\xff\xff\xff\xff\xff\xff.",
	}
	for _, in := range inputs {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if _, _, err := Decode([]byte(in), Limits{}); err == nil {
			t.Errorf("%q decoded", in)
		}
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Errorf("%q allocated %d bytes", in, grew)
		}
	}
}
