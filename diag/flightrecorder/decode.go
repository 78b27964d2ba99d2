package flightrecorder

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/diag/pickle"
)

// Supported format versions. Newer minors only add fields, so a newer minor
// is decoded with a warning; other majors are refused.
const (
	minMinor = 2
	maxMinor = 10
)

// Decode parses one dump, pickle or JSON (sniffed from the first byte). The
// rank is not in the dump; the caller sets it.
func Decode(data []byte) (*Dump, error) {
	return decodeWith(nil, nil, data)
}

// decodeWith decodes with a reusable pickle decoder (nil: a fresh one),
// numbering signatures in sigs (nil: a table of its own).
func decodeWith(dec *pickle.Decoder, sigs *sigTable, data []byte) (*Dump, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	switch {
	case len(data) > 0 && data[0] == 0x80:
		if dec == nil {
			dec = pickle.NewDecoder(pickle.Limits{})
		}
		return decodePickle(dec, sigs, data)
	case len(trimmed) > 0 && trimmed[0] == '{':
		return decodeJSON(sigs, trimmed)
	case len(data) == 0:
		return nil, errors.New("empty file")
	}
	return nil, fmt.Errorf("not a Flight Recorder dump: starts with %q, want a pickle (0x80) or a JSON object", head(data))
}

func head(b []byte) string {
	if len(b) > 8 {
		b = b[:8]
	}
	return string(b)
}

// finishVersion validates the version string and records it.
func (d *Dump) finishVersion() error {
	if d.Version == "" {
		return errors.New(`no "version" key: not a Flight Recorder dump`)
	}
	maj, min, err := ParseVersion(d.Version)
	if err != nil {
		return err
	}
	d.Major, d.Minor = maj, min
	if maj != 2 || min < minMinor {
		return fmt.Errorf("unsupported Flight Recorder version %s: this analyzer reads 2.%d to 2.%d", d.Version, minMinor, maxMinor)
	}
	if min > maxMinor {
		d.warn("version %s is newer than 2.%d: decoded as 2.%d, unknown fields ignored", d.Version, maxMinor, maxMinor)
	}
	return nil
}

func (d *Dump) warn(format string, args ...any) {
	if len(d.Warnings) < 20 {
		d.Warnings = append(d.Warnings, fmt.Sprintf(format, args...))
	} else if len(d.Warnings) == 20 {
		d.Warnings = append(d.Warnings, "more warnings omitted")
	}
}

// ---- pickle ----

