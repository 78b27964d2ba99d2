package flightrecorder_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	fr "github.com/probing-mcp/probing-mcp/flightrecorder"
	"github.com/probing-mcp/probing-mcp/flightrecorder/frsynth"
)

// countdownCtx reports Canceled from its n-th Err call on. It proves that
// work polls its context inside its loops, without a clock: a run given
// fewer calls than it makes must stop with Canceled.
type countdownCtx struct {
	context.Context
	left  atomic.Int64
	calls atomic.Int64
}

func countdown(n int64) *countdownCtx {
	c := &countdownCtx{Context: context.Background()}
	c.left.Store(n)
	return c
}

func (c *countdownCtx) Err() error {
	c.calls.Add(1)
	if c.left.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// waitGoroutines waits (up to a minute) for the goroutine count to fall
// back to n: what a stopped run started must end.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still running, %d before the run", runtime.NumGoroutine(), n)
		}
		runtime.Gosched()
	}
}

// TestContextStopsLoadAndAnalysis: a request that ends (an HTTP 504, a
// client that gave up) stops Load, Analyze and Parity where they are;
// the old code had no context and ran on after the deadline.
func TestContextStopsLoadAndAnalysis(t *testing.T) {
	dir := t.TempDir()
	spec := frsynth.Spec{Ranks: 16, Entries: 3000, TP: 4, Fault: frsynth.Fault{Kind: "missing", Rank: 3, Seq: 2500}}
	if err := frsynth.Write(dir, spec); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()

	// Unbounded: count the checks a full run makes.
	full := countdown(1 << 40)
	l, err := fr.LoadContext(full, []string{dir}, fr.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	loadChecks := full.calls.Load()
	full = countdown(1 << 40)
	if _, err := fr.AnalyzeLoadedContext(full, l, fr.Options{}); err != nil {
		t.Fatal(err)
	}
	analyzeChecks := full.calls.Load()
	full = countdown(1 << 40)
	if _, err := fr.ParityContext(full, l.Dumps, fr.ParityOptions{AllowIncompleteRanks: true}); err != nil {
		t.Fatal(err)
	}
	parityChecks := full.calls.Load()
	t.Logf("checks: load %d, analysis %d, parity %d", loadChecks, analyzeChecks, parityChecks)
	if loadChecks < 20 || analyzeChecks < 20 || parityChecks < 20 {
		t.Fatalf("too few context checks to stop a run midway: load %d, analysis %d, parity %d", loadChecks, analyzeChecks, parityChecks)
	}

	// Stopped halfway: each returns Canceled and starts nothing more.
	if got, err := fr.LoadContext(countdown(loadChecks/2), []string{dir}, fr.LoadOptions{}); !errors.Is(err, context.Canceled) || got != nil {
		t.Errorf("load stopped halfway: %v, %v", got, err)
	}
	if got, err := fr.AnalyzeLoadedContext(countdown(analyzeChecks/2), l, fr.Options{}); !errors.Is(err, context.Canceled) || got != nil {
		t.Errorf("analysis stopped halfway: %v, %v", got, err)
	}
	// Parity runs on one goroutine: it stops at the first check after the
	// context ends.
	ctx := countdown(parityChecks / 2)
	if got, err := fr.ParityContext(ctx, l.Dumps, fr.ParityOptions{AllowIncompleteRanks: true}); !errors.Is(err, context.Canceled) || got != nil {
		t.Errorf("parity stopped halfway: %v, %v", got, err)
	}
	if n := ctx.calls.Load(); n != parityChecks/2+1 {
		t.Errorf("parity made %d checks, want %d: it went on after its context ended", n, parityChecks/2+1)
	}
	waitGoroutines(t, before)

	// A context already done does no work at all.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := fr.LoadContext(done, []string{dir}, fr.LoadOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("load with a done context: %v", err)
	}
	if _, err := fr.DecodeContext(done, frsynth.Dump(spec, 0), fr.Limits{}); !errors.Is(err, context.Canceled) {
		t.Errorf("decode with a done context: %v", err)
	}
}
