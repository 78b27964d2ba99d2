package main

import (
	"runtime/debug"
	"time"

	fr "github.com/probing-mcp/probing-mcp/diag/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/sysmem"
)

// tuneGC trades memory for time. An analysis keeps nearly everything it
// decodes until it exits, so collecting early frees little: a one-shot
// analyze does not collect at all until it holds an eighth of the memory
// this process may use (gcPastThreshold), then collects as usual, so that
// a 16384-rank job's garbage does not pile up next to its entries (and
// push the dumps out of the page cache). The long-lived server collects at
// 5x the live heap instead of 2x.
func tuneGC(oneShot bool) {
	limit := int64(4 << 30)
	if total := sysmem.Available(); total > 0 {
		limit = max(1<<30, total/4)
	}
	debug.SetMemoryLimit(limit)
	if oneShot {
		debug.SetGCPercent(-1)
		gcOff = true
	} else {
		debug.SetGCPercent(400)
	}
}

// gcOff: tuneGC turned the collector off (GOGC and GOMEMLIMIT unset).
var gcOff bool

// gcPastThreshold turns the collector on (GOGC=100) once the process
// holds more than threshold bytes; stop ends the watch.
func gcPastThreshold(threshold int64) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if fr.ProcessMemory() > threshold {
					debug.SetGCPercent(100)
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// gcThreshold is where a one-shot analysis starts collecting: an eighth
// of the memory available, at least 2 GiB.
func gcThreshold() int64 { return max(2<<30, sysmem.Available()/8) }
