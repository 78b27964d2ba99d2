package mcp

import (
	"context"
	"testing"
)

func TestCallerFrom(t *testing.T) {
	ctx := context.Background()
	if got := CallerFrom(ctx); got != "unknown" {
		t.Errorf("CallerFrom(empty) = %q, want unknown", got)
	}
	if got := CallerFrom(WithCaller(ctx, "")); got != "unknown" {
		t.Errorf("CallerFrom(WithCaller(\"\")) = %q, want unknown", got)
	}
	const who = "http:bearer@127.0.0.1:54321"
	if got := CallerFrom(WithCaller(ctx, who)); got != who {
		t.Errorf("CallerFrom = %q, want %q", got, who)
	}
	// The innermost value wins, as with any context value.
	if got := CallerFrom(WithCaller(WithCaller(ctx, "a"), "b")); got != "b" {
		t.Errorf("CallerFrom(nested) = %q, want b", got)
	}
}
