package sqlengine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// Limiter holds queries to the engine's per-query bounds: a query slot,
// a memory meter, and a deadline that interrupts SQLite and frees the
// slot. Every Engine has one; NewLimiter gives one to SQL that runs on
// connections the engine does not open (the coordinator's copy of every
// node's rows, cluster/fedsql), so that SQL is bounded by the same code.
type Limiter struct {
	opt   Options
	name  string // what is busy, in its errors
	slots chan struct{}

	peakMu sync.Mutex
	peak   int64
}

// NewLimiter returns a limiter with opt's MemoryLimit, MaxValueBytes and
// MaxConcurrent (zero values take the defaults; FromEnv reads the
// engine's variables). name says whose slots they are in a busy error
// ("the coordinator's SQL"). Its slots are its own: make one per pool,
// not one per query.
func NewLimiter(opt Options, name string) (*Limiter, error) {
	if installErr != nil {
		return nil, installErr
	}
	if err := opt.checkLimits(); err != nil {
		return nil, err
	}
	// The bounded functions and the deadline's interrupt reach a
	// connection through the auto extension (vtab.c).
	if err := register(); err != nil {
		return nil, err
	}
	l := &Limiter{opt: opt, name: name, slots: make(chan struct{}, opt.MaxConcurrent)}
	raiseBackstop(name, &opt)
	return l, nil
}

// Limits are the limiter's bounds, defaults applied.
func (l *Limiter) Limits() Options { return l.opt }

// InUse is how many of the limiter's query slots are taken now.
func (l *Limiter) InUse() int { return len(l.slots) }

// Peak is the most memory one query of this limiter held at once, as its
// meter counted it.
func (l *Limiter) Peak() int64 {
	l.peakMu.Lock()
	defer l.peakMu.Unlock()
	return l.peak
}

func (l *Limiter) notePeak(n int64) {
	l.peakMu.Lock()
	defer l.peakMu.Unlock()
	l.peak = max(l.peak, n)
}

// acquire takes a slot; a query waits for one within its own deadline.
func (l *Limiter) acquire(ctx context.Context) (release func(), err error) {
	release = func() { <-l.slots }
	select {
	case l.slots <- struct{}{}:
		return release, nil
	default:
	}
	select {
	case l.slots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, &Error{Kind: "canceled", Msg: "query canceled while it waited for one of the busy query slots"}
		}
		return nil, &Error{Kind: "busy", Msg: fmt.Sprintf("%s is busy: all %d query slots stayed taken for this query's whole time limit; "+
			"retry in a moment, make the running queries cheaper, or raise %s", l.name, l.opt.MaxConcurrent, EnvConcurrency)}
	}
}

// detachGrace is how long a caller whose deadline passed still waits for
// the interrupted query; SQLite normally returns within microseconds. A
// variable for tests.
var detachGrace = 2 * time.Second

// run runs fn in one of l's query slots, on a goroutine of its own, with
// every SQLite allocation of that goroutine metered and capped at the
// limiter's MemoryLimit (metered: fn must open, use and close its
// connection itself).
//
// The deadline interrupts SQLite and fails the query's further
// allocations, but SQLite checks for interrupts only at the end of VM
// loops: one row's straight-line code runs to its end (bounded by the
// value length and program size, see connLimits). So the caller does not
// wait for it: past its deadline (and detachGrace) it gets stopped()
// while the query finishes on its own, and the query's slot stays taken
// until then, so no more than MaxConcurrent queries ever work at once.
// A query that stops in time frees its slot before its caller returns.
func run[T any](ctx context.Context, l *Limiter, stopped func() error, fn func(m *meter) (T, error)) (T, error) {
	var zero T
	release, err := l.acquire(ctx)
	if err != nil {
		return zero, err
	}
	type outcome struct {
		v   T
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		var v T
		err := metered(ctx, l.opt.MemoryLimit, func(m *meter) error {
			defer func() { l.notePeak(m.peak()) }()
			var err error
			v, err = fn(m)
			return err
		})
		release()
		done <- outcome{v, err}
	}()
	select {
	case o := <-done:
		return o.v, o.err
	case <-ctx.Done():
	}
	t := time.NewTimer(detachGrace)
	defer t.Stop()
	select {
	case o := <-done:
		return o.v, o.err
	case <-t.C:
		return zero, stopped()
	}
}

