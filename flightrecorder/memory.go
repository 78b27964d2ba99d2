package flightrecorder

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/sysmem"
)

// The memory ceiling. A load and an analysis hold memory that follows the
// entries of every dump; a job larger than the machine would otherwise end
// in the kernel's OOM killer, with nothing said. Instead the process's
// memory is measured (the runtime's own accounting, garbage included)
// between files and groups and every few milliseconds, and the work stops
// with a MemoryCeilingError once it passes the ceiling.

// EnvMaxMemory sets Limits.MaxMemory.
const EnvMaxMemory = "PROBING_FR_MAX_MEMORY"

// DefaultMemoryShare is the part of the memory available to the process
// (RAM, or the cgroup's limit) that the default ceiling allows.
const DefaultMemoryShare = 0.75

// MemoryCeilingError stops a load or analysis that passed the ceiling.
type MemoryCeilingError struct {
	Ceiling int64  // bytes
	Used    int64  // what the process held when it stopped
	Phase   string // "decoding the dumps", "analysing" or "rendering the report"
	Source  string // where the ceiling came from: "default", "env" or "" (the caller)
}

func (e *MemoryCeilingError) Error() string {
	how := "as asked"
	switch e.Source {
	case "default":
		how = "the default: 3/4 of the memory this process may use"
	case "env":
		how = "set by " + EnvMaxMemory
	}
	return fmt.Sprintf("stopped %s: the process holds %s, over the memory ceiling of %s (%s); on a machine with more memory raise it (%s=%s, or --max-memory %s), or analyse fewer dumps at once",
		e.Phase, approxBytes(e.Used), approxBytes(e.Ceiling), how, EnvMaxMemory, suggestBytes(2*e.Ceiling), suggestBytes(2*e.Ceiling))
}

// approxBytes is n for reading: "14.5 MiB".
func approxBytes(n int64) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	v, unit := float64(n), "B"
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if v < 1024 {
			break
		}
		v, unit = v/1024, u
	}
	switch { // three digits, so that "over" reads as over
	case v < 10:
		return fmt.Sprintf("%.2f %s", v, unit)
	case v < 100:
		return fmt.Sprintf("%.1f %s", v, unit)
	}
	return fmt.Sprintf("%.0f %s", v, unit)
}

// suggestBytes is a value for PROBING_FR_MAX_MEMORY at least n: whole GiB,
// or MiB below one GiB.
func suggestBytes(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%dGiB", (n+1<<30-1)>>30)
	}
	return fmt.Sprintf("%dMiB", max(1, (n+1<<20-1)>>20))
}

// resolveMemory fills MaxMemory: the field, then PROBING_FR_MAX_MEMORY,
// then DefaultMemoryShare of the available memory (none when unknown).
func (l Limits) resolveMemory() (Limits, error) {
	if l.MaxMemory != 0 {
		return l, nil
	}
	n, err := envBytes(EnvMaxMemory, 0)
	if err != nil {
		return l, err
	}
	if n > 0 {
		l.MaxMemory, l.memorySource = n, "env"
		return l, nil
	}
	if avail := sysmem.Available(); avail > 0 {
		l.MaxMemory, l.memorySource = int64(float64(avail)*DefaultMemoryShare), "default"
	}
	return l, nil
}

// memGuard watches the process's memory against one ceiling.
type memGuard struct {
	lim     Limits
	phase   string
	mu      sync.Mutex
	samples []metrics.Sample
	tripped chan struct{} // closed past the ceiling
	end     func()        // closes the guarded context's Done
	err     *MemoryCeilingError
	once    sync.Once
	peak    int64 // the most memory a check saw (metrics), under mu
}

// memorySamples are what the runtime has mapped, minus what it gave back.
var memorySamples = []string{"/memory/classes/total:bytes", "/memory/classes/heap/released:bytes"}

func newMemorySamples() []metrics.Sample {
	s := make([]metrics.Sample, len(memorySamples))
	for i, name := range memorySamples {
		s[i].Name = name
	}
	return s
}

// processMemory is the memory the Go runtime holds from the OS, in bytes.
func processMemory(s []metrics.Sample) int64 {
	metrics.Read(s)
	return int64(s[0].Value.Uint64()) - int64(s[1].Value.Uint64())
}

// guardedCtx is the caller's context that also ends past the ceiling. It
// asks the caller's context first, so that whatever that one reports
// (tests count the calls) still holds.
type guardedCtx struct {
	context.Context
	g    *memGuard
	done chan struct{}
}

func (c *guardedCtx) Done() <-chan struct{} { return c.done }

func (c *guardedCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	select {
	case <-c.g.tripped:
		return c.g.err
	default:
		return nil
	}
}