func decodePickle(dec *pickle.Decoder, sigs *sigTable, data []byte) (*Dump, error) {
	doc, st, err := dec.Decode(data)
	if err != nil {
		return nil, err
	}
	root := doc.Root
	if root.Kind() != pickle.Dict {
		return nil, fmt.Errorf("pickle holds a %v, want the dump's dict", root.Kind())
	}
	d := &Dump{Format: "pickle"}
	if st.InvalidUTF8 > 0 {
		d.warn("%d strings hold invalid UTF-8 (kept byte for byte)", st.InvalidUTF8)
	}
	var entries pickle.Value
	for i := 0; i < doc.Len(root); i++ {
		k, v := doc.Pair(root, i)
		key, _ := doc.Str(k)
		switch key {
		case "version":
			d.Version = scalarText(doc, v)
		case "comm_lib_version", "nccl_version":
			d.CommLibVersion = scalarText(doc, v)
		case "pg_config":
			d.PGConfig, err = pgConfigFromPickle(doc, v)
		case "pg_status":
			d.PGStatus, err = pgStatusFromPickle(doc, v)
		case "entries":
			entries, d.HasEntries = v, true
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
	}
	if err := d.finishVersion(); err != nil {
		return nil, err
	}
	if !d.HasEntries {
		d.warn(`no "entries" key (dumped without collectives?): nothing to match`)
		return d, nil
	}
	if entries.Kind() != pickle.List {
		return nil, fmt.Errorf("entries is a %v, want a list", entries.Kind())
	}
	c := newConverter(d, doc, sigs)
	d.Entries = make([]Entry, doc.Len(entries))
	for i, ev := range doc.Items(entries) {
		if ev.Kind() != pickle.Dict {
			return nil, fmt.Errorf("entries[%d] is a %v, want a dict", i, ev.Kind())
		}
		if err := c.entry(&d.Entries[i], ev); err != nil {
			return nil, fmt.Errorf("entries[%d]: %w", i, err)
		}
	}
	c.finish()
	return d, nil
}

// scalarText renders a str, int or float as text (versions are strings, but
// hand-made dumps sometimes hold 2.8 as a float).
func scalarText(doc *pickle.Doc, v pickle.Value) string {
	switch v.Kind() {
	case pickle.String:
		s, _ := doc.Str(v)
		return s
	case pickle.Int:
		n, _ := v.Int()
		return strconv.FormatInt(n, 10)
	case pickle.Float:
		f, _ := v.Float()
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return ""
}

// intOf accepts ints, bools and decimal strings (fr_trace's own tests store
// sequence ids as strings); None and anything else give def, ok=false.
func intOf(doc *pickle.Doc, v pickle.Value, def int64) (int64, bool) {
	switch v.Kind() {
	case pickle.Int, pickle.Bool:
		n, _ := v.Int()
		return n, true
	case pickle.String:
		s, _ := doc.Str(v)
		if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
			return n, true
		}
	case pickle.Float:
		f, _ := v.Float()
		return int64(f), true
	}
	return def, false
}

func pgConfigFromPickle(doc *pickle.Doc, v pickle.Value) ([]PGConfig, error) {
	if v.Kind() != pickle.Dict {
		return nil, fmt.Errorf("is a %v, want a dict", v.Kind())
	}
	out := make([]PGConfig, 0, doc.Len(v))
	for i := 0; i < doc.Len(v); i++ {
		k, cfg := doc.Pair(v, i)
		name := scalarText(doc, k)
		if cfg.Kind() != pickle.Dict {
			return nil, fmt.Errorf("group %q is a %v, want a dict", name, cfg.Kind())
		}
		pg := PGConfig{Name: name}
		if n, ok := doc.Get(cfg, "name"); ok && scalarText(doc, n) != "" {
			pg.Name = scalarText(doc, n)
		}
		if desc, ok := doc.Get(cfg, "desc"); ok {
			pg.Desc = scalarText(doc, desc)
		}
		ranks, ok := doc.Get(cfg, "ranks")
		if !ok {
			return nil, fmt.Errorf("group %q has no ranks", name)
		}
		var err error
		switch ranks.Kind() {
		case pickle.String:
			s, _ := doc.Str(ranks)
			pg.Ranks, err = ParseRankList(s)
		case pickle.List, pickle.Tuple, pickle.Set:
			for _, r := range doc.Items(ranks) {
				n, ok := intOf(doc, r, 0)
				if !ok {
					err = fmt.Errorf("rank %s is not an integer", doc.Repr(r))
					break
				}
				pg.Ranks = append(pg.Ranks, int(n))
			}
		default:
			err = fmt.Errorf("ranks is a %v", ranks.Kind())
		}
		if err != nil {
			return nil, fmt.Errorf("group %q: %w", name, err)
		}
		out = append(out, pg)
	}
	return out, nil
}

func pgStatusFromPickle(doc *pickle.Doc, v pickle.Value) ([]PGStatus, error) {
	if v.Kind() != pickle.Dict {
		return nil, fmt.Errorf("is a %v, want a dict", v.Kind())
	}
	out := make([]PGStatus, 0, doc.Len(v))
	for i := 0; i < doc.Len(v); i++ {
		k, st := doc.Pair(v, i)
		s := PGStatus{PGID: scalarText(doc, k), LastEnqueued: -1, LastStarted: -1, LastCompleted: -1}
		if st.Kind() != pickle.Dict {
			return nil, fmt.Errorf("pg %q is a %v, want a dict", s.PGID, st.Kind())
		}
		if x, ok := doc.Get(st, "last_enqueued_collective"); ok {
			s.LastEnqueued, _ = intOf(doc, x, -1)
		}
		if x, ok := doc.Get(st, "last_started_collective"); ok {
			s.LastStarted, _ = intOf(doc, x, -1)
		}
		if x, ok := doc.Get(st, "last_completed_collective"); ok {
			s.LastCompleted, _ = intOf(doc, x, -1)
		}
		out = append(out, s)
	}
	return out, nil
}

// ParseRankList parses pg_config's ranks string: "[0, 1, 2]" or "[0,1,2]"
// (a Python list literal of non-negative ints).
func ParseRankList(s string) ([]int, error) {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "[") || !strings.HasSuffix(t, "]") {
		return nil, fmt.Errorf("ranks %q is not a list literal like \"[0, 1]\"", s)
	}
	t = strings.TrimSpace(t[1 : len(t)-1])
	if t == "" {
		return []int{}, nil
	}
	parts := strings.Split(t, ",")
	out := make([]int, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" && i == len(parts)-1 {
			break // trailing comma
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("ranks %q: %q is not a rank", s, p)
		}
		out = append(out, n)
	}
	return out, nil
}

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
		missing: map[string]int{}, shapes: map[shapeKey][][]int64{}, tensorSets: map[tensorKey]*Tensors{}, threads: map[Thread]*Thread{}, dtypes: map[string][]string{}, stackIDs: map[stackKey][]Frame{}}
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
	for k, n := range c.missing {
		c.d.warn("%d entries have no %q", n, k)
	}
}

