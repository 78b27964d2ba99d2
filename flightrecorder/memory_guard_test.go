package flightrecorder

import (
	"context"
	"errors"
	"io"
	"strings"
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

// TestRenderGuarded: a rendering runs under the ceiling too. It ran
// outside it: an analysis held under --max-memory 1GiB and its 134 MB text
// then took the process to 1.8 GB.
func TestRenderGuarded(t *testing.T) {
	var b strings.Builder
	err := RenderGuarded(context.Background(), Limits{MaxMemory: 1}, &b, func(w io.Writer) error {
		_, err := io.WriteString(w, "verdict")
		return err
	})
	var ce *MemoryCeilingError
	if !errors.As(err, &ce) || ce.Phase != "rendering the report" || b.Len() != 0 {
		t.Fatalf("a 1-byte ceiling: %v, wrote %q", err, b.String())
	}
	if !strings.Contains(err.Error(), "stopped rendering the report: the process holds") {
		t.Errorf("message: %v", err)
	}
	if err := RenderGuarded(context.Background(), Limits{MaxMemory: 1 << 50}, &b, func(w io.Writer) error {
		_, err := io.WriteString(w, "verdict")
		return err
	}); err != nil || b.String() != "verdict" {
		t.Fatalf("under the ceiling: %v, wrote %q", err, b.String())
	}
}
