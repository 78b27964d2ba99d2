package fedsql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/internal/bytesize"
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
	// Limiter holds the query to the engine's per-query bounds (memory
	// cap, value length, functions, query slots, deadline); nil: the
	// process's default one (NewLimiter with the engine's defaults).
	Limiter *sqlengine.Limiter
}

func (o *Options) defaults() error {
	if o.Concurrency <= 0 {
		o.Concurrency = 32
	}
	if o.MaxRowsPerNode <= 0 {
		o.MaxRowsPerNode = 20000
	}
	if o.MaxRows <= 0 {
		o.MaxRows = 500000
	}
	if o.Limiter == nil {
		defaultOnce.Do(func() { defaultLimiter, defaultErr = NewLimiter(sqlengine.Options{}) })
		o.Limiter = defaultLimiter
		return defaultErr
	}
	return nil
}

var (
	defaultOnce    sync.Once
	defaultLimiter *sqlengine.Limiter
	defaultErr     error
)

// NewLimiter is a pool of the coordinator's query slots with opt's memory
// cap, value length and concurrency (sqlengine.Options.FromEnv reads the
// engine's variables). Make one per process: the slots are its own.
func NewLimiter(opt sqlengine.Options) (*sqlengine.Limiter, error) {
	return sqlengine.NewLimiter(opt, "the coordinator's SQL (cluster_query)")
}

// tagCols are overridden with the node's own name on the coordinator.
var nodeTagCols = map[string]bool{"_host": true, "_addr": true, "_node_rank": true}

// query is one federated query under way.
type query struct {
	ctx   context.Context
	start time.Time
	nodes []Node
	sql   string
	limit int
	opt   Options
	c     *sqlengine.Conn
	phase atomic.Value // string: what the query was doing, for its timeout

	mu     sync.Mutex
	failed map[string]string // node ID → why it is left out
	notes  []string
}

// Query runs one read-only statement over the union of every node's ring
// tables. Each table the statement names is copied from every node (with
// the plainest WHERE filters pushed down to the nodes, and node tag
// filters pruning nodes), into a private in-memory SQLite, where the
// statement runs whole under the engine's read-only guard: aggregates,
// joins and ORDER BY are exact over what was copied, and every gap (a
// node that did not answer, a cap reached) is said in data_quality.
//
// The whole query runs in one of opt.Limiter's slots, under the engine's
// bounds: the copy and the statement's working memory are charged to one
// memory cap, values and functions are the engine's, and the deadline
// interrupts SQLite (copy or statement) and frees the slot.
func Query(ctx context.Context, nodes []Node, sqlText string, limit int, opt Options) (*sqlengine.Result, error) {
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	if err := sqlengine.CheckReadOnly(sqlText); err != nil {
		return nil, err
	}
	sqlText = unGlobal(sqlText)
	q := &query{ctx: ctx, start: time.Now(), nodes: nodes, sql: sqlText, limit: sqlengine.ClampLimit(limit), opt: opt, failed: map[string]string{}}
	q.phase.Store("while it waited for the nodes")
	var res *sqlengine.Result
	err := opt.Limiter.Run(ctx, func(c *sqlengine.Conn) error {
		q.c = c
		r, err := q.run()
		res = r
		return err
	})
	if err != nil {
		return nil, q.stopped(err)
	}
	return res, nil
}

// maxFailedListed bounds the nodes data_quality lists as failed.
const maxFailedListed = 50

func (q *query) run() (*sqlengine.Result, error) {
	parts, down, err := q.copyRows()
	if err != nil {
		return nil, err
	}
	answered := len(q.nodes) - len(q.failed)
	var missing []string
	for id, why := range q.failed {
		missing = append(missing, jobtext.Token(id, jobtext.Name)+": "+why)
	}
	sort.Strings(missing)
	if q.opt.Strict && len(q.failed) > 0 {
		return nil, &sqlengine.Error{Kind: "partial", Msg: fmt.Sprintf("partial answer refused (%s=1): %d/%d nodes answered; %s", cluster.EnvStrict, answered, len(q.nodes), strings.Join(missing, "; "))}
	}
	q.phase.Store("while the nodes' rows were loaded")
	if err := q.load(parts); err != nil {
		return nil, err
	}
	q.phase.Store("while the statement ran")
	res, err := q.statement()
	if err != nil {
		return nil, err
	}
	qu := &sqlengine.Quality{Notes: []string{fmt.Sprintf("%d/%d node(s) answered", answered, len(q.nodes))}}
	if down > 0 {
		qu.Notes = append(qu.Notes, fmt.Sprintf("%d filter(s) applied on the nodes", down))
	}
	for i, m := range missing {
		if i == 20 {
			qu.Notes = append(qu.Notes, fmt.Sprintf("… and %d more nodes did not answer", len(missing)-i))
			break
		}
		qu.Notes = append(qu.Notes, "did not answer: "+m)
	}
	qu.Notes = append(qu.Notes, q.notes...)
	qu.NodesAsked = len(q.nodes)
	for id := range q.failed {
		qu.NodesFailed = append(qu.NodesFailed, jobtext.Token(id, jobtext.Name))
	}
	sort.Strings(qu.NodesFailed)
	if n := len(qu.NodesFailed); n > maxFailedListed {
		qu.NodesFailed = append(qu.NodesFailed[:maxFailedListed], fmt.Sprintf("… and %d more", n-maxFailedListed))
	}
	qu.Partial = len(q.failed) > 0 || len(q.notes) > 0
	res.DataQuality = qu
	return res, nil
}

