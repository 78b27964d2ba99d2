package flightrecorder

import (
	"context"
	"fmt"

	"github.com/probing-mcp/probing-mcp/diag/pickle"
)

// converter turns decoded entry dicts into Entries, converting each shared
// container (frame stacks) and each distinct op name once.
type converter struct {
	d        *Dump
	doc      *pickle.Doc
	sigs     *sigCache
	ops      map[string]*OpName
	keys     []entryKey // by decoded string index
	opsByStr []*OpName  // by decoded string index
	stacks   map[int64][]Frame
	frames   map[int64]Frame
	missing  map[string]int
	// Interned values: most entries share a handful of shapes, dtype lists
	// and stacks; sharing them keeps a 1000-rank job's dumps in memory.
	shapes     map[shapeKey][][]int64
	tensorSets map[tensorKey]*Tensors
	threads    map[Thread]*Thread
	// one-entry caches in front of the maps
	lastTensorKey tensorKey
	lastTensors   *Tensors
	lastThread    *Thread
	dtypes        map[string][]string
	stackIDs      map[stackKey][]Frame
	// Conversions of containers the pickle may share through the memo,
	// by container: a memo reference then costs a slice header, not a copy.
	sizesByID  map[int64][][]int64
	shapeByID  map[int64][]int64
	dtypesByID map[int64][]string
}

// shapeKey identifies a one-tensor shape of up to 4 dimensions.
type shapeKey struct {
	n int
	d [4]int64
}

// stackKey identifies a stack of up to 8 shared frame dicts.
type stackKey struct {
	n  int
	id [8]int64
}

func newConverter(d *Dump, doc *pickle.Doc, sigs *sigTable) *converter {
	if sigs == nil {
		sigs = newSigTable()
	}
	return &converter{d: d, doc: doc, sigs: &sigCache{table: sigs, local: map[localSig]sigVal{}}, ops: map[string]*OpName{}, stacks: map[int64][]Frame{}, frames: map[int64]Frame{},
		missing: map[string]int{}, shapes: map[shapeKey][][]int64{}, tensorSets: map[tensorKey]*Tensors{}, threads: map[Thread]*Thread{}, dtypes: map[string][]string{}, stackIDs: map[stackKey][]Frame{},
		sizesByID: map[int64][][]int64{}, shapeByID: map[int64][]int64{}, dtypesByID: map[int64][]string{}}
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
	for len(c.keys) < c.doc.NumStrings() {
		c.keys = append(c.keys, keyUnknown)
	}
	s, _ := c.doc.Str(k)
	key, known := entryKeys[s]
	if !known {
		key = keyOther
	}
	c.keys[i] = key
	return key
}

// profilingName returns the name and its parsed op, parsed once per
// distinct decoded string.
func (c *converter) profilingName(v pickle.Value) (string, *OpName) {
	name, _ := c.doc.Str(v)
	i, ok := c.doc.StrIndex(v)
	if !ok {
		return name, c.opName(name)
	}
	for len(c.opsByStr) < c.doc.NumStrings() {
		c.opsByStr = append(c.opsByStr, nil)
	}
	if c.opsByStr[i] == nil {
		c.opsByStr[i] = c.opName(name)
	}
	return name, c.opsByStr[i]
}

func (c *converter) opName(name string) *OpName {
	op, ok := c.ops[name]
	if !ok {
		op = ParseOpName(name)
		c.ops[name] = op
		if op.Err == "" && !KnownBackends[op.Backend] {
			c.d.warn("unrecognized comm library %q in profiling name %q", op.Backend, name)
		}
	}
	return op
}

