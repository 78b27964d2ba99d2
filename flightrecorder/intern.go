package flightrecorder

import (
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// interner is one load's table of what entries share: strings, stacks,
// tensors, threads and the Shared records built from them. Every dump of a
// load interns into the same table, so that a C++ stack that 16384 ranks
// recorded is held once, not once per rank. Decoders look things up in a
// per-dump cache first (see converter) and come here, under the lock, only
// for what the dump has not met before: a few hundred times per dump.
type interner struct {
	mu         sync.Mutex
	sigs       *sigTable
	strs       map[string]uint32
	strList    []string
	frameIDs   map[Frame]uint32
	frameList  []Frame
	stacks     map[string]uint32 // by the bytes of the frame ids
	stackList  [][]Frame         // id 0: no stack
	tensors    map[string]uint32
	tensorList []*Tensors // id 0: none recorded
	threads    map[Thread]uint32
	threadList []*Thread // id 0: none recorded
	ops        map[uint32]*OpName
	shared     map[sharedKey]*Shared
	rankLists  map[rankListText][]int
}

// sharedKey names a Shared by the ids of its parts.
type sharedKey struct {
	pg, desc, name, state  uint32
	stack, tensors, thread uint32
	p2p                    bool
	timeout                int64
}

func newInterner() *interner {
	return &interner{sigs: newSigTable(), strs: map[string]uint32{}, frameIDs: map[Frame]uint32{}, stacks: map[string]uint32{}, stackList: [][]Frame{nil},
		tensors: map[string]uint32{}, tensorList: []*Tensors{{}}, threads: map[Thread]uint32{}, threadList: []*Thread{nil},
		ops: map[uint32]*OpName{}, shared: map[sharedKey]*Shared{}, rankLists: map[rankListText][]int{}}
}

// str interns s; the table keeps its own copy, so that the decoded dump it
// came from can be let go.
func (t *interner) str(s string) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.strLocked(s)
}

func (t *interner) strLocked(s string) uint32 {
	if id, ok := t.strs[s]; ok {
		return id
	}
	s = strings.Clone(s)
	id := uint32(len(t.strList))
	t.strs[s] = id
	t.strList = append(t.strList, s)
	return id
}

// frame interns one frame.
func (t *interner) frame(f Frame) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.frameIDs[f]; ok {
		return id
	}
	own := Frame{Name: t.strList[t.strLocked(f.Name)], Filename: t.strList[t.strLocked(f.Filename)], Line: f.Line}
	id := uint32(len(t.frameList))
	t.frameIDs[own] = id
	t.frameList = append(t.frameList, own)
	return id
}

// stack interns a stack of interned frames (0 for none), keyed by their
// ids.
func (t *interner) stack(frames []uint32) uint32 {
	if len(frames) == 0 {
		return 0
	}
	key := unsafe.String((*byte)(unsafe.Pointer(unsafe.SliceData(frames))), 4*len(frames))
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.stacks[key]; ok {
		return id
	}
	own := make([]Frame, len(frames))
	for i, f := range frames {
		own[i] = t.frameList[f]
	}
	id := uint32(len(t.stackList))
	t.stacks[strings.Clone(key)] = id
	t.stackList = append(t.stackList, own)
	return id
}

// stackOf interns a stack given as frames (JSON dumps).
func (t *interner) stackOf(frames []Frame) uint32 {
	ids := make([]uint32, len(frames))
	for i, f := range frames {
		ids[i] = t.frame(f)
	}
	return t.stack(ids)
}

// tensorsID interns a Tensors by content.
func (t *interner) tensorsID(ts *Tensors) uint32 {
	var b strings.Builder
	for _, s := range [][][]int64{ts.InputSizes, ts.OutputSizes} {
		if s == nil {
			b.WriteString("-")
		} else {
			b.WriteString(pyList(s))
		}
		b.WriteByte('|')
	}
	for _, l := range [][]string{ts.InputDtypes, ts.OutputDtypes} {
		if l == nil {
			b.WriteString("-")
		} else {
			b.WriteString(strconv.Itoa(len(l)))
			for _, s := range l {
				b.WriteByte(0)
				b.WriteString(s)
			}
		}
		b.WriteByte('|')
	}
	key := b.String()
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.tensors[key]; ok {
		return id
	}
	own := &Tensors{InputSizes: cloneSizes(ts.InputSizes), OutputSizes: cloneSizes(ts.OutputSizes),
		InputDtypes: t.cloneStrs(ts.InputDtypes), OutputDtypes: t.cloneStrs(ts.OutputDtypes)}
	id := uint32(len(t.tensorList))
	t.tensors[key] = id
	t.tensorList = append(t.tensorList, own)
	return id
}

