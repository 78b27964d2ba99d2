package sqlengine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/probing-mcp/probing-mcp/internal/bytesize"
)

// Defaults of the per-query bounds (Options).
const (
	DefaultMemoryLimit   = 256 << 20
	DefaultMaxValueBytes = 4 << 20
	DefaultMaxConcurrent = 4
)

// The environment variables that set them (Options.FromEnv).
const (
	EnvMemory      = "PROBING_MCP_QUERY_MEMORY"
	EnvMaxValue    = "PROBING_MCP_QUERY_MAX_VALUE"
	EnvConcurrency = "PROBING_MCP_QUERY_CONCURRENCY"
)

// Fixed guards. Together with the value length they bound the work SQLite
// can do between two of its interrupt checks (see connLimits).
const (
	// MaxSQLBytes is the longest SQL text accepted.
	MaxSQLBytes = 256 << 10
	// maxLikePattern bounds a LIKE/GLOB pattern: matching costs the
	// pattern's length at every character of the value.
	maxLikePattern = 100
	// maxVDBEOps bounds the program one statement compiles to, hence the
	// straight-line operations of one row, which SQLite runs without
	// checking for interrupts. The biggest bundled skill query compiles
	// to about 400 instructions. SQLite grows the program by doubling
	// from 42 (1 KiB of 24-byte ops), so the limit is one of those sizes.
	maxVDBEOps = 42 << 8

	minMemoryLimit   = 4 << 20
	maxMemoryLimit   = 1 << 40
	minMaxValueBytes = 64 << 10
	maxMaxValueBytes = 1_000_000_000 // SQLite's own ceiling
	maxConcurrent    = 1024
)

// FromEnv sets the memory cap, value length limit and concurrency from
// PROBING_MCP_QUERY_MEMORY, PROBING_MCP_QUERY_MAX_VALUE and
// PROBING_MCP_QUERY_CONCURRENCY where they are set. A value it cannot use
// is an error naming the variable and what it accepts.
func (o *Options) FromEnv(getenv func(string) string) error {
	if v := strings.TrimSpace(getenv(EnvMemory)); v != "" {
		n, ok := bytesize.Parse(v)
		if !ok || n < minMemoryLimit || n > maxMemoryLimit {
			return fmt.Errorf("%s=%q: want a size from %s to %s, e.g. 256MiB or 1GiB", EnvMemory, v, bytesize.Format(minMemoryLimit), bytesize.Format(maxMemoryLimit))
		}
		o.MemoryLimit = n
	}
	if v := strings.TrimSpace(getenv(EnvMaxValue)); v != "" {
		n, ok := bytesize.Parse(v)
		if !ok || n < minMaxValueBytes || n > maxMaxValueBytes {
			return fmt.Errorf("%s=%q: want a size from %s to %d bytes, e.g. 16MiB", EnvMaxValue, v, bytesize.Format(minMaxValueBytes), maxMaxValueBytes)
		}
		o.MaxValueBytes = int(n)
	}
	if v := strings.TrimSpace(getenv(EnvConcurrency)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxConcurrent {
			return fmt.Errorf("%s=%q: want a whole number of queries from 1 to %d", EnvConcurrency, v, maxConcurrent)
		}
		o.MaxConcurrent = n
	}
	return nil
}

// checkLimits applies the defaults of the bounds and refuses values out
// of range.
func (o *Options) checkLimits() error {
	if o.MemoryLimit == 0 {
		o.MemoryLimit = DefaultMemoryLimit
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = DefaultMaxValueBytes
	}
	if o.MaxConcurrent == 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	switch {
	case o.MemoryLimit < minMemoryLimit || o.MemoryLimit > maxMemoryLimit:
		return fmt.Errorf("sqlengine: MemoryLimit %d: want %d to %d bytes", o.MemoryLimit, int64(minMemoryLimit), int64(maxMemoryLimit))
	case o.MaxValueBytes < minMaxValueBytes || o.MaxValueBytes > maxMaxValueBytes:
		return fmt.Errorf("sqlengine: MaxValueBytes %d: want %d to %d", o.MaxValueBytes, minMaxValueBytes, maxMaxValueBytes)
	case o.MaxConcurrent < 1 || o.MaxConcurrent > maxConcurrent:
		return fmt.Errorf("sqlengine: MaxConcurrent %d: want 1 to %d", o.MaxConcurrent, maxConcurrent)
	}
	return nil
}

