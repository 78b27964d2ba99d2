// Package sqlengine runs read-only SQL over what the agents recorded: every
// MEMT ring in the data dir appears as schema.table (python.comm_collective),
// rows of all local processes unioned with tag columns naming the writer
// (_pid, _rank, …, Probing's federation tag names), plus the documentation
// tables probing.table_docs / probing.column_docs / probing.rings and, when
// it exists, the persisted history as history.*.
//
// Each query gets a fresh in-memory SQLite connection: the data dir is
// listed again, so new processes and new rows up to the moment the query
// runs are visible, and nothing leaks between queries. Rings are SQLite
// virtual tables served from chunk copies (vtab.c). Read-only is enforced
// by SQLite's authorizer, not by parsing the SQL.
//
// Each query is bounded: in memory by a per-query cap on everything SQLite
// allocates for it (memcap.c), temporary storage included; in time by the
// deadline, which the caller always gets (withSession), and by the length
// of values and programs, which bounds what SQLite does between two
// interrupt checks (limits.go, boundfn.c); and in number, by query slots.
package sqlengine

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/probing-mcp/probing-mcp/internal/safefile"
	"github.com/probing-mcp/probing-mcp/storage"
	"github.com/probing-mcp/probing-mcp/storage/jsonrow"
	"github.com/probing-mcp/probing-mcp/storage/tabledocs"
)

// Limits for query results, as Probing's MCP tools have them.
const (
	DefaultLimit = 200
	MaxLimit     = 1000
)

// Options configure an Engine.
type Options struct {
	DataDir string
	// HistoryPath is the persisted history database, attached read-only as
	// schema "history" when the file exists. Empty: none.
	HistoryPath string
	// Timeout bounds one query (default 20 s). Cancellation interrupts
	// SQLite mid-statement.
	Timeout time.Duration
	// MaxCellBytes cuts longer text and blob cells (default 4096), so one
	// stack-trace column cannot flood an LLM's context.
	MaxCellBytes int
	// Host fills the _host tag (default: os.Hostname).
	Host string

	// MemoryLimit caps the SQLite memory of one query (default 256 MiB):
	// its page cache, sorters, DISTINCT and GROUP BY tables, values and
	// ring chunk buffers. A query that needs more fails at once.
	MemoryLimit int64
	// MaxValueBytes is the longest string or blob a query may read or
	// build (default 4 MiB); it keeps every function call short.
	MaxValueBytes int
	// MaxConcurrent queries run at once (default 4); others wait for a
	// slot within their own time limit.
	MaxConcurrent int
}

// Engine answers SQL over a data dir. It is safe for concurrent use.
type Engine struct {
	opt Options
	lim *Limiter
}

// New returns an engine over opt.DataDir.
func New(opt Options) (*Engine, error) {
	if err := opt.checkLimits(); err != nil {
		return nil, err
	}
	lim, err := NewLimiter(opt, "the SQL engine")
	if err != nil {
		return nil, err
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 20 * time.Second
	}
	if opt.MaxCellBytes <= 0 {
		opt.MaxCellBytes = 4096
	}
	if opt.Host == "" {
		opt.Host, _ = os.Hostname()
	}
	return &Engine{opt: opt, lim: lim}, nil
}

// DataDir is the directory the engine reads.
func (e *Engine) DataDir() string { return e.opt.DataDir }

// ClampLimit applies the default and the maximum to a requested row limit.
func ClampLimit(limit int) int {
	switch {
	case limit <= 0:
		return DefaultLimit
	case limit > MaxLimit:
		return MaxLimit
	}
	return limit
}

