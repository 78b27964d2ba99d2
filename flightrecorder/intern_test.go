package flightrecorder

import (
	"testing"
	"unsafe"
)

// TestEntrySize: a 16384-rank job holds 33 M entries; what they share is
// behind one pointer, and an entry stays 88 bytes.
func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(Entry{}); n > 88 {
		t.Errorf("Entry is %d bytes, want at most 88: put what repeats across records in Shared", n)
	}
}

// TestInternAcrossDumps: two dumps of one load that record the same op
// point to one Shared and one stack; rewriting one dump's frames leaves
// the other's alone.
func TestInternAcrossDumps(t *testing.T) {
	tab := newInterner()
	mk := func() *Dump {
		d := &Dump{}
		c := newConverter(d, nil, tab)
		k := sharedKey{pg: c.textID("0"), desc: c.textID("default_pg"), name: c.textID("nccl:all_reduce"), state: c.textID("completed"),
			stack:   tab.stackOf([]Frame{{"all_reduce", "c10d.py", 1}, {"wrapper", "/x/probing_mcp_agent/collectives.py", 2}, {"main", "train.py", 3}}),
			tensors: tab.tensorsID(&Tensors{InputSizes: [][]int64{{4}}, OutputSizes: [][]int64{{4}}})}
		d.Entries = []Entry{{Shared: c.sharedOf(k)}, {Shared: c.sharedOf(k)}}
		return d
	}
	a, b := mk(), mk()
	if a.Entries[0].Shared != b.Entries[1].Shared || &a.Entries[0].Frames[0] != &b.Entries[0].Frames[0] {
		t.Fatal("equal entries of two dumps do not share")
	}
	if a.Entries[0].Sig == 0 || !a.Entries[0].sigSimple {
		t.Errorf("sig %d simple %v", a.Entries[0].Sig, a.Entries[0].sigSimple)
	}
	a.RewriteFrames(func(fs []Frame) []Frame { return fs[:1] })
	if len(a.Entries[0].Frames) != 1 || len(a.Entries[1].Frames) != 1 || a.Entries[0].Shared != a.Entries[1].Shared {
		t.Errorf("rewritten: %v / %v", a.Entries[0].Frames, a.Entries[1].Frames)
	}
	if len(b.Entries[0].Frames) != 3 {
		t.Errorf("rewriting one dump changed another's frames: %v", b.Entries[0].Frames)
	}
}
