package sqlengine

/*
#cgo CFLAGS: -O2 -std=gnu99
#include "memcap.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"sync"
)

// installErr says why per-query memory caps are unavailable (nil: they
// are in place). The allocator must be installed before SQLite
// initialises: package initialisation runs before any code can open a
// connection, and go-sqlite3's own init opens none.
var installErr error

func init() {
	if rc := C.memq_install(); rc != 0 {
		installErr = fmt.Errorf("sqlengine: cannot install the counting SQLite allocator (SQLite code %d): SQLite was initialised before this package, so queries could not be held to a memory cap", int(rc))
	}
}

// meter is one query's share of SQLite's memory.
type meter struct {
	o   *C.memq_owner
	cap int64

	mu        sync.Mutex
	done      bool
	stopWatch func() bool
}

// metered runs fn on one OS thread, locked for fn's whole run, with every
// SQLite allocation of that thread charged to a fresh meter of capBytes.
// fn must open, use and close its connection itself, and must not hand
// SQLite work to other goroutines: their allocations would not be
// counted. go-sqlite3 steps statements on the calling goroutine (its
// context watch only calls sqlite3_interrupt from elsewhere) and the
// virtual table's Go callbacks run on the thread that called SQLite.
func metered(ctx context.Context, capBytes int64, fn func(m *meter) error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := &meter{o: C.memq_new(C.longlong(capBytes)), cap: capBytes}
	if m.o == nil {
		return fmt.Errorf("sqlengine: out of memory starting a query")
	}
	C.memq_enter(m.o)
	defer func() {
		m.unwatch()
		C.memq_leave()
		C.memq_release(m.o)
	}()
	m.stopWatch = context.AfterFunc(ctx, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.done {
			C.memq_stop(m.o)
		}
	})
	return fn(m)
}

// unwatch ends the deadline watch; after it returns, memq_stop no longer
// touches the connection, which may then be closed.
func (m *meter) unwatch() {
	if m == nil {
		return
	}
	m.stopWatch()
	m.mu.Lock()
	m.done = true
	m.mu.Unlock()
}

// exceeded: the cap refused an allocation.
func (m *meter) exceeded() bool {
	return m != nil && C.memq_exceeded(m.o) != 0
}

// charge counts n bytes the query holds outside SQLite against its cap;
// false: the cap (or the deadline) refused them.
func (m *meter) charge(n int64) bool { return C.memq_charge(m.o, C.longlong(n)) != 0 }

func (m *meter) uncharge(n int64) { C.memq_uncharge(m.o, C.longlong(n)) }

// peak is the most memory the query held at once.
func (m *meter) peak() int64 {
	if m == nil {
		return 0
	}
	return int64(C.memq_peak(m.o))
}

// used is the memory the query holds now.
func (m *meter) used() int64 {
	if m == nil {
		return 0
	}
	return int64(C.memq_used(m.o))
}

func setHardHeapLimit(n int64) { C.memq_hard_limit(C.longlong(n)) }

func hardHeapLimit() int64 { return int64(C.memq_hard_limit(-1)) }

func memoryUsedTotal() int64 { return int64(C.memq_used_total()) }
