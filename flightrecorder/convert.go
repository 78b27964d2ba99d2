package flightrecorder

import (
	"context"
	"fmt"

	"github.com/probing-mcp/probing-mcp/flightrecorder/pickle"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// converter turns decoded entry dicts into Entries. What entries share is
// interned in the load's table (intern.go); the converter caches, per dump,
// the table's ids for the decoded strings, containers and stacks it has
// met, so that the table's lock is taken only for what is new to the dump.
type converter struct {
	d    *Dump
	doc  *pickle.Doc
	tab  *interner
	keys []entryKey // by decoded string index
	// strIDs holds the table's id + 1 of each decoded string, by index.
	strIDs   []uint32
	textIDs  map[string]uint32      // the same for strings that are not decoded ones (JSON, numbers)
	frames   map[int64]uint32       // frame dict -> the table's frame id
	stackIDs map[uint64][]stackSeen // by the hash of a stack's frame-dict ids
	missing  map[string]int
	names    map[uint32]bool // profiling names met in this dump (warned about once)
	// Per-dump interning of shapes and dtype lists: most entries share a
	// handful, and equal ones become one slice, whose address then stands
	// for its contents.
	shapes        map[shapeKey][][]int64
	tensorSets    map[tensorKey]uint32
	threads       map[Thread]uint32
	lastTensorKey tensorKey
	lastTensors   uint32
	dtypes        map[uint32][]string // one-name dtype lists, by the name's id in the table
	empty         uint32              // the table's id of ""
	lastThread    Thread
	lastShapeKey  shapeKey
	lastShape     [][]int64
	lastThreadID  uint32
	shared        map[sharedKey]*Shared
	lastKey       sharedKey
	lastShared    *Shared
	// Conversions of containers the pickle may share through the memo,
	// by container: a memo reference then costs a slice header, not a copy.
	sizesByID  map[int64][][]int64
	shapeByID  map[int64][]int64
	dtypesByID map[int64][]string
}

// stackSeen is a stack met in this dump: its frame dicts and its id.
type stackSeen struct {
	dicts []int64
	id    uint32
}

// shapeKey identifies a one-tensor shape of up to 4 dimensions.
type shapeKey struct {
	n int
	d [4]int64
}

func newConverter(d *Dump, doc *pickle.Doc, tab *interner) *converter {
	if tab == nil {
		tab = newInterner()
	}
	c := &converter{d: d, doc: doc, tab: tab, textIDs: map[string]uint32{}, frames: map[int64]uint32{}, stackIDs: map[uint64][]stackSeen{},
		missing: map[string]int{}, names: map[uint32]bool{}, shapes: map[shapeKey][][]int64{}, tensorSets: map[tensorKey]uint32{},
		threads: map[Thread]uint32{}, dtypes: map[uint32][]string{}, shared: map[sharedKey]*Shared{},
		sizesByID: map[int64][][]int64{}, shapeByID: map[int64][]int64{}, dtypesByID: map[int64][]string{}}
	c.empty = tab.str("")
	return c
}

// entries converts the dump's entry dicts. An Entry is made only for what
// the analysis can use, so that memory follows the bytes that wrote it: a
// dict met again (a memo reference, two bytes) is the same record and is
// counted once; an entry without process_group belongs to no group (fr_trace
// raises KeyError on it) and is counted, not kept.
func (c *converter) entries(ctx context.Context, list pickle.Value) ([]Entry, error) {
	doc := c.doc
	items := doc.Items(list)
	seen := make([]uint64, (doc.NumContainers()+63)/64) // by container: first sighting
	first := func(ev pickle.Value) bool {
		id := doc.ID(ev)
		w, bit := id/64, uint64(1)<<(id%64)
		if seen[w]&bit != 0 {
			return false
		}
		seen[w] |= bit
		return true
	}
	// First pass: refuse non-dicts and count the distinct ones that hold a
	// key, so that the entries are allocated once. An entry the second pass
	// then finds without a process_group leaves its slot to the next one:
	// such a dict costs as many bytes as a kept entry, so the slots follow
	// the input either way.
	n, repeats := 0, 0
	for i, ev := range items {
		if ev.Kind() != pickle.Dict {
			return nil, fmt.Errorf("entries[%d] is a %v, want a dict", i, ev.Kind())
		}
		switch {
		case !first(ev):
			repeats++
		case doc.Len(ev) > 0:
			n++
		}
	}
	clear(seen)
	out := make([]Entry, n)
	j := 0
	for i, ev := range items {
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if !first(ev) {
			continue
		}
		if doc.Len(ev) == 0 {
			c.d.noGroup++
			continue
		}
		kept, err := c.entry(&out[j], ev)
		if err != nil {
			return nil, fmt.Errorf("entries[%d]: %w", i, err)
		}
		if kept {
			j++
		} else {
			out[j] = Entry{}
			c.d.noGroup++
		}
	}
	out = out[:j]
	if repeats > 0 {
		c.d.warn("%d entries repeat an earlier entry of the list (memo references to one pickled dict); each record is kept once", repeats)
	}
	return out, nil
}

// entryKey numbers the entry keys the converter reads, so that the hot
// loop switches on a small integer rather than comparing strings.
type entryKey uint8

const (
	keyUnknown entryKey = iota // not looked up yet
	keyOther                   // a key the converter does not read
	kRecordId
	kPgId
	kProcessGroup
	kCollectiveSeqId
	kP2pSeqId
	kOpId
	kProfilingName
	kTimeCreatedNs
	kDurationMs
	kInputSizes
	kOutputSizes
	kInputDtypes
	kOutputDtypes
	kState
	kTimeDiscoveredStartedNs
	kTimeDiscoveredCompletedNs
	kRetired
	kTimeoutMs
	kIsP2p
	kThreadName
	kThreadId
	kFrames
)

var entryKeys = map[string]entryKey{
	"record_id":                    kRecordId,
	"pg_id":                        kPgId,
	"process_group":                kProcessGroup,
	"collective_seq_id":            kCollectiveSeqId,
	"p2p_seq_id":                   kP2pSeqId,
	"op_id":                        kOpId,
	"profiling_name":               kProfilingName,
	"time_created_ns":              kTimeCreatedNs,
	"duration_ms":                  kDurationMs,
	"input_sizes":                  kInputSizes,
	"output_sizes":                 kOutputSizes,
	"input_dtypes":                 kInputDtypes,
	"output_dtypes":                kOutputDtypes,
	"state":                        kState,
	"time_discovered_started_ns":   kTimeDiscoveredStartedNs,
	"time_discovered_completed_ns": kTimeDiscoveredCompletedNs,
	"retired":                      kRetired,
	"timeout_ms":                   kTimeoutMs,
	"is_p2p":                       kIsP2p,
	"thread_name":                  kThreadName,
	"thread_id":                    kThreadId,
	"frames":                       kFrames,
}

// keyOf returns an entry key, looked up once per distinct decoded string:
// torch writes each key once and refers to it through the memo.
func (c *converter) keyOf(k pickle.Value) entryKey {
	i, ok := c.doc.StrIndex(k)
	if !ok {
		return keyOther
	}
	if i < len(c.keys) && c.keys[i] != keyUnknown {
		return c.keys[i]
	}
	c.keys = grownTo(c.keys, c.doc.NumStrings())
	s, _ := c.doc.Str(k)
	key, known := entryKeys[s]
	if !known {
		key = keyOther
	}
	c.keys[i] = key
	return key
}

// strID is the table's id of a decoded string, or of the text of a
// number (scalarText), looked up once per distinct string of the dump.
func (c *converter) strID(v pickle.Value) uint32 {
	i, ok := c.doc.StrIndex(v)
	if !ok {
		return c.textID(scalarText(c.doc, v))
	}
	if i < len(c.strIDs) && c.strIDs[i] != 0 {
		return c.strIDs[i] - 1
	}
	c.strIDs = grownTo(c.strIDs, c.doc.NumStrings())
	s, _ := c.doc.Str(v)
	id := c.tab.str(s)
	c.strIDs[i] = id + 1
	return id
}

// strOnly is strID for a string, and the id of "" for anything else (a
// profiling name or a state that is not a string names nothing).
func (c *converter) strOnly(v pickle.Value) uint32 {
	if v.Kind() != pickle.String {
		return c.empty
	}
	return c.strID(v)
}

// grownTo extends s with zero values to length n.
func grownTo[T any](s []T, n int) []T {
	if len(s) < n {
		s = append(s, make([]T, n-len(s))...)
	}
	return s
}

// textID is the table's id of s, cached per dump.
func (c *converter) textID(s string) uint32 {
	if id, ok := c.textIDs[s]; ok {
		return id
	}
	id := c.tab.str(s)
	c.textIDs[s] = id
	return id
}

// sharedOf returns the interned Shared for k. A profiling name the dump
// has not used before is checked for an unknown comm library.
func (c *converter) sharedOf(k sharedKey) *Shared {
	if k == c.lastKey && c.lastShared != nil {
		return c.lastShared // consecutive entries are often alike
	}
	sh, ok := c.shared[k]
	if !ok {
		sh, _ = c.tab.get(k)
		c.shared[k] = sh
		if !c.names[k.name] {
			c.names[k.name] = true
			if op := sh.Op; op.Err == "" && !KnownBackends[op.Backend] {
				c.d.warn("unrecognized comm library %s in profiling name %s", jobtext.Quote(op.Backend, jobtext.Name), jobtext.Quote(sh.ProfilingName, jobtext.Name))
			}
		}
	}
	c.lastKey, c.lastShared = k, sh
	return sh
}

func (c *converter) finish() {
	if c.d.noGroup > 0 {
		c.d.warn("%d entries have no \"process_group\": not analysed (fr_trace stops at them)", c.d.noGroup)
	}
	for _, k := range sortedKeys(c.missing) {
		c.d.warn("%d entries have no %s", c.missing[k], jobtext.Quote(k, jobtext.Name))
	}
}

// entry bits that must be present for the matching rules to mean anything.
const (
	hasPG = 1 << iota // only the pickle path tracks it: entries without one are not kept
	hasSeq
	hasName
	hasState
	hasSizes
)

// entry converts one entry dict into e. It reports false, leaving e to be
// cleared, for an entry without a process_group.
func (c *converter) entry(e *Entry, ev pickle.Value) (bool, error) {
	e.RecordID, e.PGID, e.CollectiveSeqID, e.P2PSeqID, e.OpID = -1, -1, -1, -1, -1
	var t Tensors
	var k sharedKey
	var threadName, threadID string
	seen := 0
	doc := c.doc
	intOf := func(v pickle.Value, def int64) (int64, bool) { return intOf(doc, v, def) }
	k.name, k.state = c.empty, c.empty
	pairs := doc.Pairs(ev)
	for i := 0; i+1 < len(pairs); i += 2 {
		kv, v := pairs[i], pairs[i+1]
		switch c.keyOf(kv) {
		case keyOther:
		case kRecordId:
			e.RecordID, _ = intOf(v, -1)
		case kPgId:
			e.PGID, _ = intOf(v, -1)
		case kProcessGroup:
			items := doc.Items(v)
			if len(items) != 2 {
				return false, fmt.Errorf("process_group is a %v of %d items, want (name, desc)", v.Kind(), doc.Len(v))
			}
			k.pg, k.desc = c.strID(items[0]), c.strID(items[1])
			seen |= hasPG
		case kCollectiveSeqId:
			e.CollectiveSeqID, _ = intOf(v, -1)
			seen |= hasSeq
		case kP2pSeqId:
			e.P2PSeqID, _ = intOf(v, -1)
		case kOpId:
			e.OpID, _ = intOf(v, -1)
		case kProfilingName:
			k.name = c.strOnly(v)
			seen |= hasName
		case kTimeCreatedNs:
			e.TimeCreatedNs, _ = intOf(v, 0)
		case kDurationMs:
			e.DurationMs, e.HasDuration = v.Float()
		case kInputSizes:
			t.InputSizes = c.sizes(v)
			seen |= hasSizes
		case kOutputSizes:
			t.OutputSizes = c.sizes(v)
		case kInputDtypes:
			t.InputDtypes = c.dtypeList(v)
		case kOutputDtypes:
			t.OutputDtypes = c.dtypeList(v)
		case kState:
			k.state = c.strOnly(v)
			seen |= hasState
		case kTimeDiscoveredStartedNs:
			e.TimeStartedNs, _ = intOf(v, 0)
		case kTimeDiscoveredCompletedNs:
			e.TimeCompletedNs, _ = intOf(v, 0)
		case kRetired:
			b, _ := intOf(v, 0)
			e.Retired = b != 0
		case kTimeoutMs:
			k.timeout, _ = intOf(v, 0)
		case kIsP2p:
			b, _ := intOf(v, 0)
			k.p2p = b != 0
		case kThreadName:
			threadName = scalarText(doc, v)
		case kThreadId:
			threadID = scalarText(doc, v)
		case kFrames:
			k.stack = c.stack(v)
		}
	}
	if seen&hasPG == 0 {
		return false, nil
	}
	c.checkRequired(seen)
	k.tensors = c.tensors(t)
	k.thread = c.thread(threadName, threadID)
	e.Shared = c.sharedOf(k)
	return true, nil
}

// tensorKey identifies a Tensors by the identity of its interned parts.
type tensorKey struct {
	in, out, idt, odt     uintptr
	inN, outN, idtN, odtN int
	inNil, outNil         bool
	idtNil, odtNil        bool
}

// tensors returns the table's id of t. Shapes and dtype lists are
// interned per dump already, so their addresses stand for their contents.
func (c *converter) tensors(t Tensors) uint32 {
	k := tensorKey{addr(t.InputSizes), addr(t.OutputSizes), addr(t.InputDtypes), addr(t.OutputDtypes),
		len(t.InputSizes), len(t.OutputSizes), len(t.InputDtypes), len(t.OutputDtypes),
		t.InputSizes == nil, t.OutputSizes == nil, t.InputDtypes == nil, t.OutputDtypes == nil}
	if k == c.lastTensorKey && c.lastTensors != 0 {
		return c.lastTensors // consecutive entries usually share their tensors
	}
	id, ok := c.tensorSets[k]
	if !ok {
		id = c.tab.tensorsID(&t)
		c.tensorSets[k] = id
	}
	c.lastTensorKey, c.lastTensors = k, id
	return id
}

// thread returns the table's id of a thread, 0 when the dump names none.
func (c *converter) thread(name, id string) uint32 {
	if name == "" && id == "" {
		return 0
	}
	k := Thread{name, id}
	if k == c.lastThread && c.lastThreadID != 0 {
		return c.lastThreadID // memoised strings: a pointer compare
	}
	n, ok := c.threads[k]
	if !ok {
		n = c.tab.threadID(&k)
		c.threads[k] = n
	}
	c.lastThread, c.lastThreadID = k, n
	return n
}

// checkRequired counts the fields an entry lacks (entries without a
// process_group are not converted at all).
func (c *converter) checkRequired(seen int) {
	if seen&hasSeq == 0 {
		c.missing["collective_seq_id"]++
	}
	if seen&hasName == 0 {
		c.missing["profiling_name"]++
	}
	if seen&hasState == 0 {
		c.missing["state"]++
	}
	if seen&hasSizes == 0 {
		c.missing["input_sizes"]++
	}
}

// sizes converts a list of shapes, sharing the common one-tensor shapes.
func (c *converter) sizes(v pickle.Value) [][]int64 {
	doc := c.doc
	items := doc.Items(v)
	if len(items) == 1 {
		dims := doc.Items(items[0])
		if len(dims) <= 4 {
			k := shapeKey{n: len(dims)}
			ok := true
			for j, n := range dims {
				x, isInt := n.Int()
				k.d[j], ok = x, ok && isInt
			}
			if ok {
				if k == c.lastShapeKey && c.lastShape != nil {
					return c.lastShape // input and output are usually alike
				}
				s, hit := c.shapes[k]
				if !hit {
					s = [][]int64{append([]int64{}, k.d[:k.n]...)}
					c.shapes[k] = s
				}
				c.lastShapeKey, c.lastShape = k, s
				return s
			}
		}
	}
	if s, ok := c.sizesByID[doc.ID(v)]; ok {
		return s
	}
	out := make([][]int64, len(items))
	for i, s := range items {
		if shape, ok := c.shapeByID[doc.ID(s)]; ok { // a shape met before
			out[i] = shape
			continue
		}
		dims := doc.Items(s)
		shape := make([]int64, len(dims))
		for j, n := range dims {
			shape[j], _ = intOf(doc, n, 0)
		}
		out[i] = shape
		if len(dims) > 0 {
			c.shapeByID[doc.ID(s)] = shape
		}
	}
	if len(items) > 0 {
		c.sizesByID[doc.ID(v)] = out
	}
	return out
}

// dtypeList accepts a list of names, or one bare name (fr_trace's tests).
func (c *converter) dtypeList(v pickle.Value) []string {
	doc := c.doc
	if s, ok := doc.Str(v); ok {
		return []string{s}
	}
	items := doc.Items(v)
	if len(items) == 1 {
		// The common case: one memoised dtype name, found by its id.
		id := c.strID(items[0])
		if l, ok := c.dtypes[id]; ok {
			return l
		}
		l := []string{scalarText(doc, items[0])}
		c.dtypes[id] = l
		return l
	}
	if l, ok := c.dtypesByID[doc.ID(v)]; ok {
		return l
	}
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = scalarText(doc, it)
	}
	if len(items) > 0 {
		c.dtypesByID[doc.ID(v)] = out
	}
	return out
}

