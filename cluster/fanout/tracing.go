package fanout

import (
	"context"
	"errors"
	"net"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/jobtext"
	"github.com/probing-mcp/probing-mcp/internal/tracing"
)

// Do calls one node: method and path of the node API, req as the JSON
// body (nil for none), the answer decoded into resp. Traced, the call is
// a CLIENT span ("POST /v1/stacks") whose traceparent the request
// carries, so the daemon's handling is its child; a failure's error.type
// is the peer failure's kind (timeout, auth, ...).
func (c *Client) Do(ctx context.Context, n cluster.Node, method, path string, req, resp any) error {
	if !tracing.Enabled() {
		return c.do(ctx, n, method, path, req, resp)
	}
	attrs := []attribute.KeyValue{attribute.String("http.request.method", method), attribute.String("url.template", path),
		attribute.String("probing.node.host", jobtext.Clip(n.Host, jobtext.Name))}
	if h, p, err := net.SplitHostPort(n.Addr); err == nil {
		attrs = append(attrs, attribute.String("server.address", h))
		if port, err := strconv.Atoi(p); err == nil {
			attrs = append(attrs, attribute.Int("server.port", port))
		}
	}
	ctx, span := tracing.StartKind(ctx, method+" "+path, trace.SpanKindClient, attrs...)
	err := c.do(ctx, n, method, path, req, resp)
	var pe *evidence.PeerError
	if errors.As(err, &pe) {
		tracing.Fail(span, pe.Kind, pe.Msg)
	} else if err != nil {
		tracing.Fail(span, "_OTHER", err.Error())
	}
	span.End()
	return err
}