// guardMemory returns a context that also ends, its Err a
// *MemoryCeilingError, once the process holds more than lim.MaxMemory (no
// guard when that is <= 0), and a stop function to call when the work is
// over. While it runs, the runtime's soft limit is kept below the ceiling,
// so that garbage is collected before it counts against it.
func guardMemory(ctx context.Context, lim Limits, phase string) (context.Context, *memGuard, func()) {
	if lim.MaxMemory <= 0 {
		return ctx, nil, func() {}
	}
	g := &memGuard{lim: lim, phase: phase, samples: newMemorySamples(), tripped: make(chan struct{})}
	gctx := &guardedCtx{Context: ctx, g: g, done: make(chan struct{})}
	// Done closes only once Err says why (the guard tripped, or the
	// caller's context ended): the context package panics on a parent
	// whose Done closed with a nil Err. The end of the work closes nothing.
	var closeOnce sync.Once
	g.end = func() { closeOnce.Do(func() { close(gctx.done) }) }
	restore := lowerSoftLimit(lim.MaxMemory - lim.MaxMemory/10)
	stopCh := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopCh:
				return
			case <-ctx.Done():
				g.end()
				return
			case <-g.tripped:
				return
			case <-t.C:
				g.check()
			}
		}
	}()
	return gctx, g, func() {
		close(stopCh)
		wg.Wait()
		restore()
	}
}

// check measures now, and ends the guarded context when over the ceiling.
// It reports false then. A nil guard always passes.
func (g *memGuard) check() bool {
	if g == nil {
		return true
	}
	select {
	case <-g.tripped:
		return false
	default:
	}
	g.mu.Lock()
	used := processMemory(g.samples)
	g.peak = max(g.peak, used)
	g.mu.Unlock()
	if used <= g.lim.MaxMemory {
		return true
	}
	g.once.Do(func() {
		g.err = &MemoryCeilingError{Ceiling: g.lim.MaxMemory, Used: used, Phase: g.phase, Source: g.lim.memorySource}
		close(g.tripped)
		if g.end != nil {
			g.end()
		}
	})
	return false
}

// ceilingErr is the guard's error when the guard stopped the work, and err
// otherwise.
func ceilingErr(g *memGuard, err error) error {
	if err == nil || g == nil {
		return err
	}
	select {
	case <-g.tripped:
		return g.err
	default:
		return err
	}
}

// The runtime's soft limit is process-wide: guards that overlap (two tool
// calls) share one lowered value, the lowest asked, and the last one out
// puts the original back.
var softLimit struct {
	mu       sync.Mutex
	users    int
	original int64
	asks     map[*int64]bool
}

func lowerSoftLimit(to int64) (restore func()) {
	softLimit.mu.Lock()
	defer softLimit.mu.Unlock()
	if softLimit.users == 0 {
		softLimit.original = debug.SetMemoryLimit(-1)
		softLimit.asks = map[*int64]bool{}
	}
	softLimit.users++
	ask := &to
	softLimit.asks[ask] = true
	applySoftLimit()
	return func() {
		softLimit.mu.Lock()
		defer softLimit.mu.Unlock()
		delete(softLimit.asks, ask)
		softLimit.users--
		if softLimit.users == 0 {
			debug.SetMemoryLimit(softLimit.original)
			return
		}
		applySoftLimit()
	}
}

func applySoftLimit() {
	limit := softLimit.original
	for a := range softLimit.asks {
		limit = min(limit, *a)
	}
	debug.SetMemoryLimit(limit)
}

// RenderGuarded runs render under lim's memory ceiling (zero fields:
// PROBING_FR_* or the defaults), as a load and an analysis run: render
// writes through a writer that measures on every write and fails past the
// ceiling, and the error is then the *MemoryCeilingError. A rendering is
// bounded (Report.Bounded, View.Text), so this is the last guard, not the
// first.
func RenderGuarded(ctx context.Context, lim Limits, w io.Writer, render func(io.Writer) error) error {
	lim, _ = lim.resolved()
	gctx, guard, stop := guardMemory(ctx, lim, "rendering the report")
	err := render(&guardedWriter{ctx: gctx, guard: guard, w: w})
	stop()
	return ceilingErr(guard, err)
}

// guardedWriter passes writes on while its context lasts and the guard
// holds.
type guardedWriter struct {
	ctx   context.Context
	guard *memGuard
	w     io.Writer
}

func (g *guardedWriter) Write(p []byte) (int, error) {
	g.guard.check()
	if err := g.ctx.Err(); err != nil {
		return 0, err
	}
	return g.w.Write(p)
}

// ProcessMemory is what the ceiling is checked against: the memory the Go
// runtime holds from the OS (heap, garbage not yet returned, stacks), in
// bytes.
func ProcessMemory() int64 { return processMemory(newMemorySamples()) }