// statement runs the query over the loaded copy. Kept rows are Go memory
// of the query too, so they are charged to its cap (1,000 rows of 4 MiB
// values would be 4 GB).
func (q *query) statement() (*sqlengine.Result, error) {
	g := &sqlengine.Guard{}
	g.Install(q.c.SQLiteConn)
	rows, err := q.c.QueryContext(q.ctx, q.sql, nil)
	if err != nil {
		if gerr := g.Err(); gerr != nil && q.ctx.Err() == nil {
			return nil, gerr
		}
		return nil, q.sqlError(err)
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
			return nil, q.sqlError(err)
		}
		res.TotalRows++
		if len(res.Rows) < q.limit {
			row := make([]any, len(vals))
			size := int64(24 + 16*len(vals))
			for i, v := range vals {
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				if s, ok := v.(string); ok {
					size += int64(len(s))
				}
				row[i] = v
			}
			if !q.c.Charge(size) {
				if q.ctx.Err() != nil {
					return nil, q.ctx.Err()
				}
				return nil, q.c.MemoryError()
			}
			res.Rows = append(res.Rows, jsonrow.New(res.Columns, row))
		}
	}
	res.RowCount = len(res.Rows)
	res.Truncated = res.TotalRows > res.RowCount
	return res, nil
}

// sqlError says what stopped a statement on the copy: the deadline, one
// of the engine's bounds, or SQLite.
func (q *query) sqlError(err error) error {
	if q.ctx.Err() != nil {
		return q.ctx.Err()
	}
	if le := q.c.LimitError(err); le != nil {
		return le
	}
	return &sqlengine.Error{Kind: "sql", Msg: err.Error()}
}

// copyMemoryError: the copy of the nodes' rows alone is over the cap.
// Only WHERE filters on plain columns reach the nodes, so that is the fix
// (every column of a named table is copied, and LIMIT applies after).
func (q *query) copyMemoryError() *sqlengine.Error {
	return &sqlengine.Error{Kind: "memory", Msg: fmt.Sprintf("the rows copied from the nodes for this query need more than its %s memory cap (a guard that keeps one query from taking the coordinator's memory): "+
		"add a WHERE on timestamp, _rank or _host with plain comparisons joined by AND (those filters run on the nodes, so fewer rows are copied), name fewer tables, or raise %s",
		bytesize.Format(q.opt.Limiter.Limits().MemoryLimit), sqlengine.EnvMemory)}
}

// stopped turns the error of a query whose context ended into the
// coordinator's timeout, saying what the query was doing; other errors
// (busy, a bound, SQL) are returned as they are.
func (q *query) stopped(err error) error {
	var se *sqlengine.Error
	if q.ctx.Err() == nil || errors.As(err, &se) && se.Kind == "busy" {
		return err
	}
	if errors.Is(q.ctx.Err(), context.Canceled) {
		return &sqlengine.Error{Kind: "canceled", Msg: "cluster query canceled"}
	}
	limit := ""
	if dl, ok := q.ctx.Deadline(); ok {
		limit = " of " + dl.Sub(q.start).Round(100*time.Millisecond).String()
	}
	return &sqlengine.Error{Kind: "timeout", Msg: fmt.Sprintf("the cluster query stopped at its time limit%s %s; narrow it with a WHERE on timestamp, _rank or _host "+
		"(plain comparisons joined by AND run on the nodes, so fewer rows are copied), aggregate, or raise %s", limit, q.phase.Load(), cluster.EnvDeadline)}
}

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
