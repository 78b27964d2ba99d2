package flightrecorder

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// JSON dumps are read as a stream, one pg_config group and one entry at a
// time: memory follows what is kept, not the number of JSON values (five
// million empty entries are fifteen megabytes of text), and a ceiling stops
// the read where it is crossed.

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
	// A type error, which json completes with the field's name.
	notInt := &json.UnmarshalTypeError{Value: jsonKind(b), Type: reflect.TypeFor[int64]()}
	if len(s) >= 2 && s[0] == '"' {
		unq, err := strconv.Unquote(s)
		if err != nil {
			return notInt
		}
		s = strings.TrimSpace(unq)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		fl, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return notInt
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

// jsonKind names the type of a JSON value from its first byte.
func jsonKind(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
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

type jsonGroup struct {
	Name  flexText        `json:"name"`
	Desc  flexText        `json:"desc"`
	Ranks json.RawMessage `json:"ranks"`
}

// jsonReader walks one JSON dump.
type jsonReader struct {
	ctx  context.Context
	dec  *json.Decoder
	data []byte
	lim  Limits
}

func decodeJSON(ctx context.Context, sigs *interner, data []byte, lim Limits) (*Dump, error) {
	r := &jsonReader{ctx: ctx, dec: json.NewDecoder(bytes.NewReader(data)), data: data, lim: lim}
	d := &Dump{Format: "json", HasEntries: true} // JSON omits an empty entries list
	var version, commLib, ncclVersion flexText
	c := newConverter(d, nil, sigs)
	if err := r.delim('{', "the dump"); err != nil {
		return nil, err
	}
	for r.dec.More() {
		key, err := r.key()
		if err != nil {
			return nil, err
		}
		switch key {
		case "version":
			err = r.value(&version, key)
		case "comm_lib_version":
			err = r.value(&commLib, key)
		case "nccl_version":
			err = r.value(&ncclVersion, key)
		case "pg_config":
			d.PGConfig, err = r.pgConfig(c.tab)
		case "pg_status":
			d.PGStatus, err = r.pgStatus()
		case "entries":
			d.Entries, err = r.entries(c)
		default:
			var skip json.RawMessage
			err = r.value(&skip, key)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := r.delim('}', "the dump"); err != nil {
		return nil, err
	}
	if _, err := r.dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("invalid JSON: more data after the dump's object, at offset %d", r.dec.InputOffset())
	}
	d.Version, d.CommLibVersion = string(version), string(commLib)
	if d.CommLibVersion == "" {
		d.CommLibVersion = string(ncclVersion)
	}
	if err := d.finishVersion(); err != nil {
		return nil, err
	}
	c.finish()
	return d, nil
}

// syntax turns a decoder error into one that gives the offset and never a
// character of the input (json's messages quote the byte they stopped at).
func (r *jsonReader) syntax(err error, where string) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("invalid JSON at offset %d (in %s)", se.Offset, where)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("invalid JSON: the input ends inside %s", where)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		want := te.Type.String()
		switch te.Type.Kind() {
		case reflect.Struct, reflect.Map:
			want = "an object"
		case reflect.Slice:
			want = "a list"
		case reflect.Int64, reflect.Int:
			want = "an integer"
		}
		if te.Field != "" {
			return fmt.Errorf("%s: %s is a JSON %s, want %s", where, te.Field, te.Value, want)
		}
		return fmt.Errorf("%s is a JSON %s, want %s", where, te.Value, want)
	}
	return fmt.Errorf("%s: %v", where, err)
}

func (r *jsonReader) delim(want json.Delim, where string) error {
	tok, err := r.dec.Token()
	if err != nil {
		return r.syntax(err, where)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		if want == '{' && where == "the dump" {
			return errors.New("invalid JSON dump: not a JSON object")
		}
		return fmt.Errorf("%s is not a JSON %s", where, map[json.Delim]string{'{': "object", '[': "array", '}': "object", ']': "array"}[want])
	}
	return nil
}

// key reads an object key.
func (r *jsonReader) key() (string, error) {
	tok, err := r.dec.Token()
	if err != nil {
		return "", r.syntax(err, "an object")
	}
	k, _ := tok.(string)
	return k, nil
}

func (r *jsonReader) value(v any, where string) error {
	if err := r.dec.Decode(v); err != nil {
		return r.syntax(err, where)
	}
	return nil
}

// isNull consumes a null in place of an object or array.
func (r *jsonReader) isNull() bool {
	rest := bytes.TrimLeft(r.data[r.dec.InputOffset():], " \t\r\n:")
	if bytes.HasPrefix(rest, []byte("null")) {
		r.dec.Token()
		return true
	}
	return false
}

// pgConfig reads the groups, sorted by key as before (later duplicates
// win), refusing the dump at the group past the ceiling.
func (r *jsonReader) pgConfig(tab *interner) ([]PGConfig, error) {
	if r.isNull() {
		return nil, nil
	}
	if err := r.delim('{', "pg_config"); err != nil {
		return nil, err
	}
	byName := map[string]PGConfig{}
	n := 0
	var total int64
	for r.dec.More() {
		name, err := r.key()
		if err != nil {
			return nil, err
		}
		if n++; n > r.lim.MaxGroups {
			return nil, fmt.Errorf("pg_config: %w", r.lim.checkGroups(n))
		}
		where := fmt.Sprintf("pg_config: group %d", n)
		var g jsonGroup
		if err := r.value(&g, where); err != nil {
			return nil, err
		}
		pg := PGConfig{Name: string(g.Name), Desc: string(g.Desc)}
		if pg.Name == "" {
			pg.Name = name
		}
		if pg.Ranks, err = tab.rankList(rankListText{form: 2, text: string(g.Ranks)}, func() ([]int, error) { return jsonRanks(g.Ranks, r.lim) }); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		byName[name] = pg
		total += int64(len(pg.Ranks))
	}
	if err := r.delim('}', "pg_config"); err != nil {
		return nil, err
	}
	if err := r.lim.chargeMemberships(total, n); err != nil {
		return nil, fmt.Errorf("pg_config: %w", err)
	}
	out := make([]PGConfig, 0, len(byName))
	for _, name := range sortedKeys(byName) {
		out = append(out, byName[name])
	}
	return out, nil
}

// jsonRanks reads a group's ranks: a list literal string or a list.
func jsonRanks(raw json.RawMessage, lim Limits) ([]int, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return parseRankList(s, lim)
	}
	var l []json.RawMessage
	if json.Unmarshal(raw, &l) != nil {
		return nil, fmt.Errorf("ranks is a JSON %s, neither a list nor a list literal string", jsonKind(raw))
	}
	if err := lim.checkListLength(len(l)); err != nil {
		return nil, err
	}
	out := make([]int, 0, len(l))
	for i, item := range l {
		n, err := strconv.ParseInt(string(item), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("ranks: item %d is a JSON %s, not an integer", i, jsonKind(item))
		}
		if n < 0 || n >= int64(lim.MaxRanks) {
			return nil, lim.checkRank(fmt.Sprintf("ranks: item %d, rank", i), n)
		}
		out = append(out, int(n))
	}
	return out, nil
}