func (c *converter) finish() {
	if c.d.noGroup > 0 {
		c.d.warn("%d entries have no \"process_group\": not analysed (fr_trace stops at them)", c.d.noGroup)
	}
	for _, k := range sortedKeys(c.missing) {
		c.d.warn("%d entries have no %q", c.missing[k], k)
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
	var threadName, threadID string
	seen := 0
	doc := c.doc
	intOf := func(v pickle.Value, def int64) (int64, bool) { return intOf(doc, v, def) }
	scalarText := func(v pickle.Value) string { return scalarText(doc, v) }
	for i := 0; i < doc.Len(ev); i++ {
		k, v := doc.Pair(ev, i)
		switch c.keyOf(k) {
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
			e.PGName, e.PGDesc = scalarText(items[0]), scalarText(items[1])
			seen |= hasPG
		case kCollectiveSeqId:
			e.CollectiveSeqID, _ = intOf(v, -1)
			seen |= hasSeq
		case kP2pSeqId:
			e.P2PSeqID, _ = intOf(v, -1)
		case kOpId:
			e.OpID, _ = intOf(v, -1)
		case kProfilingName:
			e.ProfilingName, e.Op = c.profilingName(v)
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
			e.State, _ = doc.Str(v)
			seen |= hasState
		case kTimeDiscoveredStartedNs:
			e.TimeStartedNs, _ = intOf(v, 0)
		case kTimeDiscoveredCompletedNs:
			e.TimeCompletedNs, _ = intOf(v, 0)
		case kRetired:
			b, _ := intOf(v, 0)
			e.Retired = b != 0
		case kTimeoutMs:
			e.TimeoutMs, _ = intOf(v, 0)
		case kIsP2p:
			b, _ := intOf(v, 0)
			e.IsP2P = b != 0
		case kThreadName:
			threadName = scalarText(v)
		case kThreadId:
			threadID = scalarText(v)
		case kFrames:
			e.Frames = c.stack(v)
		}
	}
	if seen&hasPG == 0 {
		return false, nil
	}
	c.checkRequired(seen)
	e.Tensors = c.tensors(t)
	e.Thread = c.thread(threadName, threadID)
	c.finishEntry(e)
	return true, nil
}

// tensorKey identifies a Tensors by the identity of its interned parts.
type tensorKey struct {
	in, out, idt, odt     uintptr
	inN, outN, idtN, odtN int
}

// tensors returns a shared Tensors equal to t. Shapes and dtype lists are
// interned already, so their addresses stand for their contents.
func (c *converter) tensors(t Tensors) *Tensors {
	k := tensorKey{addr(t.InputSizes), addr(t.OutputSizes), addr(t.InputDtypes), addr(t.OutputDtypes),
		len(t.InputSizes), len(t.OutputSizes), len(t.InputDtypes), len(t.OutputDtypes)}
	if k == c.lastTensorKey && c.lastTensors != nil {
		return c.lastTensors // consecutive entries usually share their tensors
	}
	p, ok := c.tensorSets[k]
	if !ok {
		p = &t
		c.tensorSets[k] = p
	}
	c.lastTensorKey, c.lastTensors = k, p
	return p
}

// thread returns a shared Thread, or nil when the dump names none.
func (c *converter) thread(name, id string) *Thread {
	if name == "" && id == "" {
		return nil
	}
	if t := c.lastThread; t != nil && t.Name == name && t.ID == id {
		return t
	}
	k := Thread{name, id}
	p, ok := c.threads[k]
	if !ok {
		p = &k
		c.threads[k] = p
	}
	c.lastThread = p
	return p
}

// finishEntry gives every entry an op (so that code never meets a nil one)
// and numbers its signature.
func (c *converter) finishEntry(e *Entry) {
	if e.Op == nil {
		e.Op = c.opName(e.ProfilingName)
	}
	e.opBad = e.Op.Err != ""
	c.sigs.assign(e)
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
				if s, hit := c.shapes[k]; hit {
					return s
				}
				s := [][]int64{append([]int64{}, k.d[:k.n]...)}
				c.shapes[k] = s
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
		name := scalarText(doc, items[0])
		if l, ok := c.dtypes[name]; ok {
			return l
		}
		l := []string{name}
		c.dtypes[name] = l
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

// stack converts a list of frame dicts. torch shares the frame dicts
// between entries, so frames are converted once per dict, and a stack once
// per sequence of dicts.
func (c *converter) stack(v pickle.Value) []Frame {
	doc := c.doc
	if v.Kind() != pickle.List && v.Kind() != pickle.Tuple {
		return nil
	}
	if s, ok := c.stacks[doc.ID(v)]; ok {
		return s
	}
	items := doc.Items(v)
	var key stackKey
	if len(items) <= len(key.id) {
		key.n = len(items)
		for i, f := range items {
			key.id[i] = doc.ID(f)
		}
		if s, ok := c.stackIDs[key]; ok {
			return s
		}
	}
	out := make([]Frame, 0, len(items))
	for _, f := range items {
		if f.Kind() != pickle.Dict {
			continue
		}
		fr, ok := c.frames[doc.ID(f)]
		if !ok {
			if x, ok := doc.Get(f, "name"); ok {
				fr.Name = scalarText(doc, x)
			}
			if x, ok := doc.Get(f, "filename"); ok {
				fr.Filename = scalarText(doc, x)
			}
			if x, ok := doc.Get(f, "line"); ok {
				fr.Line, _ = intOf(doc, x, 0)
			}
			c.frames[doc.ID(f)] = fr
		}
		out = append(out, fr)
	}
	c.stacks[doc.ID(v)] = out
	if key.n == len(items) && len(items) <= len(key.id) {
		c.stackIDs[key] = out
	}
	return out
}