// Conn is the connection Limiter.Run opened for one query, with the
// engine's per-statement bounds and bounded functions, its SQLite memory
// charged to the query's meter.
type Conn struct {
	*sqlite3.SQLiteConn
	l *Limiter
	m *meter
}

// Run opens a fresh in-memory SQLite connection and runs fn with it in
// one of the limiter's slots, under the engine's bounds: the longest
// value, SQL text, LIKE pattern and program; the engine's linear replace,
// instr, trim, like and glob; no sorter threads, temporary storage in
// memory; everything SQLite allocates for the connection charged to the
// query's memory cap. When ctx ends, the running statement is
// interrupted and the query's further allocations fail, so fn returns
// and the slot is free before Run returns (within detachGrace otherwise,
// see run). fn must use c on its own goroutine (others may call Charge
// and Uncharge) and not after it returns.
//
// Run's own errors are *Error: busy or canceled while waiting for a slot,
// timeout or canceled when fn did not return in time; fn's are returned
// as they are.
func (l *Limiter) Run(ctx context.Context, fn func(c *Conn) error) error {
	_, err := run(ctx, l, func() error { return l.stoppedError(ctx) }, func(m *meter) (struct{}, error) {
		driverOnce.Do(func() { drv = &sqlite3.SQLiteDriver{} })
		dc, err := drv.Open(":memory:")
		if err != nil {
			if m.exceeded() {
				return struct{}{}, l.engine().memoryError()
			}
			return struct{}{}, fmt.Errorf("sqlengine: opening SQLite: %w", err)
		}
		sc := dc.(*sqlite3.SQLiteConn)
		defer func() {
			m.unwatch() // before the connection it interrupts goes away
			sc.Close()
		}()
		if err := applyLimits(sc, &l.opt); err != nil {
			return struct{}{}, fmt.Errorf("sqlengine: bounding the connection: %w", err)
		}
		return struct{}{}, fn(&Conn{SQLiteConn: sc, l: l, m: m})
	})
	return err
}

func (l *Limiter) stoppedError(ctx context.Context) *Error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return &Error{Kind: "canceled", Msg: "query canceled"}
	}
	return &Error{Kind: "timeout", Msg: "query stopped at its time limit; narrow it (a WHERE on the timestamp column) or aggregate"}
}

// engine carries the limiter's bounds to the engine's error messages.
func (l *Limiter) engine() *Engine { return &Engine{opt: l.opt, lim: l} }

// Charge counts n bytes the query holds outside SQLite (decoded rows
// waiting to be copied in) against its memory cap, from any goroutine;
// false: over the cap, or the query's deadline passed.
func (c *Conn) Charge(n int64) bool { return c.m.charge(n) }

// Uncharge gives back bytes Charge counted.
func (c *Conn) Uncharge(n int64) { c.m.uncharge(n) }

// OverCap: the memory cap refused an allocation or a charge.
func (c *Conn) OverCap() bool { return c.m.exceeded() }

// MemoryError is the engine's error for a query past its memory cap,
// naming the cap, its variable and the fix.
func (c *Conn) MemoryError() *Error { return c.l.engine().memoryError() }

// LimitError maps an error of a statement on c that one of the bounds
// caused to the engine's error (memory, too_big with the fix); nil when
// err is not one of them.
func (c *Conn) LimitError(err error) *Error {
	return (&session{m: c.m}).limitError(c.l.engine(), err)
}