func (r *jsonReader) pgStatus() ([]PGStatus, error) {
	if r.isNull() {
		return nil, nil
	}
	if err := r.delim('{', "pg_status"); err != nil {
		return nil, err
	}
	byID := map[string]map[string]flexInt{}
	n := 0
	for r.dec.More() {
		id, err := r.key()
		if err != nil {
			return nil, err
		}
		if n++; n > r.lim.MaxGroups {
			return nil, fmt.Errorf("pg_status: %w", r.lim.checkGroups(n))
		}
		var st map[string]flexInt
		if err := r.value(&st, fmt.Sprintf("pg_status: a counter of pg %d", n)); err != nil {
			return nil, err
		}
		byID[id] = st
	}
	if err := r.delim('}', "pg_status"); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]PGStatus, 0, len(ids))
	for _, id := range ids {
		st := byID[id]
		out = append(out, PGStatus{PGID: id,
			LastEnqueued:  st["last_enqueued_collective"].or(-1),
			LastStarted:   st["last_started_collective"].or(-1),
			LastCompleted: st["last_completed_collective"].or(-1)})
	}
	return out, nil
}

// entries reads the entry list one entry at a time. Entries without a
// process_group are counted, not kept (see converter.entries).
func (r *jsonReader) entries(c *converter) ([]Entry, error) {
	c.d.noGroup = 0
	if r.isNull() {
		return nil, nil
	}
	if err := r.delim('[', "entries"); err != nil {
		return nil, err
	}
	var out []Entry
	je := new(jsonEntry) // one for all: a fresh one per entry would be garbage per entry
	for i := 0; r.dec.More(); i++ {
		if i%4096 == 0 {
			if err := r.ctx.Err(); err != nil {
				return nil, err
			}
		}
		*je = jsonEntry{}
		if err := r.dec.Decode(je); err != nil {
			return nil, r.syntax(err, fmt.Sprintf("entries[%d]", i))
		}
		if je.ProcessGroup == nil {
			c.d.noGroup++
			continue
		}
		e, err := c.jsonEntry(je)
		if err != nil {
			return nil, fmt.Errorf("entries[%d]: %w", i, err)
		}
		out = append(out, e)
	}
	if err := r.delim(']', "entries"); err != nil {
		return nil, err
	}
	return out, nil
}

func (c *converter) jsonEntry(je *jsonEntry) (Entry, error) {
	e := Entry{
		RecordID: je.RecordID.or(-1), PGID: je.PGID.or(-1), CollectiveSeqID: -1,
		P2PSeqID: je.P2PSeqID.or(-1), OpID: je.OpID.or(-1), TimeCreatedNs: je.TimeCreatedNs.or(0),
		TimeStartedNs: je.TimeStarted.or(0), TimeCompletedNs: je.TimeCompleted.or(0), Retired: je.Retired,
	}
	if len(je.ProcessGroup) != 2 {
		return e, fmt.Errorf("process_group has %d items, want (name, desc)", len(je.ProcessGroup))
	}
	// JSON gives every entry slices of its own: what they hold is interned
	// by content.
	k := sharedKey{pg: c.textID(string(je.ProcessGroup[0])), desc: c.textID(string(je.ProcessGroup[1])),
		name: c.textID(""), state: c.textID(""), timeout: je.TimeoutMs.or(0), p2p: je.IsP2P,
		tensors: c.tab.tensorsID(&Tensors{InputSizes: je.InputSizes, OutputSizes: je.OutputSizes,
			InputDtypes: je.InputDtypes, OutputDtypes: je.OutputDtypes}),
		stack: c.tab.stackOf(je.Frames), thread: c.thread(string(je.ThreadName), string(je.ThreadID))}
	seen := hasSizes
	if je.InputSizes == nil {
		seen = 0
	}
	if je.CollectiveSeqID != nil {
		e.CollectiveSeqID = je.CollectiveSeqID.or(-1)
		seen |= hasSeq
	}
	if je.ProfilingName != nil {
		k.name = c.textID(*je.ProfilingName)
		seen |= hasName
	}
	if je.State != nil {
		k.state = c.textID(*je.State)
		seen |= hasState
	}
	if je.DurationMs != nil {
		e.DurationMs, e.HasDuration = *je.DurationMs, true
	}
	c.checkRequired(seen)
	e.Shared = c.sharedOf(k)
	return e, nil
}
