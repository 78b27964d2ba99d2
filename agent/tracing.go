package agent

import (
	"context"
	"errors"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/probing-mcp/probing-mcp/internal/tracing"
)

// Do sends one request to the agent and returns the reply body of a 2xx
// answer; any other status becomes an *Error carrying the agent's
// message. Traced, each call is a CLIENT span ("agent GET /apis/stacks")
// with the rank's pid, and a failure's error.type is the Error's kind
// (timeout, refused, dead, ...).
func (c *Client) Do(ctx context.Context, method, path string, body []byte, contentType string) ([]byte, error) {
	if !tracing.Enabled() {
		return c.do(ctx, method, path, body, contentType)
	}
	ctx, span := tracing.StartKind(ctx, "agent "+method+" "+agentRoute(path), trace.SpanKindClient,
		attribute.String("http.request.method", method), attribute.Int("process.pid", c.PID))
	b, err := c.do(ctx, method, path, body, contentType)
	var ae *Error
	if errors.As(err, &ae) {
		tracing.Fail(span, ae.Kind, ae.Msg)
	} else if err != nil {
		tracing.Fail(span, "_OTHER", err.Error())
	}
	span.End()
	return b, err
}

// agentRoute is path less its query, a config key replaced by {key}: a
// span's name stays one of a few.
func agentRoute(path string) string {
	path, _, _ = strings.Cut(path, "?")
	if strings.HasPrefix(path, "/config/") && path != "/config/_keys" {
		return "/config/{key}"
	}
	return path
}
