package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster/fedsql"
	"github.com/probing-mcp/probing-mcp/internal/hmacauth"
	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// Source is what a daemon serves: one node's evidence. Local is the real
// one; scale tests serve synthetic nodes through the same daemon.
type Source interface {
	Info(ctx context.Context) (*Info, error)
	Stacks(ctx context.Context, req StacksRequest) (*StacksReply, error)
	Evidence(ctx context.Context, req EvidenceRequest) (*EvidenceReply, error)
	FlightRecorder(ctx context.Context, req FRRequest) (*FRReply, error)
	Tables(ctx context.Context) ([]fedsql.Table, error)
	Scan(ctx context.Context, req fedsql.ScanRequest) (*fedsql.ScanReply, error)
	GPU(ctx context.Context, req GPURequest) (*GPUReply, error)
}

// Config shapes a daemon's handler.
type Config struct {
	Source Source
	// Token is PROBING_AUTH_TOKEN; "" allows loopback binds only (the
	// command refuses another), and only clients of the daemon's own uid
	// and root are then served (peer.go). With a token every request but
	// /health must be signed with it (internal/hmacauth), and every answer
	// to a signed request is signed: the token itself never travels.
	Token string
	// Advertise are the addresses the daemon registered (PROBING_ADVERTISE_ADDR):
	// a signed request names the address it was sent to, which must be
	// one of these or the connection's own end.
	Advertise []string
	Version   string
	// MaxTime bounds one request (default 60 s); a caller's TimeoutHeader
	// shortens it.
	MaxTime time.Duration
	Logger  *slog.Logger
	// Extra routes (the heartbeat registry's PUT /apis/nodes).
	Extra map[string]http.Handler
	// Paths are the health and liveness paths served beside /health
	// (PROBING_SYSTEM_HEALTH_PATH, _LIVE_PATH), under /health's rules, as
	// is /metrics (metrics.go).
	Paths metrics.Paths
}

// maxRequest bounds a request body: requests are small selections.
const maxRequest = 1 << 20

// margin is kept of the caller's time for the answer's way back.
func margin(d time.Duration) time.Duration {
	return min(d/10+20*time.Millisecond, time.Second)
}

// Handler serves the node API.
func Handler(cfg Config) http.Handler {
	if cfg.MaxTime <= 0 {
		cfg.MaxTime = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var verifier *hmacauth.Verifier
	if key := hmacauth.NewKey(cfg.Token); key != nil {
		verifier = hmacauth.NewVerifier(key, nil)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathHealth, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": cfg.Version})
	})
	public := systemRoutes(mux, cfg) // metrics.go
	mux.Handle("GET "+PathInfo, call(cfg, func(ctx context.Context, _ *struct{}) (any, error) { return cfg.Source.Info(ctx) }))
	mux.Handle("POST "+PathStacks, call(cfg, func(ctx context.Context, q *StacksRequest) (any, error) { return cfg.Source.Stacks(ctx, *q) }))
	mux.Handle("POST "+PathEvidence, call(cfg, func(ctx context.Context, q *EvidenceRequest) (any, error) { return cfg.Source.Evidence(ctx, *q) }))
	mux.Handle("POST "+PathFR, call(cfg, func(ctx context.Context, q *FRRequest) (any, error) { return cfg.Source.FlightRecorder(ctx, *q) }))
	mux.Handle("POST "+PathTables, call(cfg, func(ctx context.Context, _ *struct{}) (any, error) { return cfg.Source.Tables(ctx) }))
	mux.Handle("POST "+PathScan, call(cfg, func(ctx context.Context, q *fedsql.ScanRequest) (any, error) { return cfg.Source.Scan(ctx, *q) }))
	mux.Handle("POST "+PathGPU, call(cfg, func(ctx context.Context, q *GPURequest) (any, error) { return cfg.Source.GPU(ctx, *q) }))
	for p, h := range cfg.Extra {
		mux.Handle(p, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no route for "+r.Method+" "+r.URL.Path+" (the node API: GET /v1/node, POST /v1/stacks, /v1/evidence, /v1/flight_recorder, /v1/tables, /v1/scan, /v1/gpu)")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if verifier != nil && (!public[r.URL.Path] || hmacauth.IsSigned(r.Header.Get("Authorization"))) {
			sw, status, why := verify(verifier, cfg.Advertise, w, r)
			if sw == nil {
				cfg.Logger.Warn("node API request refused", "remote", r.RemoteAddr, "path", r.URL.Path, "why", why)
				writeError(w, status, why)
				return
			}
			defer sw.finish()
			w = sw
		}
		if verifier == nil {
			if ok, why := peerAllowed(r); !ok {
				cfg.Logger.Warn("node API request refused: another user's client on loopback", "remote", r.RemoteAddr, "path", r.URL.Path, "why", why)
				writeError(w, http.StatusForbidden, why)
				return
			}
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxRequest)
		serveTraced(mux, w, r)
	})
}

