package flightrecorder

import (
	"time"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// observeLoad records one LoadContext (its deferred state): the bytes of
// dump files it read, its time, the memory high-water mark the guard saw
// (the memory at its end when no guard ran), and whether it failed.
func observeLoad(start time.Time, res **Loaded, g **memGuard, err *error) {
	var read int64
	if *res != nil {
		read = (*res).read
	}
	peak := ProcessMemory()
	if *g != nil {
		(*g).mu.Lock()
		peak = max(peak, (*g).peak)
		(*g).mu.Unlock()
	}
	metrics.FlightRecorderLoad(read, time.Since(start), peak, *err != nil)
}