// stack returns the table's id of a list of frame dicts. torch writes each
// frame dict once and refers to it through the memo afterwards, while every
// entry has a list of its own: a stack met before is found by the ids of
// its dicts, without converting a frame.
func (c *converter) stack(v pickle.Value) uint32 {
	doc := c.doc
	if v.Kind() != pickle.List && v.Kind() != pickle.Tuple {
		return 0
	}
	items := doc.Items(v)
	h := uint64(14695981039346656037)
	for _, f := range items {
		h = (h ^ uint64(doc.ID(f))) * 1099511628211
	}
	for _, s := range c.stackIDs[h] {
		if len(s.dicts) == len(items) && sameIDs(doc, s.dicts, items) {
			return s.id
		}
	}
	ids := make([]uint32, 0, len(items))
	dicts := make([]int64, len(items))
	for i, f := range items {
		dicts[i] = doc.ID(f)
		if f.Kind() != pickle.Dict {
			continue
		}
		id, ok := c.frames[doc.ID(f)]
		if !ok {
			var fr Frame
			if x, ok := doc.Get(f, "name"); ok {
				fr.Name = scalarText(doc, x)
			}
			if x, ok := doc.Get(f, "filename"); ok {
				fr.Filename = scalarText(doc, x)
			}
			if x, ok := doc.Get(f, "line"); ok {
				fr.Line, _ = intOf(doc, x, 0)
			}
			id = c.tab.frame(fr)
			c.frames[doc.ID(f)] = id
		}
		ids = append(ids, id)
	}
	id := c.tab.stack(ids)
	c.stackIDs[h] = append(c.stackIDs[h], stackSeen{dicts, id})
	return id
}

// sameIDs: a stack met before has exactly these frame dicts. Items that
// are not containers (ID -1) add no frame, so they compare equal.
func sameIDs(doc *pickle.Doc, ids []int64, items []pickle.Value) bool {
	for i, f := range items {
		if doc.ID(f) != ids[i] {
			return false
		}
	}
	return true
}