// verify checks a signed request (reading its body, which the signature
// covers) and returns the writer that signs the answer; nil with the
// status and reason when the request is refused.
func verify(v *hmacauth.Verifier, advertise []string, w http.ResponseWriter, r *http.Request) (*signingWriter, int, string) {
	authz := r.Header.Get("Authorization")
	if !hmacauth.IsSigned(authz) {
		return nil, http.StatusUnauthorized, "this node daemon takes only requests signed with the job's token (" + hmacauth.Scheme + "; a bearer token is never accepted, so it is never sent): the coordinator must be probing-mcp of this version, run with the same PROBING_AUTH_TOKEN"
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequest))
	if err != nil {
		return nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body: %v (at most %d bytes)", err, maxRequest)
	}
	la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	nonce, err := v.Verify(r.Method, r.URL.RequestURI(), authz, body, hmacauth.ServedAt(la, advertise...))
	if err != nil {
		var he *hmacauth.Error
		if errors.As(err, &he) {
			return nil, he.Status, he.Msg
		}
		return nil, http.StatusUnauthorized, err.Error()
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return &signingWriter{ResponseWriter: w, key: v.Key(), nonce: nonce}, 0, ""
}

// signingWriter signs the answer to a signed request: writeJSON hands it
// the encoded answer whole; anything else written (the extra routes) is
// buffered and signed when the handler returns.
type signingWriter struct {
	http.ResponseWriter
	key    *hmacauth.Key
	nonce  string
	status int
	buf    bytes.Buffer
	done   bool
}

func (s *signingWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
}

func (s *signingWriter) Write(b []byte) (int, error) {
	if s.done {
		return 0, errors.New("the answer was already written")
	}
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.buf.Write(b)
}

// writeSigned writes a whole answer at once, signed.
func (s *signingWriter) writeSigned(status int, b []byte) {
	if s.done {
		return
	}
	s.done, s.status = true, status
	s.Header().Set(hmacauth.ResponseHeader, s.key.SignResponse(s.nonce, status, b))
	s.ResponseWriter.WriteHeader(status)
	s.ResponseWriter.Write(b)
}

func (s *signingWriter) finish() {
	if !s.done {
		if s.status == 0 {
			s.status = http.StatusOK
		}
		s.writeSigned(s.status, s.buf.Bytes())
	}
}

// call decodes the request, bounds the handler by the caller's time left
// and encodes the answer.
func call[Q any](cfg Config, fn func(context.Context, *Q) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var q Q
		if r.Method == http.MethodPost {
			dec := json.NewDecoder(r.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&q); err != nil && !errors.Is(err, io.EOF) {
				writeError(w, http.StatusBadRequest, "request body: "+err.Error())
				return
			}
		}
		d := cfg.MaxTime
		if v := r.Header.Get(TimeoutHeader); v != "" {
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms <= 0 {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("%s %q: want a positive number of milliseconds", TimeoutHeader, v))
				return
			}
			if t := time.Duration(ms) * time.Millisecond; t < d {
				d = t
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), d-margin(d))
		defer cancel()
		res, err := fn(ctx, &q)
		if err != nil && ctx.Err() != nil {
			writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("this node could not answer within the caller's %s", d))
			return
		}
		if err != nil {
			writeError(w, http.StatusUnprocessableEntity, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
}

type apiError struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"the answer does not encode"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	if sw, ok := w.(*signingWriter); ok {
		sw.writeSigned(status, b)
		return
	}
	w.WriteHeader(status)
	w.Write(b)
}
