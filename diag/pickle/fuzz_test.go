package pickle

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"runtime"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the decoder: it must return a value or
// an error, never panic, and what it returns must print in bounded time.
//
//	go test ./diag/pickle -run '^$' -fuzz FuzzDecode -fuzztime 60s
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
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, _, err := Decode(data, Limits{MaxValues: 1 << 16})
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
