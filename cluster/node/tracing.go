package node

import (
	"net"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/probing-mcp/probing-mcp/internal/tracing"
)

// routes are the node API's paths, the only ones a span is named by (any
// other path is the caller's text).
var routes = map[string]bool{PathHealth: true, PathInfo: true, PathStacks: true, PathEvidence: true,
	PathFR: true, PathTables: true, PathScan: true, PathGPU: true}

// serveTraced serves one request that passed the daemon's checks (its
// signature, or the peer rule) as a SERVER span, the child of the
// coordinator's call when the request's traceparent header names it: a
// whole-job call is one trace across the nodes. The header is untrusted
// and read strictly (tracing.ExtractHTTP); it is read only after the
// request's signature held. The writer is not wrapped when it signs the
// answer: writeJSON hands that one the answer whole.
func serveTraced(h http.Handler, w http.ResponseWriter, r *http.Request) {
	if !tracing.Enabled() {
		h.ServeHTTP(w, r)
		return
	}
	route := r.URL.Path
	if !routes[route] {
		route = "other"
	}
	attrs := []attribute.KeyValue{attribute.String("http.request.method", r.Method), attribute.String("http.route", route)}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
		attrs = append(attrs, attribute.String("server.address", la.IP.String()), attribute.Int("server.port", la.Port))
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		attrs = append(attrs, attribute.String("client.address", host))
	}
	ctx := tracing.ExtractHTTP(r.Context(), r.Header)
	ctx, span := tracing.StartKind(ctx, r.Method+" "+route, trace.SpanKindServer, attrs...)
	defer span.End()
	r = r.WithContext(ctx)
	status := 0
	if sw, ok := w.(*signingWriter); ok {
		h.ServeHTTP(sw, r)
		status = sw.status
	} else {
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		status = rec.status
	}
	if status == 0 {
		status = http.StatusOK
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		tracing.Fail(span, strconv.Itoa(status), http.StatusText(status))
	}
}

// statusRecorder notes the status of an unsigned answer.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}
