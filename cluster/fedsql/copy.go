package fedsql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/bytesize"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// tableInfo is one table of the job: every node's columns unioned.
type tableInfo struct {
	schema, name string
	cols         []string
	types        map[string]string
	on           map[string][]string // node ID → its columns
}

// part is one node's rows of one table, waiting to be loaded; size is
// what they were charged to the query's memory cap.
type part struct {
	ti   *tableInfo
	node Node
	rep  *ScanReply
	size int64
}

// catalog asks every node for its tables.
func (q *query) catalog() map[string]*tableInfo {
	tables := map[string]*tableInfo{}
	each(q.ctx, q.nodes, q.opt.Concurrency, func(ctx context.Context, n Node) {
		ts, err := n.Tables(ctx)
		q.mu.Lock()
		defer q.mu.Unlock()
		if err != nil {
			q.failed[n.ID()] = err.Error()
			return
		}
		for _, t := range ts {
			k := strings.ToLower(t.Schema + "." + t.Name)
			ti := tables[k]
			if ti == nil {
				ti = &tableInfo{schema: t.Schema, name: t.Name, types: map[string]string{}, on: map[string][]string{}}
				tables[k] = ti
			}
			var cs []string
			for _, c := range t.Columns {
				if !validIdent(c.Name) {
					continue
				}
				if _, ok := ti.types[c.Name]; !ok {
					ti.types[c.Name] = c.Type
					ti.cols = append(ti.cols, c.Name)
				}
				cs = append(cs, c.Name)
			}
			ti.on[n.ID()] = cs
		}
	})
	return tables
}

// copyRows fetches the rows of every table the statement names from
// every node that has it, with the filters that can go down. Each reply
// is charged to the query's memory cap as it arrives; the copy stops at
// the cap. It returns the parts and how many filters went down.
func (q *query) copyRows() ([]part, int, error) {
	tables := q.catalog()
	var used []*tableInfo
	for _, m := range tableRef.FindAllStringSubmatch(q.sql, -1) {
		k := strings.ToLower(strings.Trim(m[1], `"`) + "." + strings.Trim(m[2], `"`))
		if ti := tables[k]; ti != nil && !contains(used, ti) {
			used = append(used, ti)
		}
	}
	if len(used) == 0 {
		if err := q.ctx.Err(); err != nil {
			return nil, 0, err
		}
		var names []string
		for k := range tables {
			names = append(names, k)
		}
		sort.Strings(names)
		if len(names) > 20 {
			names = append(names[:20], "…")
		}
		return nil, 0, &sqlengine.Error{Kind: "no_table", Msg: fmt.Sprintf("the query names no ring table of the job's nodes; name one as schema.table (the nodes have: %s), or call describe_tables", orNone(strings.Join(names, ", ")))}
	}
	// Node tag filters prune nodes; the rest go down.
	var down, tagEq []Constraint
	for _, c := range pushdown(q.sql) {
		if nodeTagCols[c.Column] {
			if c.Op == "=" {
				tagEq = append(tagEq, c)
			}
			continue
		}
		down = append(down, c)
	}
	prune := func(n Node) bool {
		t := n.Tags()
		for _, c := range tagEq {
			v, _ := tagValue(t, c.Column)
			if fmt.Sprint(v) != fmt.Sprint(c.Value) {
				return true
			}
		}
		return false
	}
	var live []Node
	for _, n := range q.nodes {
		if _, bad := q.failed[n.ID()]; !bad && !prune(n) {
			live = append(live, n)
		}
	}
	var parts []part
	total := 0
	overCap := false
	maxValue := q.opt.Limiter.Limits().MaxValueBytes
	for _, ti := range used {
		each(q.ctx, live, q.opt.Concurrency, func(ctx context.Context, n Node) {
			cols := ti.on[n.ID()]
			if len(cols) == 0 {
				return // this node has no such table
			}
			var w []Constraint
			for _, c := range down {
				if containsStr(cols, c.Column) {
					w = append(w, c)
				}
			}
			rep, err := n.Scan(ctx, ScanRequest{Schema: ti.schema, Table: ti.name, Columns: cols, Where: w, Limit: q.opt.MaxRowsPerNode})
			q.mu.Lock()
			defer q.mu.Unlock()
			switch {
			case overCap:
				return // the query fails anyway
			case err != nil:
				q.failed[n.ID()] = err.Error()
				return
			}
			if err := checkReply(rep, cols); err != nil {
				q.failed[n.ID()] = "its answer is malformed: " + err.Error()
				return
			}
			if err := checkValues(rep, maxValue); err != nil {
				q.failed[n.ID()] = "its answer was refused: " + err.Error()
				return
			}
			if total+len(rep.Rows) > q.opt.MaxRows {
				q.notes = append(q.notes, fmt.Sprintf("%s.%s from %s left out: the copy already holds %d rows (the cap is %d); narrow the query with a WHERE on timestamp or _rank", ti.schema, ti.name, jobtext.Token(n.ID(), jobtext.Name), total, q.opt.MaxRows))
				return
			}
			size := replyBytes(rep)
			if !q.c.Charge(size) {
				overCap = true
				return
			}
			total += len(rep.Rows)
			if rep.Truncated {
				q.notes = append(q.notes, fmt.Sprintf("%s.%s on %s: only its first %d rows were copied (cap per node); counts and sums are lower bounds", ti.schema, ti.name, jobtext.Token(n.ID(), jobtext.Name), len(rep.Rows)))
			}
			for _, p := range rep.Problems {
				q.notes = append(q.notes, jobtext.Token(n.ID(), jobtext.Name)+" said: "+jobtext.Quote(p, jobtext.Line)) // the node's words
			}
			parts = append(parts, part{ti, n, rep, size})
		})
	}
	switch {
	case q.ctx.Err() != nil:
		return nil, 0, q.ctx.Err()
	case overCap:
		return nil, 0, q.copyMemoryError()
	}
	return parts, len(down), nil
}

