package main

import (
	"runtime/debug"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/internal/sysmem"
)

// tuneGC trades memory for time. An analysis keeps nearly everything it
// decodes until it exits, so collecting early frees little: a one-shot
// analyze does not collect at all until it holds an eighth of the memory
// this process may use (collectPast), then collects as usual, so that a
// 16384-rank job's garbage does not pile up next to its entries (and push
// the dumps out of the page cache); its soft limit is the one the memory
// ceiling sets while the dumps are loaded and analysed. The long-lived
// server collects at 5x the live heap instead of 2x, with a soft limit of
// a quarter of memory.
func tuneGC(oneShot bool) {
	if oneShot {
		debug.SetGCPercent(-1)
		gcOff = true
		return
	}
	limit := int64(4 << 30)
	if total := sysmem.Available(); total > 0 {
		limit = max(1<<30, total/4)
	}
	debug.SetMemoryLimit(limit)
	debug.SetGCPercent(400)
}

// gcOff: tuneGC turned the collector off (GOGC and GOMEMLIMIT unset).
var gcOff bool

// collectPast turns the collector on (GOGC=100) the first time check sees
// the process holding more than threshold bytes: an eighth of the memory
// available, at least 2 GiB. analyze checks with every progress report
// (each file decoded, each group analysed).
type collectPast struct {
	threshold int64
	on        bool
}

func newCollectPast() *collectPast {
	return &collectPast{threshold: max(2<<30, sysmem.Available()/8)}
}

func (c *collectPast) check() {
	if !c.on && fr.ProcessMemory() > c.threshold {
		debug.SetGCPercent(100)
		c.on = true
	}
}
