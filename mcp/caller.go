package mcp

import "context"

// callerKey is unexported so that only WithCaller can set the value: a tool
// handler must not be able to forge who called it.
type callerKey struct{}

// unknownCaller is what CallerFrom reports when no transport recorded a
// caller, e.g. in unit tests that call a handler directly.
const unknownCaller = "unknown"

// WithCaller records who is calling, for the audit log. The transport sets it
// once per request: the HTTP middleware uses strings such as
// "http:bearer@127.0.0.1:54321" or "http:anonymous@[::1]:4242".
func WithCaller(ctx context.Context, caller string) context.Context {
	return context.WithValue(ctx, callerKey{}, caller)
}

// CallerFrom returns the caller recorded by WithCaller, or "unknown".
func CallerFrom(ctx context.Context) string {
	if caller, ok := ctx.Value(callerKey{}).(string); ok && caller != "" {
		return caller
	}
	return unknownCaller
}
