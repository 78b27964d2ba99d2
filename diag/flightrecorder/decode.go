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
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	switch {
	case len(data) > 0 && data[0] == 0x80:
		return decodePickle(data)
	case len(trimmed) > 0 && trimmed[0] == '{':
		return decodeJSON(trimmed)
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

func decodePickle(data []byte) (*Dump, error) {
	root, st, err := pickle.Decode(data, pickle.Limits{})
	if err != nil {
		return nil, err
	}
	if root.Kind() != pickle.Dict {
		return nil, fmt.Errorf("pickle holds a %v, want the dump's dict", root.Kind())
	}
	d := &Dump{Format: "pickle"}
	if st.InvalidUTF8 > 0 {
		d.warn("%d strings hold invalid UTF-8 (kept byte for byte)", st.InvalidUTF8)
	}
	var entries pickle.Value
	for i := 0; i < root.Len(); i++ {
		k, v := root.Pair(i)
		key, _ := k.Str()
		switch key {
		case "version":
			d.Version = scalarText(v)
		case "comm_lib_version", "nccl_version":
			d.CommLibVersion = scalarText(v)
		case "pg_config":
			d.PGConfig, err = pgConfigFromPickle(v)
		case "pg_status":
			d.PGStatus, err = pgStatusFromPickle(v)
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
	c := newConverter(d)
	d.Entries = make([]Entry, 0, entries.Len())
	for i, ev := range entries.Items() {
		if ev.Kind() != pickle.Dict {
			return nil, fmt.Errorf("entries[%d] is a %v, want a dict", i, ev.Kind())
		}
		e, err := c.entry(ev)
		if err != nil {
			return nil, fmt.Errorf("entries[%d]: %w", i, err)
		}
		d.Entries = append(d.Entries, e)
	}
	c.finish()
	return d, nil
}

// scalarText renders a str, int or float as text (versions are strings, but
// hand-made dumps sometimes hold 2.8 as a float).
func scalarText(v pickle.Value) string {
	switch v.Kind() {
	case pickle.String:
		s, _ := v.Str()
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
func intOf(v pickle.Value, def int64) (int64, bool) {
	switch v.Kind() {
	case pickle.Int, pickle.Bool:
		n, _ := v.Int()
		return n, true
	case pickle.String:
		s, _ := v.Str()
		if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
			return n, true
		}
	case pickle.Float:
		f, _ := v.Float()
		return int64(f), true
	}
	return def, false
}

func pgConfigFromPickle(v pickle.Value) ([]PGConfig, error) {
	if v.Kind() != pickle.Dict {
		return nil, fmt.Errorf("is a %v, want a dict", v.Kind())
	}
	out := make([]PGConfig, 0, v.Len())
	for i := 0; i < v.Len(); i++ {
		k, cfg := v.Pair(i)
		name := scalarText(k)
		if cfg.Kind() != pickle.Dict {
			return nil, fmt.Errorf("group %q is a %v, want a dict", name, cfg.Kind())
		}
		pg := PGConfig{Name: name}
		if n, ok := cfg.Get("name"); ok && scalarText(n) != "" {
			pg.Name = scalarText(n)
		}
		if desc, ok := cfg.Get("desc"); ok {
			pg.Desc = scalarText(desc)
		}
		ranks, ok := cfg.Get("ranks")
		if !ok {
			return nil, fmt.Errorf("group %q has no ranks", name)
		}
		var err error
		switch ranks.Kind() {
		case pickle.String:
			s, _ := ranks.Str()
			pg.Ranks, err = ParseRankList(s)
		case pickle.List, pickle.Tuple, pickle.Set:
			for _, r := range ranks.Items() {
				n, ok := intOf(r, 0)
				if !ok {
					err = fmt.Errorf("rank %v is not an integer", r)
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

func pgStatusFromPickle(v pickle.Value) ([]PGStatus, error) {
	if v.Kind() != pickle.Dict {
		return nil, fmt.Errorf("is a %v, want a dict", v.Kind())
	}
	out := make([]PGStatus, 0, v.Len())
	for i := 0; i < v.Len(); i++ {
		k, st := v.Pair(i)
		s := PGStatus{PGID: scalarText(k), LastEnqueued: -1, LastStarted: -1, LastCompleted: -1}
		if st.Kind() != pickle.Dict {
			return nil, fmt.Errorf("pg %q is a %v, want a dict", s.PGID, st.Kind())
		}
		if x, ok := st.Get("last_enqueued_collective"); ok {
			s.LastEnqueued, _ = intOf(x, -1)
		}
		if x, ok := st.Get("last_started_collective"); ok {
			s.LastStarted, _ = intOf(x, -1)
		}
		if x, ok := st.Get("last_completed_collective"); ok {
			s.LastCompleted, _ = intOf(x, -1)
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
	d       *Dump
	ops     map[string]OpName
	stacks  map[uintptr][]Frame
	frames  map[uintptr]Frame
	missing map[string]int
}

func newConverter(d *Dump) *converter {
	return &converter{d: d, ops: map[string]OpName{}, stacks: map[uintptr][]Frame{}, frames: map[uintptr]Frame{}, missing: map[string]int{}}
}

func (c *converter) opName(name string) OpName {
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

func (c *converter) entry(ev pickle.Value) (Entry, error) {
	e := Entry{RecordID: -1, PGID: -1, CollectiveSeqID: -1, P2PSeqID: -1, OpID: -1}
	seen := 0
	for i := 0; i < ev.Len(); i++ {
		k, v := ev.Pair(i)
		key, _ := k.Str()
		switch key {
		case "record_id":
			e.RecordID, _ = intOf(v, -1)
		case "pg_id":
			e.PGID, _ = intOf(v, -1)
		case "process_group":
			items := v.Items()
			if len(items) != 2 {
				return e, fmt.Errorf("process_group is %v, want (name, desc)", v)
			}
			e.PGName, e.PGDesc = scalarText(items[0]), scalarText(items[1])
			seen |= hasPG
		case "collective_seq_id":
			e.CollectiveSeqID, _ = intOf(v, -1)
			seen |= hasSeq
		case "p2p_seq_id":
			e.P2PSeqID, _ = intOf(v, -1)
		case "op_id":
			e.OpID, _ = intOf(v, -1)
		case "profiling_name":
			e.ProfilingName, _ = v.Str()
			e.Op = c.opName(e.ProfilingName)
			seen |= hasName
		case "time_created_ns":
			e.TimeCreatedNs, _ = intOf(v, 0)
		case "duration_ms":
			e.DurationMs, e.HasDuration = v.Float()
		case "input_sizes":
			e.InputSizes = sizesOf(v)
			seen |= hasSizes
		case "output_sizes":
			e.OutputSizes = sizesOf(v)
		case "input_dtypes":
			e.InputDtypes = dtypesOf(v)
		case "output_dtypes":
			e.OutputDtypes = dtypesOf(v)
		case "state":
			e.State, _ = v.Str()
			seen |= hasState
		case "time_discovered_started_ns":
			e.TimeStartedNs, _ = intOf(v, 0)
		case "time_discovered_completed_ns":
			e.TimeCompletedNs, _ = intOf(v, 0)
		case "retired":
			b, _ := intOf(v, 0)
			e.Retired = b != 0
		case "timeout_ms":
			e.TimeoutMs, _ = intOf(v, 0)
		case "is_p2p":
			b, _ := intOf(v, 0)
			e.IsP2P = b != 0
		case "thread_name":
			e.ThreadName = scalarText(v)
		case "thread_id":
			e.ThreadID = scalarText(v)
		case "frames":
			e.Frames = c.stack(v)
		}
	}
	c.checkRequired(seen)
	return e, nil
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

func sizesOf(v pickle.Value) [][]int64 {
	items := v.Items()
	out := make([][]int64, len(items))
	for i, s := range items {
		dims := s.Items()
		shape := make([]int64, len(dims))
		for j, n := range dims {
			shape[j], _ = intOf(n, 0)
		}
		out[i] = shape
	}
	return out
}

// dtypesOf accepts a list of names, or one bare name (fr_trace's tests).
func dtypesOf(v pickle.Value) []string {
	if s, ok := v.Str(); ok {
		return []string{s}
	}
	items := v.Items()
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = scalarText(it)
	}
	return out
}

func (c *converter) stack(v pickle.Value) []Frame {
	if v.Kind() != pickle.List && v.Kind() != pickle.Tuple {
		return nil
	}
	if s, ok := c.stacks[v.ID()]; ok {
		return s
	}
	out := make([]Frame, 0, v.Len())
	for _, f := range v.Items() {
		if f.Kind() != pickle.Dict {
			continue
		}
		fr, ok := c.frames[f.ID()]
		if !ok {
			if x, ok := f.Get("name"); ok {
				fr.Name = scalarText(x)
			}
			if x, ok := f.Get("filename"); ok {
				fr.Filename = scalarText(x)
			}
			if x, ok := f.Get("line"); ok {
				fr.Line, _ = intOf(x, 0)
			}
			c.frames[f.ID()] = fr
		}
		out = append(out, fr)
	}
	c.stacks[v.ID()] = out
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

func decodeJSON(data []byte) (*Dump, error) {
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
	c := newConverter(d)
	d.Entries = make([]Entry, 0, len(*jd.Entries))
	for i, je := range *jd.Entries {
		e := Entry{
			RecordID: je.RecordID.or(-1), PGID: je.PGID.or(-1), CollectiveSeqID: -1,
			P2PSeqID: je.P2PSeqID.or(-1), OpID: je.OpID.or(-1), TimeCreatedNs: je.TimeCreatedNs.or(0),
			InputSizes: je.InputSizes, OutputSizes: je.OutputSizes,
			InputDtypes: je.InputDtypes, OutputDtypes: je.OutputDtypes,
			TimeStartedNs: je.TimeStarted.or(0), TimeCompletedNs: je.TimeCompleted.or(0),
			Retired: je.Retired, TimeoutMs: je.TimeoutMs.or(0), IsP2P: je.IsP2P,
			ThreadName: string(je.ThreadName), ThreadID: string(je.ThreadID), Frames: je.Frames,
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
		d.Entries = append(d.Entries, e)
	}
	c.finish()
	return d, nil
}
