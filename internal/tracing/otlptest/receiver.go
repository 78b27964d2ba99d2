// Package otlptest is a small OTLP trace receiver for tests, built on the
// official protobuf types: a real gRPC server implementing
// TraceServiceServer and an HTTP handler decoding ExportTraceServiceRequest
// (http/protobuf), each on its own loopback port. Only tests import it.
package otlptest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened for assertions.
type Span struct {
	TraceID, SpanID, ParentID string // hex; ParentID "" for a root
	Name                      string
	Kind                      tracepb.Span_SpanKind
	Attrs                     map[string]string // values as text
	Error                     bool              // status Error
	StatusMsg                 string
	Resource                  map[string]string
	Via                       string // "grpc" or "http"
}

// Receiver collects what both endpoints are sent.
type Receiver struct {
	GRPCEndpoint string // http://127.0.0.1:PORT, for OTEL_EXPORTER_OTLP_TRACES_ENDPOINT with grpc
	HTTPEndpoint string // http://127.0.0.1:PORT/v1/traces, for http/protobuf

	mu      sync.Mutex
	spans   []Span
	changed chan struct{}
	hold    chan struct{} // while open, every export waits (a stuck collector)
}

// Start serves both endpoints until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{changed: make(chan struct{})}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(gs, &grpcService{r: r})
	go gs.Serve(gl)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serveHTTP)
	hs := &http.Server{Handler: mux}
	go hs.Serve(hl)
	t.Cleanup(func() {
		r.Release()
		gs.Stop()
		hs.Close()
	})
	r.GRPCEndpoint = "http://" + gl.Addr().String()
	r.HTTPEndpoint = "http://" + hl.Addr().String() + "/v1/traces"
	return r
}

// Hold makes every export wait until Release (or the test's end): a
// collector that accepts connections and never answers.
func (r *Receiver) Hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hold == nil {
		r.hold = make(chan struct{})
	}
}

// Release lets held exports go on.
func (r *Receiver) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hold != nil {
		close(r.hold)
		r.hold = nil
	}
}

func (r *Receiver) wait(ctx context.Context) {
	r.mu.Lock()
	h := r.hold
	r.mu.Unlock()
	if h != nil {
		select {
		case <-h:
		case <-ctx.Done():
		}
	}
}

// Spans is what was received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// WaitFor waits until ok holds over the spans received, or ctx ends
// (then the error says what was received).
func (r *Receiver) WaitFor(ctx context.Context, ok func([]Span) bool) ([]Span, error) {
	for {
		r.mu.Lock()
		spans, ch := append([]Span(nil), r.spans...), r.changed
		r.mu.Unlock()
		if ok(spans) {
			return spans, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return spans, fmt.Errorf("%w: the receiver has %d span(s): %s", ctx.Err(), len(spans), Names(spans))
		}
	}
}

// Names lists spans' names, for failure messages.
func Names(spans []Span) string {
	var out []string
	for _, s := range spans {
		out = append(out, fmt.Sprintf("%q(%s parent %s via %s)", s.Name, short(s.SpanID), short(s.ParentID), s.Via))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func short(id string) string {
	if len(id) > 6 {
		return id[:6]
	}
	return id
}

func (r *Receiver) add(req *collectorpb.ExportTraceServiceRequest, via string) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, Span{
					TraceID:   hex.EncodeToString(s.GetTraceId()),
					SpanID:    hex.EncodeToString(s.GetSpanId()),
					ParentID:  hex.EncodeToString(s.GetParentSpanId()),
					Name:      s.GetName(),
					Kind:      s.GetKind(),
					Attrs:     attrs(s.GetAttributes()),
					Error:     s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					StatusMsg: s.GetStatus().GetMessage(),
					Resource:  res,
					Via:       via,
				})
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, got...)
	close(r.changed)
	r.changed = make(chan struct{})
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			out[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			out[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			out[kv.GetKey()] = v.String()
		}
	}
	return out
}

type grpcService struct {
	collectorpb.UnimplementedTraceServiceServer
	r *Receiver
}

func (g *grpcService) Export(ctx context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	g.r.wait(ctx)
	g.r.add(req, "grpc")
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// maxBody bounds one HTTP export (the exporter's batches are far smaller).
const maxBody = 32 << 20

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	r.wait(req.Context())
	var body io.Reader = http.MaxBytesReader(w, req.Body, maxBody)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = io.LimitReader(zr, maxBody)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf, got "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var ex collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &ex); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&ex, "http")
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// Env sets the OTEL_* variables for protocol ("grpc" or "http/protobuf")
// toward this receiver, for the test's duration, with a short batch
// delay so spans arrive soon.
func (r *Receiver) Env(t testing.TB, protocol string) {
	t.Helper()
	t.Setenv("OTEL_EXPORT_ENABLED", "true")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol)
	if protocol == "grpc" {
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", r.GRPCEndpoint)
	} else {
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", r.HTTPEndpoint)
	}
}

// Of is the spans of one trace.
func Of(spans []Span, traceID string) []Span {
	var out []Span
	for _, s := range spans {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Named is the first span called name, or nil.
func Named(spans []Span, name string) *Span {
	for i := range spans {
		if spans[i].Name == name {
			return &spans[i]
		}
	}
	return nil
}
