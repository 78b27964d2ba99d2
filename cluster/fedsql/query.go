package fedsql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/mattn/go-sqlite3"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// Options bound a federated query.
type Options struct {
	// Concurrency: nodes asked at once (default 32).
	Concurrency int
	// MaxRowsPerNode caps one node's rows of one table (default 20,000).
	MaxRowsPerNode int
	// MaxRows caps the rows copied from every node together (default
	// 500,000): the copy lives in this process's memory.
	MaxRows int
	// Strict: a node that does not answer is an error, not a gap.
	Strict bool
}

func (o *Options) defaults() {
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.MaxRowsPerNode <= 0 {
		o.MaxRowsPerNode = 20000
	}
	if o.MaxRows <= 0 {
		o.MaxRows = 500000
	}
}

// tagCols are overridden with the node's own name on the coordinator.
var nodeTagCols = map[string]bool{"_host": true, "_addr": true, "_node_rank": true}

// Query runs one read-only statement over the union of every node's ring
// tables. Each table the statement names is copied from every node (with
// the plainest WHERE filters pushed down to the nodes, and node tag
// filters pruning nodes), into a private in-memory SQLite, where the
// statement runs whole under the engine's read-only guard: aggregates,
// joins and ORDER BY are exact over what was copied, and every gap (a
// node that did not answer, a cap reached) is said in data_quality.
func Query(ctx context.Context, nodes []Node, sqlText string, limit int, opt Options) (*sqlengine.Result, error) {
	opt.defaults()
	if err := sqlengine.CheckReadOnly(sqlText); err != nil {
		return nil, err
	}
	limit = sqlengine.ClampLimit(limit)
	var notes []string
	// The catalog: every node's tables, columns unioned.
	type tableInfo struct {
		schema, name string
		cols         []string
		types        map[string]string
		on           map[string][]string // node ID → its columns
	}
	tables := map[string]*tableInfo{}
	var mu sync.Mutex
	failed := map[string]string{}
	each(ctx, nodes, opt.Concurrency, func(ctx context.Context, n Node) {
		ts, err := n.Tables(ctx)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed[n.ID()] = err.Error()
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
	// The tables the statement names.
	var used []*tableInfo
	for _, m := range tableRef.FindAllStringSubmatch(sqlText, -1) {
		k := strings.ToLower(strings.Trim(m[1], `"`) + "." + strings.Trim(m[2], `"`))
		if ti := tables[k]; ti != nil && !contains(used, ti) {
			used = append(used, ti)
		}
	}
	if len(used) == 0 {
		var names []string
		for k := range tables {
			names = append(names, k)
		}
		sort.Strings(names)
		if len(names) > 20 {
			names = append(names[:20], "…")
		}
		return nil, &sqlengine.Error{Kind: "no_table", Msg: fmt.Sprintf("the query names no ring table of the job's nodes; name one as schema.table (the nodes have: %s), or call describe_tables", orNone(strings.Join(names, ", ")))}
	}
	where := pushdown(sqlText)
	// Node tag filters prune nodes; the rest go down.
	var down []Constraint
	prune := func(n Node) bool { return false }
	var tagEq []Constraint
	for _, c := range where {
		if nodeTagCols[c.Column] {
			if c.Op == "=" {
				tagEq = append(tagEq, c)
			}
			continue
		}
		down = append(down, c)
	}
	if len(tagEq) > 0 {
		prune = func(n Node) bool {
			t := n.Tags()
			for _, c := range tagEq {
				v, _ := tagValue(t, c.Column)
				if fmt.Sprint(v) != fmt.Sprint(c.Value) {
					return true
				}
			}
			return false
		}
	}
	// Copy the rows.
	type part struct {
		ti   *tableInfo
		node Node
		rep  *ScanReply
	}
	var parts []part
	total := 0
	var live []Node
	for _, n := range nodes {
		if _, bad := failed[n.ID()]; !bad && !prune(n) {
			live = append(live, n)
		}
	}
	for _, ti := range used {
		each(ctx, live, opt.Concurrency, func(ctx context.Context, n Node) {
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
			rep, err := n.Scan(ctx, ScanRequest{Schema: ti.schema, Table: ti.name, Columns: cols, Where: w, Limit: opt.MaxRowsPerNode})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed[n.ID()] = err.Error()
				return
			}
			if err := checkReply(rep, cols); err != nil {
				failed[n.ID()] = "its answer is malformed: " + err.Error()
				return
			}
			if total+len(rep.Rows) > opt.MaxRows {
				notes = append(notes, fmt.Sprintf("%s.%s from %s left out: the copy already holds %d rows (the cap is %d); narrow the query with a WHERE on timestamp or _rank", ti.schema, ti.name, jobtext.Token(n.ID(), jobtext.Name), total, opt.MaxRows))
				return
			}
			total += len(rep.Rows)
			if rep.Truncated {
				notes = append(notes, fmt.Sprintf("%s.%s on %s: only its first %d rows were copied (cap per node); counts and sums are lower bounds", ti.schema, ti.name, jobtext.Token(n.ID(), jobtext.Name), len(rep.Rows)))
			}
			for _, p := range rep.Problems {
				notes = append(notes, jobtext.Token(n.ID(), jobtext.Name)+" said: "+jobtext.Quote(p, jobtext.Line)) // the node's words
			}
			parts = append(parts, part{ti, n, rep})
		})
	}
	if err := ctx.Err(); err != nil {
		return nil, &sqlengine.Error{Kind: "timeout", Msg: "the nodes did not all answer within the query's time; narrow the query or raise the deadline"}
	}
	answered := len(nodes) - len(failed)
	var missing []string
	for id, why := range failed {
		missing = append(missing, jobtext.Token(id, jobtext.Name)+": "+why)
	}
	sort.Strings(missing)
	if opt.Strict && len(failed) > 0 {
		return nil, &sqlengine.Error{Kind: "partial", Msg: fmt.Sprintf("partial answer refused (PROBING_FANOUT_STRICT=1): %d/%d nodes answered; %s", answered, len(nodes), strings.Join(missing, "; "))}
	}
	// Load the copy and run the statement.
	conn, err := (&sqlite3.SQLiteDriver{}).Open(":memory:")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	c := conn.(*sqlite3.SQLiteConn)
	schemas := map[string]bool{}
	for _, ti := range used {
		if !schemas[strings.ToLower(ti.schema)] && !strings.EqualFold(ti.schema, "main") {
			if _, err := c.Exec("ATTACH ':memory:' AS "+sqlengine.QuoteIdent(ti.schema), nil); err != nil {
				return nil, err
			}
			schemas[strings.ToLower(ti.schema)] = true
		}
		var defs []string
		for _, col := range ti.cols {
			defs = append(defs, sqlengine.QuoteIdent(col)+" "+sqlType(ti.types[col]))
		}
		if _, err := c.Exec(fmt.Sprintf("CREATE TABLE %s.%s (%s)", sqlengine.QuoteIdent(ti.schema), sqlengine.QuoteIdent(ti.name), strings.Join(defs, ", ")), nil); err != nil {
			return nil, err
		}
	}
	if _, err := c.Exec("BEGIN", nil); err != nil {
		return nil, err
	}
	for _, p := range parts {
		if err := insert(c, p.ti.schema, p.ti.name, p.rep, p.node.Tags()); err != nil {
			return nil, err
		}
	}
	if _, err := c.Exec("COMMIT", nil); err != nil {
		return nil, err
	}
	// The statement gets the engine's bounds (a printf width built a 1 GB
	// string here, issue 23); the copy above was loaded without them.
	if err := sqlengine.BoundConn(c, sqlengine.Options{}); err != nil {
		return nil, err
	}
	g := &sqlengine.Guard{}
	g.Install(c)
	rows, err := c.QueryContext(ctx, sqlText, nil)
	if err != nil {
		if gerr := g.Err(); gerr != nil {
			return nil, gerr
		}
		if le := sqlengine.LimitError(err, sqlengine.Options{}); le != nil {
			return nil, le
		}
		return nil, &sqlengine.Error{Kind: "sql", Msg: err.Error()}
	}
	defer rows.Close()
	res := &sqlengine.Result{Columns: rows.Columns(), Rows: []sqlengine.Row{}}
	vals := make([]driver.Value, len(res.Columns))
	for {
		err := rows.Next(vals)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if le := sqlengine.LimitError(err, sqlengine.Options{}); le != nil {
				return nil, le
			}
			return nil, &sqlengine.Error{Kind: "sql", Msg: err.Error()}
		}
		res.TotalRows++
		if len(res.Rows) < limit {
			row := make([]any, len(vals))
			for i, v := range vals {
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				row[i] = v
			}
			res.Rows = append(res.Rows, jsonrow.New(res.Columns, row))
		}
	}
	res.RowCount = len(res.Rows)
	res.Truncated = res.TotalRows > res.RowCount
	q := &sqlengine.Quality{Notes: []string{fmt.Sprintf("%d/%d node(s) answered", answered, len(nodes))}}
	if len(down) > 0 {
		q.Notes = append(q.Notes, fmt.Sprintf("%d filter(s) applied on the nodes", len(down)))
	}
	for i, m := range missing {
		if i == 20 {
			q.Notes = append(q.Notes, fmt.Sprintf("… and %d more nodes did not answer", len(missing)-i))
			break
		}
		q.Notes = append(q.Notes, "did not answer: "+m)
	}
	q.Notes = append(q.Notes, notes...)
	q.Partial = len(failed) > 0 || len(notes) > 0
	res.DataQuality = q
	return res, nil
}

