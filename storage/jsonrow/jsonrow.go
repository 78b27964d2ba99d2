// Package jsonrow is one result row encoded as a JSON object whose keys
// keep column order. Probing's tools return rows as objects keyed by
// column; a Go map would sort the keys, which reorders what a reader (or a
// model) sees against the columns list.
package jsonrow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// Row is one row: values in column order.
type Row struct {
	cols []string
	vals []any
}

// New makes a row; cols is shared, not copied.
func New(cols []string, vals []any) Row { return Row{cols: cols, vals: vals} }

// Get returns the value of a column, and whether the column exists.
func (r Row) Get(col string) (any, bool) {
	if i := slices.Index(r.cols, col); i >= 0 {
		return r.vals[i], true
	}
	return nil, false
}

// Values returns the values in column order (the row's own slice).
func (r Row) Values() []any { return r.vals }

// MarshalJSON writes the row as an object whose keys keep column order. A
// value JSON cannot encode is written as its text.
func (r Row) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, c := range r.cols {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(c)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(r.vals[i])
		if err != nil {
			v, _ = json.Marshal(fmt.Sprint(r.vals[i]))
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads a row back, keys in the order written (numbers as
// json.Number).
func (r *Row) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return fmt.Errorf("row: want a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return err
		}
		r.cols = append(r.cols, t.(string))
		r.vals = append(r.vals, v)
	}
	_, err := dec.Token()
	return err
}

// Int, Float and String read one cell of a SQL answer as the engine gives
// it (int64, float64, string or []byte): the other kinds, NULL included,
// read as the zero value.
func Int(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case float64:
		return int64(x)
	}
	return 0
}

// Float: see Int.
func Float(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int64:
		return float64(x)
	}
	return 0
}

// String: see Int.
func String(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return ""
}