func cloneSizes(s [][]int64) [][]int64 {
	if s == nil {
		return nil
	}
	out := make([][]int64, len(s))
	for i, d := range s {
		out[i] = append(make([]int64, 0, len(d)), d...)
	}
	return out
}

func (t *interner) cloneStrs(l []string) []string {
	if l == nil {
		return nil
	}
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = t.strList[t.strLocked(s)]
	}
	return out
}

// threadID interns a thread (0 for none).
func (t *interner) threadID(th *Thread) uint32 {
	if th == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.threads[*th]; ok {
		return id
	}
	own := &Thread{Name: t.strList[t.strLocked(th.Name)], ID: t.strList[t.strLocked(th.ID)]}
	id := uint32(len(t.threadList))
	t.threads[*own] = id
	t.threadList = append(t.threadList, own)
	return id
}

// get returns the Shared for k, numbering its signature when it is new.
// fresh reports a Shared this call made.
func (t *interner) get(k sharedKey) (sh *Shared, fresh bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sh, ok := t.shared[k]; ok {
		return sh, false
	}
	name := t.strList[k.name]
	op, ok := t.ops[k.name]
	if !ok {
		op = ParseOpName(name)
		t.ops[k.name] = op
	}
	sh = &Shared{PGName: t.strList[k.pg], PGDesc: t.strList[k.desc], ProfilingName: name, State: t.strList[k.state],
		Op: op, Tensors: t.tensorList[k.tensors], Frames: t.stackList[k.stack], Thread: t.threadList[k.thread],
		TimeoutMs: k.timeout, IsP2P: k.p2p, opBad: op.Err != ""}
	t.sigs.assign(sh)
	t.shared[k] = sh
	return sh, true
}

// rankListText is a ranks value as the table keys it: the text of a list
// literal, a list's items as bytes, or the JSON.
type rankListText struct {
	form uint8 // 0: a pickle list literal, 1: a pickle list's items, 2: JSON
	text string
}

// rankList returns the ranks that key (a list literal, or a list's items
// as bytes) stands for, parsed once per load: every rank of a 16384-rank
// job writes the same 100 KB default-group list, and 16384 parsed copies
// would hold 2 GB. Failures are not kept: their text depends on the caller.
func (t *interner) rankList(key rankListText, parse func() ([]int, error)) ([]int, error) {
	if len(key.text) > 64 {
		// A digest keys a long list: the table would otherwise keep a copy
		// of every distinct list's text (8 MB for a million ranks). 128
		// bits seeded per process (see digestOf).
		key.text = fmt.Sprintf("%d:%016x%016x", len(key.text),
			maphash.String(digestSeeds[0], key.text), maphash.String(digestSeeds[1], key.text))
		key.form |= 0x80
	}
	t.mu.Lock()
	l, ok := t.rankLists[key]
	t.mu.Unlock()
	if ok {
		return l, nil
	}
	l, err := parse() // outside the lock: the other workers go on
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if prev, ok := t.rankLists[key]; ok {
		return prev, nil
	}
	key.text = strings.Clone(key.text)
	t.rankLists[key] = l
	return l, nil
}

// RewriteFrames replaces the stack of every entry of d with fn(stack),
// calling fn once per distinct Shared. Entries share their Shared with
// other dumps of the load, so a changed stack goes into a copy that only
// d's entries point to.
func (d *Dump) RewriteFrames(fn func([]Frame) []Frame) {
	done := map[*Shared]*Shared{}
	for i := range d.Entries {
		sh := d.Entries[i].Shared
		if sh == nil || len(sh.Frames) == 0 {
			continue
		}
		n, ok := done[sh]
		if !ok {
			n = sh
			if out := fn(sh.Frames); !slices.Equal(out, sh.Frames) {
				cp := *sh
				cp.Frames = out
				n = &cp
			}
			done[sh] = n
		}
		d.Entries[i].Shared = n
	}
}
