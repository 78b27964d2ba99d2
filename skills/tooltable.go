package skills

// Tool results as tables: how a tool step's JSON answer becomes the rows
// its rules read.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// ToolTable finds a table in a tool's JSON result, for rules to use as
// evidence. In order:
//  1. an object with "columns" (strings) and "rows" (objects keyed by
//     column, or arrays in column order): the QueryJSON shape of query;
//  2. an object whose "dataframe" member is that shape (cluster_query);
//  3. an array of objects;
//  4. an object's first member, in document order, that is an array of
//     objects (e.g. list_cluster_nodes' "nodes").
//
// For 3 and 4 the columns are the objects' keys in first-seen order (at
// most 256). Numbers become int64 when integral, else float64; nested
// values become their compact JSON text. At most maxRows rows are kept
// (truncated reports a cut). found is false when there is no table, or the
// JSON is larger than 8 MiB.
func ToolTable(raw json.RawMessage, maxRows int) (t *Table, truncated, found bool) {
	if len(raw) > maxToolParse || len(raw) == 0 {
		return nil, false, false
	}
	if maxRows <= 0 {
		maxRows = DefaultMaxRows
	}
	switch raw[0] {
	case '[':
		return objectsTable(raw, maxRows)
	case '{':
	default:
		return nil, false, false
	}
	members, err := orderedMembers(raw)
	if err != nil {
		return nil, false, false
	}
	get := func(ms []member, k string) json.RawMessage {
		for _, m := range ms {
			if m.key == k {
				return m.val
			}
		}
		return nil
	}
	if t, tr, ok := queryJSONTable(get(members, "columns"), get(members, "rows"), maxRows); ok {
		return t, tr, true
	}
	if df := get(members, "dataframe"); len(df) > 0 && df[0] == '{' {
		if ms, err := orderedMembers(df); err == nil {
			if t, tr, ok := queryJSONTable(get(ms, "columns"), get(ms, "rows"), maxRows); ok {
				return t, tr, true
			}
		}
	}
	for _, m := range members {
		if len(m.val) > 0 && m.val[0] == '[' {
			if t, tr, ok := objectsTable(m.val, maxRows); ok && len(t.Rows) > 0 {
				return t, tr, true
			}
		}
	}
	return nil, false, false
}

type member struct {
	key string
	val json.RawMessage
}

// orderedMembers decodes an object's members in document order.
func orderedMembers(raw json.RawMessage) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not an object")
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, member{k, v})
	}
	return out, nil
}

func queryJSONTable(colsRaw, rowsRaw json.RawMessage, maxRows int) (*Table, bool, bool) {
	if len(colsRaw) == 0 || len(rowsRaw) == 0 {
		return nil, false, false
	}
	var cols []string
	if json.Unmarshal(colsRaw, &cols) != nil {
		return nil, false, false
	}
	var rows []json.RawMessage
	if json.Unmarshal(rowsRaw, &rows) != nil {
		return nil, false, false
	}
	t := &Table{Columns: cols, Rows: [][]any{}}
	truncated := len(rows) > maxRows
	if truncated {
		rows = rows[:maxRows]
	}
	for _, rr := range rows {
		row := make([]any, len(cols))
		switch {
		case len(rr) > 0 && rr[0] == '{':
			ms, err := orderedMembers(rr)
			if err != nil {
				return nil, false, false
			}
			for _, m := range ms {
				if i := slices.Index(cols, m.key); i >= 0 {
					row[i] = jsonValue(m.val)
				}
			}
		case len(rr) > 0 && rr[0] == '[':
			var cells []json.RawMessage
			if json.Unmarshal(rr, &cells) != nil {
				return nil, false, false
			}
			for i := range min(len(cells), len(cols)) {
				row[i] = jsonValue(cells[i])
			}
		default:
			return nil, false, false
		}
		t.Rows = append(t.Rows, row)
	}
	return t, truncated, true
}

func objectsTable(raw json.RawMessage, maxRows int) (*Table, bool, bool) {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
		return nil, false, false
	}
	truncated := len(items) > maxRows
	if truncated {
		items = items[:maxRows]
	}
	t := &Table{Columns: []string{}}
	index := map[string]int{}
	var objs [][]member
	for _, it := range items {
		if len(it) == 0 || it[0] != '{' {
			return nil, false, false
		}
		ms, err := orderedMembers(it)
		if err != nil {
			return nil, false, false
		}
		for _, m := range ms {
			if _, ok := index[m.key]; !ok && len(t.Columns) < maxToolCols {
				index[m.key] = len(t.Columns)
				t.Columns = append(t.Columns, m.key)
			}
		}
		objs = append(objs, ms)
	}
	for _, ms := range objs {
		row := make([]any, len(t.Columns))
		for _, m := range ms {
			if i, ok := index[m.key]; ok {
				row[i] = jsonValue(m.val)
			}
		}
		t.Rows = append(t.Rows, row)
	}
	return t, truncated, true
}

// jsonValue turns one JSON value into a cell.
func jsonValue(raw json.RawMessage) any {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	switch raw[0] {
	case 'n':
		return nil
	case 't', 'f':
		return raw[0] == 't'
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	case '{', '[':
		return string(raw)
	default:
		if i, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return i
		}
		if f, err := strconv.ParseFloat(string(raw), 64); err == nil {
			return f
		}
	}
	return string(raw)
}
