package flightrecorder

import (
	"context"
	"errors"
	"testing"
)

// TestGuardDoneOnlyWithErr: the guarded context's Done closes only when
// Err says why. It closed at the end of the work with a nil Err, and the
// context package panicked in a child (the byte budget's AfterFunc) that
// saw it.
func TestGuardDoneOnlyWithErr(t *testing.T) {
	ctx, _, stop := guardMemory(context.Background(), Limits{MaxMemory: 1 << 50}, "testing")
	stopAfter := context.AfterFunc(ctx, func() {})
	stop()
	select {
	case <-ctx.Done():
		if ctx.Err() == nil {
			t.Fatal("Done closed with a nil Err at the end of the work")
		}
	default:
	}
	stopAfter()

	ctx, g, stop := guardMemory(context.Background(), Limits{MaxMemory: 1}, "testing")
	defer stop()
	if g.check() {
		t.Fatal("a 1-byte ceiling passed")
	}
	<-ctx.Done()
	var ce *MemoryCeilingError
	if !errors.As(ctx.Err(), &ce) {
		t.Fatalf("tripped: Err %v", ctx.Err())
	}

	parent, cancel := context.WithCancel(context.Background())
	ctx, _, stop = guardMemory(parent, Limits{MaxMemory: 1 << 50}, "testing")
	defer stop()
	cancel()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("the caller's context ended: Err %v", ctx.Err())
	}
}