var tableRef = regexp.MustCompile(`("?[A-Za-z_][A-Za-z0-9_]*"?)\s*\.\s*("?[A-Za-z_][A-Za-z0-9_]*"?)`)

func contains[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func containsStr(xs []string, x string) bool { return contains(xs, x) }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

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

func insert(c *sqlite3.SQLiteConn, schema, table string, rep *ScanReply, tags NodeTags) error {
	if len(rep.Rows) == 0 {
		return nil
	}
	ph := strings.TrimSuffix(strings.Repeat("?,", len(rep.Columns)), ",")
	var qcols []string
	for _, col := range rep.Columns {
		qcols = append(qcols, sqlengine.QuoteIdent(col))
	}
	st, err := c.Prepare(fmt.Sprintf("INSERT INTO %s.%s (%s) VALUES (%s)", sqlengine.QuoteIdent(schema), sqlengine.QuoteIdent(table), strings.Join(qcols, ","), ph))
	if err != nil {
		return err
	}
	defer st.Close()
	args := make([]driver.Value, len(rep.Columns))
	for _, r := range rep.Rows {
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

// each runs fn on every node, at most n at a time.
func each(ctx context.Context, nodes []Node, n int, fn func(context.Context, Node)) {
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, nd := range nodes {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(ctx, nd)
		}()
	}
	wg.Wait()
}

// tagValue is a node tag column's value for the node, as the rows carry it.
func tagValue(t NodeTags, col string) (any, bool) {
	switch col {
	case "_host":
		return t.Host, true
	case "_addr":
		return t.Addr, true
	case "_node_rank":
		return int64(t.NodeRank), true
	}
	return nil, false
}