// load creates the tables and copies the parts into SQLite. A part's
// charge is given back once SQLite holds its rows (its pages are charged
// by then) and its Go copy is dropped.
func (q *query) load(parts []part) error {
	tables := map[*tableInfo]bool{}
	schemas := map[string]bool{}
	for _, p := range parts {
		ti := p.ti
		if tables[ti] {
			continue
		}
		tables[ti] = true
		if !schemas[strings.ToLower(ti.schema)] && !strings.EqualFold(ti.schema, "main") {
			if _, err := q.c.Exec("ATTACH ':memory:' AS "+sqlengine.QuoteIdent(ti.schema), nil); err != nil {
				return q.loadError(err)
			}
			schemas[strings.ToLower(ti.schema)] = true
		}
		var defs []string
		for _, col := range ti.cols {
			defs = append(defs, sqlengine.QuoteIdent(col)+" "+sqlType(ti.types[col]))
		}
		if _, err := q.c.Exec(fmt.Sprintf("CREATE TABLE %s.%s (%s)", sqlengine.QuoteIdent(ti.schema), sqlengine.QuoteIdent(ti.name), strings.Join(defs, ", ")), nil); err != nil {
			return q.loadError(err)
		}
	}
	if _, err := q.c.Exec("BEGIN", nil); err != nil {
		return q.loadError(err)
	}
	for i := range parts {
		p := &parts[i]
		if err := q.insert(p); err != nil {
			return q.loadError(err)
		}
		q.c.Uncharge(p.size)
		p.rep, p.size = nil, 0
	}
	if _, err := q.c.Exec("COMMIT", nil); err != nil {
		return q.loadError(err)
	}
	return nil
}

// loadError: the deadline, the cap, or SQLite stopped the load.
func (q *query) loadError(err error) error {
	switch {
	case q.ctx.Err() != nil:
		return q.ctx.Err()
	case q.c.OverCap():
		return q.copyMemoryError()
	}
	if le := q.c.LimitError(err); le != nil {
		return le
	}
	return fmt.Errorf("fedsql: loading the nodes' rows: %w", err)
}

