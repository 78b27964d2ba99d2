package traceexport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// Validate checks a trace against the Trace Event Format as the viewers
// read it: a JSON object with a traceEvents array (displayTimeUnit ms or
// ns when given); every event has a name, a known phase, a numeric ts and
// integer pid and tid; X has a numeric dur ≥ 0; an instant's scope is g,
// p or t; B and E match per thread; metadata events name a process or
// thread with args. On one thread, complete slices nest (Perfetto does
// not draw slices that overlap). The tests hold every trace Build makes
// to it.
func Validate(data []byte) error {
	if err := topKeys(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var top map[string]json.RawMessage
	if err := dec.Decode(&top); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("data after the JSON object")
	}
	if u, ok := top["displayTimeUnit"]; ok {
		var s string
		if json.Unmarshal(u, &s) != nil || (s != "ms" && s != "ns") {
			return fmt.Errorf("displayTimeUnit %s: want \"ms\" or \"ns\"", u)
		}
	}
	raw, ok := top["traceEvents"]
	if !ok {
		return fmt.Errorf("no traceEvents array")
	}
	var events []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &events); err != nil {
		return fmt.Errorf("traceEvents: %w", err)
	}
	type track struct{ pid, tid int64 }
	type span struct{ a, b float64 }
	open := map[track][]string{}
	spans := map[track][]span{}
	for i, e := range events {
		where := fmt.Sprintf("event %d", i)
		var name, ph string
		if err := str(e, "name", &name); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if err := str(e, "ph", &ph); err != nil {
			return fmt.Errorf("%s (%q): %w", where, name, err)
		}
		where = fmt.Sprintf("event %d (%q, ph %s)", i, name, ph)
		pid, err := integer(e, "pid")
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		tid, err := integer(e, "tid")
		if err != nil && ph != "M" {
			return fmt.Errorf("%s: %w", where, err)
		}
		ts, err := number(e, "ts")
		if err != nil && ph != "M" {
			return fmt.Errorf("%s: %w", where, err)
		}
		tr := track{pid, tid}
		switch ph {
		case "X":
			dur, err := number(e, "dur")
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			if dur < 0 {
				return fmt.Errorf("%s: dur %v < 0", where, dur)
			}
			spans[tr] = append(spans[tr], span{ts, ts + dur})
		case "B":
			open[tr] = append(open[tr], name)
		case "E":
			st := open[tr]
			if len(st) == 0 {
				return fmt.Errorf("%s: an E without its B on pid %d tid %d", where, pid, tid)
			}
			open[tr] = st[:len(st)-1]
		case "i", "I":
			if s, ok := e["s"]; ok {
				var v string
				if json.Unmarshal(s, &v) != nil || (v != "g" && v != "p" && v != "t") {
					return fmt.Errorf("%s: scope %s: want \"g\", \"p\" or \"t\"", where, s)
				}
			}
		case "M":
			var args map[string]json.RawMessage
			if err := json.Unmarshal(e["args"], &args); err != nil {
				return fmt.Errorf("%s: metadata without args", where)
			}
			switch name {
			case "process_name", "thread_name", "process_labels":
				var s string
				if json.Unmarshal(args["name"], &s) != nil && name != "process_labels" {
					return fmt.Errorf("%s: args.name is not a string", where)
				}
			case "process_sort_index", "thread_sort_index":
				if _, err := integer(args, "sort_index"); err != nil {
					return fmt.Errorf("%s: args.%w", where, err)
				}
			default:
				return fmt.Errorf("%s: unknown metadata event", where)
			}
		case "C", "b", "e", "n", "s", "t", "f", "P", "O", "N", "D", "R", "c", "(", ")":
		default:
			return fmt.Errorf("%s: unknown phase", where)
		}
		if a, ok := e["args"]; ok {
			var m map[string]json.RawMessage
			if json.Unmarshal(a, &m) != nil {
				return fmt.Errorf("%s: args is not an object", where)
			}
		}
	}
	for tr, st := range open {
		if len(st) > 0 {
			return fmt.Errorf("B %q on pid %d tid %d has no E", st[len(st)-1], tr.pid, tr.tid)
		}
	}
	for tr, ss := range spans {
		sort.Slice(ss, func(i, j int) bool {
			if ss[i].a != ss[j].a {
				return ss[i].a < ss[j].a
			}
			return ss[i].b > ss[j].b
		})
		var stack []span
		for _, s := range ss {
			for len(stack) > 0 && stack[len(stack)-1].b <= s.a {
				stack = stack[:len(stack)-1]
			}
			if len(stack) > 0 && s.b > stack[len(stack)-1].b {
				return fmt.Errorf("pid %d tid %d: slice [%v, %v] overlaps [%v, %v] without nesting", tr.pid, tr.tid, s.a, s.b, stack[len(stack)-1].a, stack[len(stack)-1].b)
			}
			stack = append(stack, s)
		}
	}
	return nil
}

// topKeys checks the object's keys in order: Perfetto's importer stops
// reading at a key it does not know, and some of its versions after the
// metadata, so only the format's keys are allowed, the events before the
// metadata.
func topKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return fmt.Errorf("not a JSON object")
	}
	seenEvents := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return fmt.Errorf("not a JSON object: %w", err)
		}
		k, _ := t.(string)
		switch k {
		case "traceEvents":
			seenEvents = true
		case "metadata":
			if !seenEvents {
				return fmt.Errorf("metadata before traceEvents: some Perfetto versions read no event after it")
			}
		case "displayTimeUnit", "otherData", "systemTraceEvents":
		default:
			return fmt.Errorf("top-level key %q: Perfetto's importer stops reading at a key it does not know", k)
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

func str(e map[string]json.RawMessage, k string, out *string) error {
	v, ok := e[k]
	if !ok {
		return fmt.Errorf("no %s", k)
	}
	if err := json.Unmarshal(v, out); err != nil {
		return fmt.Errorf("%s %s is not a string", k, v)
	}
	return nil
}

func number(e map[string]json.RawMessage, k string) (float64, error) {
	v, ok := e[k]
	if !ok {
		return 0, fmt.Errorf("no %s", k)
	}
	var n json.Number
	if len(v) == 0 || v[0] == '"' || json.Unmarshal(v, &n) != nil {
		return 0, fmt.Errorf("%s %s is not a number", k, v)
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%s %s is not a finite number", k, v)
	}
	return f, nil
}

func integer(e map[string]json.RawMessage, k string) (int64, error) {
	v, ok := e[k]
	if !ok {
		return 0, fmt.Errorf("no %s", k)
	}
	var n json.Number
	if len(v) == 0 || v[0] == '"' || json.Unmarshal(v, &n) != nil {
		return 0, fmt.Errorf("%s %s is not a number", k, v)
	}
	i, err := n.Int64()
	if err != nil {
		return 0, fmt.Errorf("%s %s is not an integer", k, v)
	}
	return i, nil
}
