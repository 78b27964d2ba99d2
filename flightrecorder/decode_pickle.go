package flightrecorder

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/flightrecorder/pickle"
)

func decodePickle(ctx context.Context, dec *pickle.Decoder, sigs *interner, data []byte, lim Limits) (*Dump, error) {
	doc, st, err := dec.Decode(data)
	if err != nil {
		return nil, err
	}
	root := doc.Root
	if root.Kind() != pickle.Dict {
		return nil, fmt.Errorf("pickle holds a %v, want the dump's dict", root.Kind())
	}
	if sigs == nil {
		sigs = newInterner()
	}
	d := &Dump{Format: "pickle"}
	if st.InvalidUTF8 > 0 {
		d.warn("%d strings hold invalid UTF-8 (kept byte for byte)", st.InvalidUTF8)
	}
	// The version first: a pickle that is not a dump stops here, before
	// anything else of it is read.
	if v, ok := doc.Get(root, "version"); ok {
		d.Version = scalarText(doc, v)
	}
	if err := d.finishVersion(); err != nil {
		return nil, err
	}
	var entries pickle.Value
	for i := 0; i < doc.Len(root); i++ {
		k, v := doc.Pair(root, i)
		key, _ := doc.Str(k)
		switch key {
		case "comm_lib_version", "nccl_version":
			d.CommLibVersion = scalarText(doc, v)
		case "pg_config":
			d.PGConfig, err = pgConfigFromPickle(doc, sigs, v, lim)
		case "pg_status":
			d.PGStatus, err = pgStatusFromPickle(doc, v, lim)
		case "entries":
			entries, d.HasEntries = v, true
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
	}
	if !d.HasEntries {
		d.warn(`no "entries" key (dumped without collectives?): nothing to match`)
		return d, nil
	}
	if entries.Kind() != pickle.List {
		return nil, fmt.Errorf("entries is a %v, want a list", entries.Kind())
	}
	c := newConverter(d, doc, sigs)
	if d.Entries, err = c.entries(ctx, entries); err != nil {
		return nil, err
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

// pgConfigFromPickle reads pg_config under the group, rank and membership
// ceilings. Groups are named by position in errors, never by the file's
// text. A rank list (a string, or a list) that several groups share
// through the memo is parsed once and its slice shared, but charged to the
// membership ceiling once per group.
func pgConfigFromPickle(doc *pickle.Doc, tab *interner, v pickle.Value, lim Limits) ([]PGConfig, error) {
	if v.Kind() != pickle.Dict {
		return nil, fmt.Errorf("is a %v, want a dict", v.Kind())
	}
	n := doc.Len(v)
	if err := lim.checkGroups(n); err != nil {
		return nil, err
	}
	type listKey struct {
		str bool
		id  int64
	}
	parsed := map[listKey][]int{}
	var total int64
	out := make([]PGConfig, 0, n)
	for i := 0; i < n; i++ {
		k, cfg := doc.Pair(v, i)
		where := func() string { return fmt.Sprintf("group %d of %d", i+1, n) }
		if cfg.Kind() != pickle.Dict {
			return nil, fmt.Errorf("%s is a %v, want a dict", where(), cfg.Kind())
		}
		pg := PGConfig{Name: scalarText(doc, k)}
		if n, ok := doc.Get(cfg, "name"); ok && scalarText(doc, n) != "" {
			pg.Name = scalarText(doc, n)
		}
		if desc, ok := doc.Get(cfg, "desc"); ok {
			pg.Desc = scalarText(doc, desc)
		}
		ranks, ok := doc.Get(cfg, "ranks")
		if !ok {
			return nil, fmt.Errorf("%s has no ranks", where())
		}
		var key listKey
		switch ranks.Kind() {
		case pickle.String:
			idx, _ := doc.StrIndex(ranks)
			key = listKey{true, int64(idx)}
		case pickle.List, pickle.Tuple, pickle.Set:
			key = listKey{false, doc.ID(ranks)}
		default:
			return nil, fmt.Errorf("%s: ranks is a %v", where(), ranks.Kind())
		}
		l, seen := parsed[key]
		if !seen {
			var err error
			parse := func() ([]int, error) { return rankListFromPickle(doc, ranks, lim) }
			if key, ok := rankListKey(doc, ranks); ok {
				l, err = tab.rankList(key, parse)
			} else {
				l, err = parse()
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where(), err)
			}
			parsed[key] = l
		}
		pg.Ranks = l
		total += int64(len(l)) // per group, shared or not
		out = append(out, pg)
	}
	if err := lim.chargeMemberships(total, n); err != nil {
		return nil, err
	}
	return out, nil
}

// rankListKey is what a ranks value holds, as the load's table keys it:
// the text of a list literal, or the items of a list of ints. A list of
// anything else is not interned (ok false).
func rankListKey(doc *pickle.Doc, ranks pickle.Value) (rankListText, bool) {
	if s, ok := doc.Str(ranks); ok {
		return rankListText{text: s}, true
	}
	items := doc.Items(ranks)
	b := make([]byte, 0, 8*len(items))
	for _, r := range items {
		if r.Kind() != pickle.Int {
			return rankListText{}, false
		}
		n, _ := r.Int()
		b = binary.LittleEndian.AppendUint64(b, uint64(n))
	}
	return rankListText{form: 1, text: string(b)}, true
}

func rankListFromPickle(doc *pickle.Doc, ranks pickle.Value, lim Limits) ([]int, error) {
	if s, ok := doc.Str(ranks); ok {
		return parseRankList(s, lim)
	}
	items := doc.Items(ranks)
	if err := lim.checkListLength(len(items)); err != nil {
		return nil, err
	}
	out := make([]int, 0, len(items))
	for i, r := range items {
		n, ok := intOf(doc, r, 0)
		if !ok {
			return nil, fmt.Errorf("ranks: item %d is a %v, not an integer", i, r.Kind())
		}
		if n < 0 || n >= int64(lim.MaxRanks) {
			return nil, lim.checkRank(fmt.Sprintf("ranks: item %d, rank", i), n)
		}
		out = append(out, int(n))
	}
	return out, nil
}

func pgStatusFromPickle(doc *pickle.Doc, v pickle.Value, lim Limits) ([]PGStatus, error) {
	if v.Kind() != pickle.Dict {
		return nil, fmt.Errorf("is a %v, want a dict", v.Kind())
	}
	n := doc.Len(v)
	if err := lim.checkGroups(n); err != nil {
		return nil, err
	}
	out := make([]PGStatus, 0, n)
	for i := 0; i < n; i++ {
		k, st := doc.Pair(v, i)
		s := PGStatus{PGID: scalarText(doc, k), LastEnqueued: -1, LastStarted: -1, LastCompleted: -1}
		if st.Kind() != pickle.Dict {
			return nil, fmt.Errorf("pg %d of %d is a %v, want a dict", i+1, n, st.Kind())
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