// entry bits that must be present for the matching rules to mean anything.
const (
	hasPG = 1 << iota
	hasSeq
	hasName
	hasState
	hasSizes
)

func (c *converter) entry(e *Entry, ev pickle.Value) error {
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
				return fmt.Errorf("process_group is %s, want (name, desc)", doc.Repr(v))
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
	c.checkRequired(seen)
	e.Tensors = c.tensors(t)
	e.Thread = c.thread(threadName, threadID)
	c.finishEntry(e)
	return nil
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

func (c *converter) checkRequired(seen int) {
	if seen&hasPG == 0 {
		c.missing["process_group"]++
	}
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
	out := make([][]int64, len(items))
	for i, s := range items {
		dims := doc.Items(s)
		shape := make([]int64, len(dims))
		for j, n := range dims {
			shape[j], _ = intOf(doc, n, 0)
		}
		out[i] = shape
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
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = scalarText(doc, it)
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

// ---- JSON ----

// flexInt decodes a JSON integer, a decimal string (pg_status values are
// strings in JSON dumps) or null (-1 unless overridden by the field's use).
type flexInt struct {
	n   int64
	set bool
}

func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if len(s) >= 2 && s[0] == '"' {
		unq, err := strconv.Unquote(s)
		if err != nil {
			return err
		}
		s = strings.TrimSpace(unq)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		fl, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return fmt.Errorf("%s is not an integer", string(b))
		}
		n = int64(fl)
	}
	f.n, f.set = n, true
	return nil
}

func (f flexInt) or(def int64) int64 {
	if f.set {
		return f.n
	}
	return def
}

// flexStrings decodes a list of strings or one bare string.
type flexStrings []string

func (f *flexStrings) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = []string{s}
		return nil
	}
	var l []string
	err := json.Unmarshal(b, &l)
	*f = l
	return err
}

// flexText decodes a string or a number as text.
type flexText string

func (f *flexText) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		err := json.Unmarshal(b, &s)
		*f = flexText(s)
		return err
	}
	if string(b) == "null" {
		return nil
	}
	*f = flexText(b)
	return nil
}

type jsonEntry struct {
	Frames          []Frame     `json:"frames"`
	RecordID        flexInt     `json:"record_id"`
	PGID            flexInt     `json:"pg_id"`
	ProcessGroup    []flexText  `json:"process_group"`
	CollectiveSeqID *flexInt    `json:"collective_seq_id"`
	P2PSeqID        flexInt     `json:"p2p_seq_id"`
	OpID            flexInt     `json:"op_id"`
	ProfilingName   *string     `json:"profiling_name"`
	TimeCreatedNs   flexInt     `json:"time_created_ns"`
	DurationMs      *float64    `json:"duration_ms"`
	InputSizes      [][]int64   `json:"input_sizes"`
	OutputSizes     [][]int64   `json:"output_sizes"`
	InputDtypes     flexStrings `json:"input_dtypes"`
	OutputDtypes    flexStrings `json:"output_dtypes"`
	State           *string     `json:"state"`
	TimeStarted     flexInt     `json:"time_discovered_started_ns"`
	TimeCompleted   flexInt     `json:"time_discovered_completed_ns"`
	Retired         bool        `json:"retired"`
	TimeoutMs       flexInt     `json:"timeout_ms"`
	IsP2P           bool        `json:"is_p2p"`
	ThreadName      flexText    `json:"thread_name"`
	ThreadID        flexText    `json:"thread_id"`
}