// insert copies one part. go-sqlite3's Exec has no context, so the loop
// checks the deadline itself (the meter's interrupt also fails the
// statement under way).
func (q *query) insert(p *part) error {
	rep, tags := p.rep, p.node.Tags()
	if len(rep.Rows) == 0 {
		return nil
	}
	ph := strings.TrimSuffix(strings.Repeat("?,", len(rep.Columns)), ",")
	var qcols []string
	for _, col := range rep.Columns {
		qcols = append(qcols, sqlengine.QuoteIdent(col))
	}
	st, err := q.c.Prepare(fmt.Sprintf("INSERT INTO %s.%s (%s) VALUES (%s)", sqlengine.QuoteIdent(p.ti.schema), sqlengine.QuoteIdent(p.ti.name), strings.Join(qcols, ","), ph))
	if err != nil {
		return err
	}
	defer st.Close()
	args := make([]driver.Value, len(rep.Columns))
	for j, r := range rep.Rows {
		if j%256 == 0 {
			if err := q.ctx.Err(); err != nil {
				return err
			}
		}
		for i, v := range r {
			if tv, ok := tagValue(tags, rep.Columns[i]); ok {
				v = tv
			}
			if f, ok := v.(float64); ok && f == float64(int64(f)) {
				// JSON numbers arrive as floats: whole ones are integers.
				v = int64(f)
			}
			if n, ok := v.(int); ok {
				v = int64(n)
			}
			args[i] = v
		}
		if _, err := st.Exec(args); err != nil {
			return err
		}
	}
	return nil
}

var tableRef = regexp.MustCompile(`("?[A-Za-z_][A-Za-z0-9_]*"?)\s*\.\s*("?[A-Za-z_][A-Za-z0-9_]*"?)`)

func validIdent(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func sqlType(t string) string {
	switch strings.ToUpper(t) {
	case "INTEGER", "INT", "BIGINT":
		return "INTEGER"
	case "REAL", "FLOAT", "DOUBLE":
		return "REAL"
	case "TEXT", "BLOB":
		return strings.ToUpper(t)
	}
	return ""
}

// checkReply refuses a node's rows that do not match what was asked.
func checkReply(rep *ScanReply, cols []string) error {
	if rep == nil {
		return errors.New("no reply")
	}
	if len(rep.Columns) != len(cols) {
		return fmt.Errorf("%d columns, %d asked", len(rep.Columns), len(cols))
	}
	for i, c := range rep.Columns {
		if c != cols[i] {
			return fmt.Errorf("column %d is %q, %q asked", i, c, cols[i])
		}
	}
	for i, r := range rep.Rows {
		if len(r) != len(cols) {
			return fmt.Errorf("row %d has %d values for %d columns", i, len(r), len(cols))
		}
		for _, v := range r {
			switch v.(type) {
			case nil, string, float64, int64, int, bool:
			default:
				return fmt.Errorf("row %d holds a %T", i, v)
			}
		}
	}
	return nil
}

// checkValues refuses a reply with a value longer than the engine's
// value-length guard: SQLite would refuse to store it, and a node's own
// engine cuts its cells far shorter.
func checkValues(rep *ScanReply, max int) error {
	for i, r := range rep.Rows {
		for j, v := range r {
			if s, ok := v.(string); ok && len(s) > max {
				return fmt.Errorf("row %d's %s is %d bytes, over the %s value-length guard (%s)", i, rep.Columns[j], len(s), bytesize.Format(int64(max)), sqlengine.EnvMaxValue)
			}
		}
	}
	return nil
}

// replyBytes estimates the Go memory of a node's decoded rows: a slice
// header per row, an interface per value, and each string's header and
// bytes (a number is boxed in 8).
func replyBytes(rep *ScanReply) int64 {
	n := int64(0)
	for _, r := range rep.Rows {
		n += 24 + 16*int64(len(r))
		for _, v := range r {
			if s, ok := v.(string); ok {
				n += 16 + int64(len(s))
			} else {
				n += 8
			}
		}
	}
	return n
}