// Error is a query the engine refused or SQLite rejected; its message is
// written for the person (or model) who wrote the SQL and says how to fix
// the query or which setting raises the limit it hit.
type Error struct {
	// Kind: "empty", "multiple", "read_only", "sql", "timeout",
	// "canceled", "memory" (the per-query memory cap), "too_big" (a value,
	// pattern, SQL text or program over its guard), "busy" (no query
	// slot freed up within the time limit).
	Kind string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// session is one connection prepared for one query.
type session struct {
	conn    *sqlite3.SQLiteConn
	m       *meter // nil outside a metered query (tests)
	inv     *storage.Inventory
	sources []*source
	q       *scanQuality
	denied  string
	// deniedFunc is the whole message for a function the engine does not
	// offer (funcs.go).
	deniedFunc string
	skipped    []storage.Problem
	// infoSchema: serve information_schema.tables/columns (the query names it)
	infoSchema bool
	sqlText    string
}

var driverOnce sync.Once
var drv *sqlite3.SQLiteDriver

func (e *Engine) open(ctx context.Context, withDocs bool) (*session, error) {
	return e.openWith(ctx, withDocs, false)
}

func (e *Engine) openWith(ctx context.Context, withDocs, infoSchema bool) (*session, error) {
	inv, err := storage.Discover(e.opt.DataDir)
	if err != nil {
		return nil, err
	}
	driverOnce.Do(func() { drv = &sqlite3.SQLiteDriver{} })
	c, err := drv.Open(":memory:")
	if err != nil {
		return nil, fmt.Errorf("sqlengine: opening SQLite: %w", err)
	}
	s := &session{conn: c.(*sqlite3.SQLiteConn), inv: inv, q: &scanQuality{}, infoSchema: infoSchema}
	if err := s.setup(e, withDocs); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *session) exec(q string, args ...driver.Value) error {
	_, err := s.conn.Exec(q, args)
	return err
}

// maxSchemas leaves SQLite's limit of 10 attached databases room for
// probing, history and information_schema.
const maxSchemas = 7

func (s *session) setup(e *Engine, withDocs bool) error {
	if err := applyLimits(s.conn, &e.opt); err != nil {
		return fmt.Errorf("sqlengine: bounding the connection: %w", err)
	}
	// Group rings into tables, case-insensitively as SQLite names are.
	type key struct{ schema, table string }
	groups := map[key]*source{}
	var order []key
	schemas := map[string]string{} // lower → spelling
	var schemaOrder []string
	ids := map[int]storage.Identity{}
	for _, p := range s.inv.Processes {
		id := p.Identity
		if id.Host == "" {
			id.Host = e.opt.Host
		}
		ids[p.PID] = id
	}
	for _, r := range s.inv.Rings() {
		ls := strings.ToLower(r.Schema)
		if ls == "main" || ls == "temp" || ls == "probing" || ls == "history" {
			s.skipped = append(s.skipped, storage.Problem{Path: r.Path, Problem: fmt.Sprintf("schema name %q is reserved; ring not queryable", r.Schema)})
			continue
		}
		if _, ok := schemas[ls]; !ok {
			if len(schemas) == maxSchemas {
				s.skipped = append(s.skipped, storage.Problem{Path: r.Path, Problem: fmt.Sprintf("more than %d schemas in the data dir; schema %q not queryable", maxSchemas, r.Schema)})
				continue
			}
			schemas[ls] = r.Schema
			schemaOrder = append(schemaOrder, ls)
		}
		k := key{ls, strings.ToLower(r.Table)}
		src := groups[k]
		if src == nil {
			src = &source{schema: schemas[ls], table: r.Table, tsCol: -1, q: s.q}
			groups[k] = src
			order = append(order, k)
		}
		src.addRing(r, ids[r.PID])
	}
	for _, ls := range schemaOrder {
		if err := s.exec(`ATTACH DATABASE ':memory:' AS ` + quoteIdent(schemas[ls])); err != nil {
			return fmt.Errorf("sqlengine: attaching schema %s: %w", schemas[ls], err)
		}
	}
	for _, k := range order {
		src := groups[k]
		h := newSourceHandle(src)
		s.sources = append(s.sources, src)
		q := fmt.Sprintf("CREATE VIRTUAL TABLE %s.%s USING memt(%d)", quoteIdent(src.schema), quoteIdent(src.table), h)
		if err := s.exec(q); err != nil {
			return fmt.Errorf("sqlengine: table %s.%s: %w", src.schema, src.table, err)
		}
	}
	if e.opt.HistoryPath != "" {
		if _, err := os.Lstat(e.opt.HistoryPath); err == nil {
			// SQLite follows links: a planted history.db could make the
			// server's queries read any database its user can.
			if err := trustedHistory(e.opt.HistoryPath); err != nil {
				s.skipped = append(s.skipped, storage.Problem{Path: e.opt.HistoryPath, Problem: "history not attached: " + err.Error()})
			} else {
				uri := "file:" + escapeURIPath(e.opt.HistoryPath) + "?mode=ro"
				if err := s.exec(`ATTACH DATABASE ? AS history`, uri); err != nil {
					s.skipped = append(s.skipped, storage.Problem{Path: e.opt.HistoryPath, Problem: "history not attached: " + err.Error()})
				}
			}
		}
	}
	if withDocs {
		if err := s.createDocs(); err != nil {
			return err
		}
	}
	if s.infoSchema {
		if err := s.createInfoSchema(withDocs); err != nil {
			return err
		}
	}
	// From here on, only reads.
	s.conn.RegisterAuthorizer(s.authorize)
	return nil
}

// trustedHistory says why the history file may not be attached: it must
// be this user's (or root's) regular file, not a link, in a directory
// nobody else can write (safefile's rule, as history.Open checks).
func trustedHistory(path string) error {
	if err := safefile.CheckDir(filepath.Dir(path)); err != nil {
		return err
	}
	f, err := safefile.Open(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

// escapeURIPath escapes what a SQLite URI path may not contain raw.
func escapeURIPath(p string) string {
	r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	return r.Replace(p)
}

func (s *session) close() {
	if s.conn != nil {
		s.conn.Close()
	}
	for _, src := range s.sources {
		src.close()
	}
}

// query is Query (tracing.go) untraced; metrics count it (metrics.go).
func (e *Engine) query(ctx context.Context, sqlText string, limit int) (res *Result, err error) {
	defer observeQuery(time.Now(), &res, &err) // metrics.go
	if len(sqlText) > MaxSQLBytes {
		return nil, sqlTooLongError(len(sqlText))
	}
	if err := checkStatement(sqlText); err != nil {
		return nil, err
	}
	limit = ClampLimit(limit)
	ctx, cancel := context.WithTimeout(ctx, e.opt.Timeout)
	defer cancel()
	return withSession(ctx, e, mentionsDocs(sqlText), strings.Contains(strings.ToLower(sqlText), "information_schema"), func(s *session) (*Result, error) {
		return s.run(ctx, e, sqlText, limit)
	})
}

// withSession runs fn over a fresh session in one of the engine's query
// slots, with the session's SQLite memory metered and capped from open to
// close, and the caller's deadline kept (run).
func withSession[T any](ctx context.Context, e *Engine, withDocs, infoSchema bool, fn func(s *session) (T, error)) (T, error) {
	return run(ctx, e.lim, func() error { return e.stoppedError(ctx, "") }, func(m *meter) (T, error) {
		s, err := e.openWith(ctx, withDocs, infoSchema)
		if err != nil {
			var zero T
			return zero, e.setupError(ctx, m, err)
		}
		s.m = m
		defer func() {
			m.unwatch() // before the connection it interrupts goes away
			s.close()
		}()
		return fn(s)
	})
}

// stoppedError is the error of a query whose context ended.
func (e *Engine) stoppedError(ctx context.Context, while string) *Error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return &Error{Kind: "canceled", Msg: "query canceled"}
	}
	return &Error{Kind: "timeout", Msg: fmt.Sprintf("query stopped after the %s time limit%s; narrow it (a WHERE on the timestamp column prunes whole ring chunks) or aggregate", e.opt.Timeout, while)}
}

// setupError: a session that failed to open because the query ran out of
// time or memory says so, as a query error.
func (e *Engine) setupError(ctx context.Context, m *meter, err error) error {
	switch {
	case ctx.Err() != nil:
		return e.stoppedError(ctx, " while the data dir was being opened")
	case m.exceeded():
		return e.memoryError()
	}
	return err
}

func mentionsDocs(q string) bool {
	return strings.Contains(strings.ToLower(q), "probing")
}

func (s *session) run(ctx context.Context, e *Engine, sqlText string, limit int) (*Result, error) {
	s.sqlText = sqlText
	rows, err := s.conn.QueryContext(ctx, sqlText, nil)
	if err != nil {
		return nil, s.queryError(ctx, e, err)
	}
	defer rows.Close()
	res := &Result{Columns: uniqueColumns(rows.Columns()), Rows: []Row{}}
	dest := make([]driver.Value, len(res.Columns))
	total := 0
	var cellsCut int
	for {
		err := rows.Next(dest)
		if err == io.EOF {
			break
		}
		if err != nil {
			if total > 0 && ctx.Err() != nil {
				// The rows we have are good; only the count is cut short.
				res.TotalRowsLowerBound = true
				break
			}
			return nil, s.queryError(ctx, e, err)
		}
		total++
		if total <= limit {
			vals := make([]any, len(dest))
			for i, v := range dest {
				var cut bool
				vals[i], cut = cell(v, e.opt.MaxCellBytes)
				if cut {
					cellsCut++
				}
			}
			res.Rows = append(res.Rows, jsonrow.New(res.Columns, vals))
		}
	}
	res.RowCount = len(res.Rows)
	res.TotalRows = total
	res.Truncated = total > res.RowCount
	res.DataQuality = s.quality(cellsCut, e.opt.MaxCellBytes, res.TotalRowsLowerBound)
	return res, nil
}

func (s *session) queryError(ctx context.Context, e *Engine, err error) error {
	switch {
	case ctx.Err() != nil:
		return e.stoppedError(ctx, "")
	case s.deniedFunc != "":
		return &Error{Kind: "read_only", Msg: s.deniedFunc}
	case s.denied != "":
		return &Error{Kind: "read_only", Msg: "read-only SQL engine: " + s.denied + " is not allowed; only SELECT, WITH … SELECT, VALUES and EXPLAIN run here"}
	}
	if le := s.limitError(e, err); le != nil {
		return le
	}
	msg := "SQL error: " + err.Error()
	switch {
	case strings.Contains(strings.ToLower(s.sqlText), "global."):
		msg += "; global.<schema>.<table> is Probing's cluster-wide federation, which this server does not serve: query the node's own tables (drop \"global.\"), whose _rank column already tells the local ranks apart"
	case strings.Contains(msg, "no such table"):
		msg += "; " + absentHint(err.Error()) + s.tablesHint()
	}
	return &Error{Kind: "sql", Msg: msg}
}

// absentHint says why a documented table is not there, so "no such
// table" for a table describe_tables documents does not read as a typo.
func absentHint(sqliteMsg string) string {
	_, name, ok := strings.Cut(sqliteMsg, "no such table: ")
	if !ok {
		return ""
	}
	name = strings.TrimSpace(name)
	if i := strings.IndexAny(name, " \n"); i >= 0 {
		name = name[:i]
	}
	sch, tbl, ok := strings.Cut(name, ".")
	if !ok {
		return ""
	}
	t, ok := tabledocs.Lookup(sch, tbl)
	if !ok {
		return ""
	}
	if t.Storage == "virtual" {
		return fmt.Sprintf("%s.%s is documented but virtual: only a live agent computes it, so no query here can read it; ", t.Schema, t.Name)
	}
	return fmt.Sprintf("%s.%s is documented but has no rows on this node: no process here recorded it (describe_tables lists what is recorded); ", t.Schema, t.Name)
}

// tablesHint says which ring tables exist, so a wrong name is easy to fix.
func (s *session) tablesHint() string {
	if s.inv.Missing {
		return fmt.Sprintf("the data dir %s does not exist, so no ring tables exist (is PROBING_DATA_DIR the job's?)", s.inv.Base)
	}
	var names []string
	for _, src := range s.sources {
		names = append(names, src.schema+"."+src.table)
	}
	if len(names) == 0 {
		return fmt.Sprintf("the data dir %s has no ring tables yet", s.inv.Base)
	}
	const show = 12
	more := ""
	if len(names) > show {
		more = fmt.Sprintf(" and %d more", len(names)-show)
		names = names[:show]
	}
	return fmt.Sprintf("ring tables in %s: %s%s (documentation tables: probing.table_docs, probing.column_docs, probing.rings)", s.inv.Base, strings.Join(names, ", "), more)
}

// Tables lists the queryable tables of the data dir right now: schema,
// table, the processes that wrote it, and its columns.
func (e *Engine) Inventory() (*storage.Inventory, error) { return storage.Discover(e.opt.DataDir) }