type jsonDump struct {
	Version        flexText `json:"version"`
	CommLibVersion flexText `json:"comm_lib_version"`
	NCCLVersion    flexText `json:"nccl_version"`
	PGConfig       map[string]struct {
		Name  flexText        `json:"name"`
		Desc  flexText        `json:"desc"`
		Ranks json.RawMessage `json:"ranks"`
	} `json:"pg_config"`
	PGStatus map[string]map[string]flexInt `json:"pg_status"`
	Entries  *[]jsonEntry                  `json:"entries"`
}

func decodeJSON(sigs *sigTable, data []byte) (*Dump, error) {
	var jd jsonDump
	if err := json.Unmarshal(data, &jd); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("invalid JSON at offset %d: %v", se.Offset, err)
		}
		return nil, fmt.Errorf("invalid JSON dump: %v", err)
	}
	d := &Dump{Format: "json", Version: string(jd.Version), CommLibVersion: string(jd.CommLibVersion)}
	if d.CommLibVersion == "" {
		d.CommLibVersion = string(jd.NCCLVersion)
	}
	if err := d.finishVersion(); err != nil {
		return nil, err
	}
	for _, name := range sortedKeys(jd.PGConfig) {
		cfg := jd.PGConfig[name]
		pg := PGConfig{Name: string(cfg.Name), Desc: string(cfg.Desc)}
		if pg.Name == "" {
			pg.Name = name
		}
		var s string
		var l []int
		var err error
		switch {
		case json.Unmarshal(cfg.Ranks, &s) == nil:
			l, err = ParseRankList(s)
		case json.Unmarshal(cfg.Ranks, &l) == nil:
		default:
			err = fmt.Errorf("ranks %s is neither a list nor a list literal string", cfg.Ranks)
		}
		if err != nil {
			return nil, fmt.Errorf("pg_config: group %q: %w", name, err)
		}
		pg.Ranks = l
		d.PGConfig = append(d.PGConfig, pg)
	}
	for _, id := range sortedKeys(jd.PGStatus) {
		st := jd.PGStatus[id]
		d.PGStatus = append(d.PGStatus, PGStatus{PGID: id,
			LastEnqueued:  st["last_enqueued_collective"].or(-1),
			LastStarted:   st["last_started_collective"].or(-1),
			LastCompleted: st["last_completed_collective"].or(-1)})
	}
	d.HasEntries = true // JSON omits an empty entries list
	if jd.Entries == nil {
		return d, nil
	}
	c := newConverter(d, nil, sigs)
	d.Entries = make([]Entry, 0, len(*jd.Entries))
	for i, je := range *jd.Entries {
		e := Entry{
			RecordID: je.RecordID.or(-1), PGID: je.PGID.or(-1), CollectiveSeqID: -1,
			P2PSeqID: je.P2PSeqID.or(-1), OpID: je.OpID.or(-1), TimeCreatedNs: je.TimeCreatedNs.or(0),
			Tensors: c.tensors(Tensors{InputSizes: je.InputSizes, OutputSizes: je.OutputSizes,
				InputDtypes: je.InputDtypes, OutputDtypes: je.OutputDtypes}),
			TimeStartedNs: je.TimeStarted.or(0), TimeCompletedNs: je.TimeCompleted.or(0),
			Retired: je.Retired, TimeoutMs: je.TimeoutMs.or(0), IsP2P: je.IsP2P,
			Thread: c.thread(string(je.ThreadName), string(je.ThreadID)), Frames: je.Frames,
		}
		seen := hasSizes
		if je.InputSizes == nil {
			seen = 0
		}
		if len(je.ProcessGroup) == 2 {
			e.PGName, e.PGDesc = string(je.ProcessGroup[0]), string(je.ProcessGroup[1])
			seen |= hasPG
		} else if je.ProcessGroup != nil {
			return nil, fmt.Errorf("entries[%d]: process_group has %d items, want (name, desc)", i, len(je.ProcessGroup))
		}
		if je.CollectiveSeqID != nil {
			e.CollectiveSeqID = je.CollectiveSeqID.or(-1)
			seen |= hasSeq
		}
		if je.ProfilingName != nil {
			e.ProfilingName = *je.ProfilingName
			e.Op = c.opName(e.ProfilingName)
			seen |= hasName
		}
		if je.State != nil {
			e.State = *je.State
			seen |= hasState
		}
		if je.DurationMs != nil {
			e.DurationMs, e.HasDuration = *je.DurationMs, true
		}
		c.checkRequired(seen)
		c.finishEntry(&e)
		d.Entries = append(d.Entries, e)
	}
	c.finish()
	return d, nil
}