// connLimits are set on every query connection. SQLite checks for an
// interrupt only at the end of VM loops, so the deadline cannot stop a
// single row's straight-line code: what one such stretch can do is bounded
// instead, by the longest value (every linear function is then short), the
// program size (how many calls one row makes) and the LIKE pattern; the
// functions that were worse than linear are replaced (boundfn.c).
func connLimits(opt *Options) [][2]int {
	return [][2]int{
		{sqlite3.SQLITE_LIMIT_LENGTH, opt.MaxValueBytes},
		{sqlite3.SQLITE_LIMIT_SQL_LENGTH, MaxSQLBytes},
		{sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, maxLikePattern},
		{sqlite3.SQLITE_LIMIT_VDBE_OP, maxVDBEOps},
		// Sorter threads would allocate outside the query's meter.
		{sqlite3.SQLITE_LIMIT_WORKER_THREADS, 0},
	}
}

// applyLimits bounds the connection and keeps its temporary storage
// (sorters, DISTINCT, GROUP BY, materialised views and CTEs) in memory,
// where the query's meter counts it, instead of temp files that nothing
// bounds.
func applyLimits(c *sqlite3.SQLiteConn, opt *Options) error {
	for _, l := range connLimits(opt) {
		c.SetLimit(l[0], l[1])
	}
	_, err := c.Exec("PRAGMA temp_store = MEMORY", nil)
	return err
}

var (
	backstopMu sync.Mutex
	backstop   = map[string]int64{} // limiter name → its largest pool
	backstopAt int64
)

// raiseBackstop sets SQLite's process-wide hard heap limit to what the
// concurrent queries of every kind of limiter (the engine's, the
// coordinator's) may hold at once, plus room for the rest of the process
// (storage/history), if that is more than it is now. Limiters of one name
// count once (tests make many engines; a server has one). The per-query
// meters are the bound; this only catches what they miss.
func raiseBackstop(name string, opt *Options) {
	backstopMu.Lock()
	defer backstopMu.Unlock()
	backstop[name] = max(backstop[name], int64(opt.MaxConcurrent)*opt.MemoryLimit)
	want := int64(512 << 20)
	for _, n := range backstop {
		want += n
	}
	if want > backstopAt {
		backstopAt = want
		setHardHeapLimit(want)
	}
}

func (e *Engine) memoryError() *Error {
	return &Error{Kind: "memory", Msg: fmt.Sprintf("query needs more than its %s memory cap (a guard that keeps one query from taking the server's memory): "+
		"aggregate in SQL (count, GROUP BY) instead of returning or sorting every row, add a WHERE on the timestamp column, "+
		"select fewer or narrower columns, or raise %s", bytesize.Format(e.opt.MemoryLimit), EnvMemory)}
}

func (e *Engine) valueTooBigError() *Error {
	return &Error{Kind: "too_big", Msg: fmt.Sprintf("a string or blob in this query would be longer than %s, the engine's value-length guard: "+
		"leave large columns out or take length(col), build smaller strings, or raise %s", bytesize.Format(int64(e.opt.MaxValueBytes)), EnvMaxValue)}
}

func sqlTooLongError(n int) *Error {
	return &Error{Kind: "too_big", Msg: fmt.Sprintf("the SQL text is %d bytes, over the %s limit; send a shorter query (long IN lists: filter with a range or a join)", n, bytesize.Format(MaxSQLBytes))}
}

// limitError maps the SQLite errors of the guards above; nil when err is
// not one of them.
func (s *session) limitError(e *Engine, err error) *Error {
	if s.m.exceeded() {
		return e.memoryError()
	}
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return nil
	}
	switch se.Code {
	case sqlite3.ErrTooBig:
		if msg := se.Error(); msg != "string or blob too big" && !strings.HasPrefix(msg, "string or blob too big") {
			return &Error{Kind: "too_big", Msg: msg} // a guard that names its own limit
		}
		return e.valueTooBigError()
	case sqlite3.ErrNomem:
		// Not this query's cap: SQLite reports a program past
		// SQLITE_LIMIT_VDBE_OP as out of memory, and the process-wide
		// backstop fails the same way.
		if used, limit := memoryUsedTotal(), hardHeapLimit(); limit > 0 && used+(64<<20) >= limit {
			return &Error{Kind: "memory", Msg: fmt.Sprintf("SQLite's memory for the whole process is at its %s backstop (the concurrent queries hold it); retry in a moment", bytesize.Format(limit))}
		}
		return &Error{Kind: "too_big", Msg: fmt.Sprintf("the statement compiles to more than %d SQLite VM instructions (a guard: SQLite cannot interrupt a long straight-line program); "+
			"split it into several queries or use fewer expressions and columns", maxVDBEOps)}
	}
	return nil
}
