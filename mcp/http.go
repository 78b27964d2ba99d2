package mcp

// The HTTP transport: MCP Streamable HTTP at <base>/mcp plus /health and
// /live, behind the same middleware as the Probing agent's HTTP API
// (probing-contract.md §2.1-2.3), so clients and proxies written for Probing
// see the same auth, limits and error envelope here.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// ServeHTTP serves s over Streamable HTTP on cfg.Addr until ctx is cancelled,
// then shuts down gracefully and returns nil.
func ServeHTTP(ctx context.Context, s *server.MCPServer, cfg HTTPConfig, logger *slog.Logger) error {
	// Check before binding, so a refused configuration never opens a port.
	if _, err := cfg.resolve(); err != nil {
		return err
	}
	if err := CheckListenAddr(cfg.Addr, cfg.AuthToken); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	return ServeHTTPListener(ctx, ln, s, cfg, logger)
}

// ServeHTTPListener is ServeHTTP on a listener the caller opened, e.g. on
// port 0 to learn the bound address from ln.Addr(). It takes ownership of ln
// and ignores cfg.Addr.
func ServeHTTPListener(ctx context.Context, ln net.Listener, s *server.MCPServer, cfg HTTPConfig, logger *slog.Logger) error {
	defer CloseCallRecords(s)
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := cfg.resolve()
	if err == nil {
		err = CheckListenAddr(ln.Addr().String(), cfg.AuthToken)
	}
	if err != nil {
		_ = ln.Close()
		return err
	}
	addr := ln.Addr().String()

	mcpHandler := server.NewStreamableHTTPServer(s,
		// No Mcp-Session-Id: any request can go to any instance, and nothing
		// leaks when clients vanish.
		server.WithStateLess(true),
		// GET would open a standalone SSE stream for server-initiated
		// messages, which our tools never send; it would only sit on an
		// in-flight slot until the deadline cut it. Clients get 405, which
		// the spec allows. POST responses can still stream (progress).
		server.WithDisableStreaming(true),
		// mcp-go's own DNS-rebinding check rejects any loopback connection
		// whose Host is not localhost. That breaks a token-protected server
		// reached by its hostname when the hostname resolves to 127.0.1.1
		// (Debian's /etc/hosts), or behind a same-host reverse proxy. The
		// Host guard in NewHTTPHandler covers the case that needs it: no
		// token.
		server.WithDisableLocalhostProtection(true),
		server.WithStreamableHTTPLogger(logger),
	)
	cfg.Extra = pictureRoutes(s, cfg.Extra) // mcp/pictures.go: the diagnoses' pages, read only
	srv := &http.Server{
		Handler:           NewHTTPHandler(mcpHandler, cfg, logger),
		ReadHeaderTimeout: min(10*time.Second, cfg.Timeout),
		// No ReadTimeout: when it expires net/http cancels the request
		// context, racing the deadline middleware's 504. That middleware
		// bounds body reads itself.
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}

	logger.Info("MCP HTTP server listening",
		"addr", addr, "url", "http://"+addr+cfg.BasePath+"/mcp", "auth", cfg.AuthToken != "")

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve HTTP on %s: %w", addr, err)
	case <-ctx.Done():
	}

	// Let requests in flight finish; none may legitimately outlive the
	// request deadline, so that is also how long we wait.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Timeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("MCP HTTP server did not drain in time; closing connections", "err", err)
		_ = srv.Close()
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTP on %s: %w", addr, err)
	}
	logger.Info("MCP HTTP server stopped", "addr", addr)
	return nil
}

// NewHTTPHandler routes <base>/mcp to mcpHandler (normally a
// *server.StreamableHTTPServer) and serves <base>/metrics, and the health
// and liveness paths (<base>/health and <base>/live unless configured),
// behind these middlewares, outermost first: unread-body guard, in-flight
// limit, deadline, body limit, Host/Origin guard, auth (which records the
// caller for WithCaller), then the body buffer and JSON-RPC id check.
// It panics on a BasePath that HTTPConfigFromEnv would reject, as
// http.ServeMux does on a bad pattern.
func NewHTTPHandler(mcpHandler http.Handler, cfg HTTPConfig, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := cfg.resolve()
	if err != nil {
		panic(err)
	}
	base := cfg.BasePath
	public := map[string]bool{base + cfg.HealthPath: true, base + cfg.LivePath: true}

	mux := http.NewServeMux()
	mux.Handle(base+"/mcp", httpMCPMethods(httpBufferBody(mcpHandler, logger)))
	mux.Handle(base+cfg.HealthPath, httpStaticJSON(httpHealthBody(cfg.Version)))
	mux.Handle(base+cfg.LivePath, httpStaticJSON(httpLiveBody))
	mux.Handle(base+metrics.Path, metricsHandler()) // mcp/system.go
	for p, h := range cfg.Extra {
		mux.Handle(base+p, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeHTTPError(w, http.StatusNotFound, "no route for "+r.URL.Path, "")
	})

	var h http.Handler = mux
	h = newHTTPAuth(cfg).middleware(h, public, logger)
	h = httpOriginGuard(h, cfg, logger)
	h = httpBodyLimit(h, cfg.MaxRequestBytes, logger)
	h = httpDeadline(h, cfg.Timeout, logger)
	h = httpInFlightLimit(h, cfg.MaxInFlight, logger)
	h = httpCloseUnreadBody(h)
	return h
}

func httpHealthBody(version string) []byte {
	body, _ := json.Marshal(struct {
		Status  string `json:"status"`
		Version string `json:"version,omitempty"`
	}{"ok", version})
	return body
}

func httpStaticJSON(body []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeHTTPError(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path, "use GET")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(body)
	})
}

// httpMCPMethods answers methods the Streamable HTTP transport has no use for
// with our envelope; mcp-go would answer a plain-text 404.
func httpMCPMethods(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost, http.MethodGet, http.MethodDelete, http.MethodHead:
			next.ServeHTTP(w, r)
		default:
			w.Header().Set("Allow", "POST, GET, DELETE, HEAD")
			writeHTTPError(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path, "use POST")
		}
	})
}

// --- error envelope ---

// httpErrorCodes maps a status to the Probing error code; anything else is
// INTERNAL_ERROR.
var httpErrorCodes = map[int]string{
	http.StatusBadRequest:            "BAD_REQUEST",
	http.StatusUnauthorized:          "UNAUTHORIZED",
	http.StatusForbidden:             "FORBIDDEN",
	http.StatusNotFound:              "NOT_FOUND",
	http.StatusMethodNotAllowed:      "METHOD_NOT_ALLOWED",
	http.StatusRequestEntityTooLarge: "PAYLOAD_TOO_LARGE",
	http.StatusTooManyRequests:       "TOO_MANY_REQUESTS",
	http.StatusBadGateway:            "BAD_GATEWAY",
	http.StatusServiceUnavailable:    "SERVICE_UNAVAILABLE",
	http.StatusGatewayTimeout:        "GATEWAY_TIMEOUT",
}

type httpErrorEnvelope struct {
	Error httpErrorDetail `json:"error"`
}

type httpErrorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	Action    string `json:"action,omitempty"`
}

func httpErrorBody(status int, message, action string) []byte {
	code, ok := httpErrorCodes[status]
	if !ok {
		code = "INTERNAL_ERROR"
	}
	retryable := false
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		retryable = true
	}
	body, _ := json.Marshal(httpErrorEnvelope{httpErrorDetail{code, message, retryable, action}})
	return append(body, '\n')
}

func writeHTTPError(w http.ResponseWriter, status int, message, action string) {
	body := httpErrorBody(status, message, action)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// logRejected logs a request the middleware turned away. Query strings are left
// out: they are not ours to log.
func logRejected(logger *slog.Logger, r *http.Request, status int, reason string) {
	logger.Warn("HTTP request rejected", "status", status, "reason", reason,
		"method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
}

// --- middleware, outermost first ---

// httpCloseUnreadBody makes any response to a request whose body was not
// read to its end close the connection, and ends the connection's reads.
// Otherwise net/http, before it writes such a response, reads and discards
// up to 256 KiB of the body, and after the handler it tries again: a client
// that promises a body and never sends it would hold every refusal (the
// in-flight 503, 401, 403, 404, 405, 413) and the connection's goroutine for
// as long as it likes. Being outermost, it covers the 503, the 504 and
// mcp-go's own answers as well as ours, without each refusal having to.
func httpCloseUnreadBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 { // no body at all
			next.ServeHTTP(w, r)
			return
		}
		body := &eofBody{ReadCloser: r.Body}
		r.Body = body
		next.ServeHTTP(&unreadBodyWriter{ResponseWriter: w, body: body}, r)
	})
}

// eofBody records whether the body was read to its end. The deadline's 504
// may be written from another goroutine while the handler reads.
type eofBody struct {
	io.ReadCloser
	sawEOF atomic.Bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.sawEOF.Store(true)
	}
	return n, err
}

// unreadBodyWriter decides when the response starts, the one moment its
// headers can still change.
type unreadBodyWriter struct {
	http.ResponseWriter
	body    *eofBody
	started sync.Once
}

func (u *unreadBodyWriter) start() {
	u.started.Do(func() {
		if u.body.sawEOF.Load() {
			return
		}
		u.ResponseWriter.Header().Set("Connection", "close")
		// The deadline also fails a handler's read still waiting for the
		// body: once answered, the request is over.
		_ = http.NewResponseController(u.ResponseWriter).SetReadDeadline(time.Now())
	})
}

func (u *unreadBodyWriter) WriteHeader(status int) {
	if status >= 200 { // 1xx responses come before the real one
		u.start()
	}
	u.ResponseWriter.WriteHeader(status)
}

func (u *unreadBodyWriter) Write(p []byte) (int, error) {
	u.start()
	return u.ResponseWriter.Write(p)
}

func (u *unreadBodyWriter) Flush() {
	u.start()
	if f, ok := u.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (u *unreadBodyWriter) Unwrap() http.ResponseWriter { return u.ResponseWriter }

// httpInFlightLimit answers 503 at once when maxInFlight requests are running:
// queueing would only turn overload into timeouts.
func httpInFlightLimit(next http.Handler, maxInFlight int, logger *slog.Logger) http.Handler {
	slots := make(chan struct{}, maxInFlight)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			next.ServeHTTP(w, r)
		default:
			logRejected(logger, r, http.StatusServiceUnavailable, "in-flight limit")
			w.Header().Set("Retry-After", "1")
			writeHTTPError(w, http.StatusServiceUnavailable, "server request concurrency limit reached", "retry later")
		}
	})
}

// httpDeadline gives each request a context deadline and, if the handler
// has not started its response by then, answers 504 itself. Unlike
// http.TimeoutHandler it does not buffer the response, so SSE still streams,
// and the request keeps its in-flight slot until the handler really returns.
func httpDeadline(next http.Handler, timeout time.Duration, logger *slog.Logger) http.Handler {
	message := "request exceeded " + strconv.FormatFloat(timeout.Seconds(), 'f', -1, 64) + "s deadline"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		// A context cannot interrupt a body read from a client that trickles
		// bytes; a connection read deadline can. It is set a second late so
		// that the read error, which cancels r.Context(), cannot pre-empt
		// the 504. net/http resets it before the next request.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout + time.Second))
		dw := &deadlineWriter{w: w, header: make(http.Header), ctx: ctx, message: message,
			onTimeout: func() { logRejected(logger, r, http.StatusGatewayTimeout, "deadline") }}
		stop := context.AfterFunc(ctx, dw.timeOut)
		defer func() {
			stop()
			dw.finish()
		}()
		next.ServeHTTP(dw, r.WithContext(ctx))
	})
}

// deadlineWriter lets httpDeadline write a 504 from the AfterFunc goroutine
// while the handler still runs. Every use of the real ResponseWriter is under
// mu, and the response belongs to whoever claims it first: the handler by
// starting it before the deadline, or the 504 at any point after. The
// handler's later writes then fail with http.ErrHandlerTimeout. It gets its
// own header map, copied out when it writes, so the 504 path never races
// with a handler that is still setting headers.
type deadlineWriter struct {
	w         http.ResponseWriter
	header    http.Header
	ctx       context.Context
	message   string
	onTimeout func()

	mu          sync.Mutex
	wroteHeader bool // the handler has started the response
	timedOut    bool // the 504 was sent
	finished    bool // the handler returned; w must not be touched again
}

func (d *deadlineWriter) Header() http.Header { return d.header }

func (d *deadlineWriter) WriteHeader(status int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writeHeaderLocked(status)
}

func (d *deadlineWriter) writeHeaderLocked(status int) {
	// Checking the deadline here, and not only in the AfterFunc, makes the
	// outcome independent of goroutine scheduling: a handler that notices
	// the deadline and answers at once still yields the 504.
	if d.wroteHeader || d.timedOut || d.timeOutLocked() {
		return
	}
	d.wroteHeader = true
	maps.Copy(d.w.Header(), d.header)
	d.w.WriteHeader(status)
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writeHeaderLocked(http.StatusOK)
	if d.timedOut {
		return 0, http.ErrHandlerTimeout
	}
	return d.w.Write(p)
}

// Flush keeps the writer streamable: mcp-go only upgrades a response to SSE
// when its writer is an http.Flusher.
func (d *deadlineWriter) Flush() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writeHeaderLocked(http.StatusOK)
	if f, ok := d.w.(http.Flusher); ok && !d.timedOut {
		f.Flush()
	}
}

// timeOut runs when ctx is done.
func (d *deadlineWriter) timeOut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.timeOutLocked()
}

// finish runs when the handler returns, which may be before the AfterFunc
// goroutine got to run: a handler that returned without answering after the
// deadline (mcp-go does that) gets its 504 from here.
func (d *deadlineWriter) finish() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.timeOutLocked()
	d.finished = true
}

// timeOutLocked sends the 504 if the deadline has passed and nobody has
// answered yet, and reports whether it did. A client that went away cancels
// ctx too, but only the deadline deserves a 504.
func (d *deadlineWriter) timeOutLocked() bool {
	if d.finished || d.wroteHeader || d.timedOut || !errors.Is(d.ctx.Err(), context.DeadlineExceeded) {
		return false // a started response can only be cut short, via ctx
	}
	d.timedOut = true
	writeHTTPError(d.w, http.StatusGatewayTimeout, d.message,
		"retry with a narrower request, or raise PROBING_SERVER_TIMEOUT_SECS")
	// Push the 504 out now: the handler may take a while to notice ctx.
	if f, ok := d.w.(http.Flusher); ok {
		f.Flush()
	}
	d.onTimeout()
	return true
}

// httpBodyLimit rejects a declared oversized body at once and caps the rest;
// httpBufferBody turns the cap, once hit, into 413.
func httpBodyLimit(next http.Handler, maxBytes int64, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxBytes {
			logRejected(logger, r, http.StatusRequestEntityTooLarge, "content-length")
			writeHTTPError(w, http.StatusRequestEntityTooLarge, bodyTooLargeMessage(maxBytes), "")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBytes)
		next.ServeHTTP(w, r)
	})
}

func bodyTooLargeMessage(maxBytes int64) string {
	return fmt.Sprintf("request body exceeds %d bytes", maxBytes)
}

// httpBufferBody reads an MCP POST body before mcp-go sees it. mcp-go reads the
// body itself but reports any read error, the body cap included, as a
// JSON-RPC parse error with status 200; reading it here lets an oversized
// chunked body get its 413. With the body in hand it also refuses a request
// that must not run (precheck). It sits innermost, after
// auth, so bodies from unauthenticated clients are never read.
func httpBufferBody(next http.Handler, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if tooBig, ok := errors.AsType[*http.MaxBytesError](err); ok {
			logRejected(logger, r, http.StatusRequestEntityTooLarge, "body")
			writeHTTPError(w, http.StatusRequestEntityTooLarge, bodyTooLargeMessage(tooBig.Limit), "")
			return
		}
		if err != nil {
			logRejected(logger, r, http.StatusBadRequest, "body read: "+err.Error())
			writeHTTPError(w, http.StatusBadRequest, "could not read the request body", "")
			return
		}
		if answer, badID := precheck(body); answer != nil {
			// A forbidden id is the transport's refusal: an HTTP error
			// carrying a JSON-RPC error without an id. Refused prompt
			// arguments are an ordinary JSON-RPC error response.
			status := http.StatusOK
			if badID {
				status = http.StatusBadRequest
				logRejected(logger, r, status, "JSON-RPC id")
			}
			b := append(answer, '\n')
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.WriteHeader(status)
			_, _ = w.Write(b)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// httpOriginGuard defends against browsers being used to reach the server.
//
// Origin: a browser names the page that made a request; it must be this
// server itself, a page on this machine, or listed in AllowedOrigins. That
// stops cross-site requests (CSRF), but not DNS rebinding, where the
// attacker's name resolves to us and the request is "same-origin".
//
// Host: without a token, the server's only protection is being reachable
// from this machine alone, which DNS rebinding defeats; so the Host header
// must then be a loopback name (or the host of an allowed origin). With a
// token, a rebound page cannot authenticate, and any Host is accepted so that
// the server can be reached by its real hostname.
func httpOriginGuard(next http.Handler, cfg HTTPConfig, logger *slog.Logger) http.Handler {
	allowed := make(map[string]bool, len(cfg.AllowedOrigins))
	allowedHosts := make(map[string]bool, len(cfg.AllowedOrigins))
	for _, o := range cfg.AllowedOrigins {
		norm, ok := normalizeOrigin(o)
		if !ok {
			continue // HTTPConfigFromEnv rejects these; a hand-built config just loses them
		}
		allowed[norm] = true
		if u, err := url.Parse(norm); err == nil && norm != "*" {
			allowedHosts[canonicalHostPort(u.Host, u.Scheme)] = true
		}
	}
	checkHost := cfg.AuthToken == ""

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if checkHost && !isLoopbackHost(r.Host) &&
			!allowedHosts[canonicalHostPort(r.Host, "http")] && !allowedHosts[canonicalHostPort(r.Host, "https")] {
			logRejected(logger, r, http.StatusForbidden, "host "+strconv.Quote(r.Host))
			writeHTTPError(w, http.StatusForbidden,
				fmt.Sprintf("Host %q is not allowed: without PROBING_AUTH_TOKEN only localhost is served", r.Host),
				"connect via 127.0.0.1 or localhost, or set PROBING_AUTH_TOKEN")
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !originAllowed(origin, r.Host, allowed) {
			logRejected(logger, r, http.StatusForbidden, "origin "+strconv.Quote(origin))
			writeHTTPError(w, http.StatusForbidden,
				fmt.Sprintf("Origin %q is not allowed", origin),
				"add the origin to PROBING_ALLOWED_ORIGINS")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func originAllowed(origin, host string, allowed map[string]bool) bool {
	norm, ok := normalizeOrigin(origin)
	if !ok || norm == "*" {
		return false // e.g. "null" from a sandboxed page or a file: URL
	}
	if allowed["*"] || allowed[norm] {
		return true
	}
	u, err := url.Parse(norm)
	if err != nil {
		return false
	}
	// A page on this machine, or this server itself. Same-origin does not
	// compare schemes: a TLS-terminating proxy in front of us turns https
	// into http.
	return isLoopbackHost(u.Host) || canonicalHostPort(u.Host, u.Scheme) == canonicalHostPort(host, u.Scheme)
}

// httpAuth checks the three credential forms the Probing agent accepts.
type httpAuth struct {
	enabled  bool
	tokenSum [sha256.Size]byte
	username string
	realm    string
}

func newHTTPAuth(cfg HTTPConfig) *httpAuth {
	return &httpAuth{
		enabled:  cfg.AuthToken != "",
		tokenSum: sha256.Sum256([]byte(cfg.AuthToken)),
		username: cfg.AuthUsername,
		realm:    cfg.AuthRealm,
	}
}

// tokenMatches compares digests in constant time: comparing the tokens
// themselves would leak their length, and a byte-wise compare their prefix.
func (a *httpAuth) tokenMatches(given string) bool {
	sum := sha256.Sum256([]byte(given))
	return subtle.ConstantTimeCompare(sum[:], a.tokenSum[:]) == 1
}

// authenticate returns how the request proved itself, checking the forms in
// the agent's order; any one that matches is enough.
func (a *httpAuth) authenticate(r *http.Request) (string, bool) {
	authz := r.Header.Get("Authorization")
	if scheme, cred, ok := strings.Cut(authz, " "); ok && strings.EqualFold(scheme, "Bearer") &&
		a.tokenMatches(strings.TrimSpace(cred)) {
		return "bearer", true
	}
	if user, pass, ok := r.BasicAuth(); ok && user == a.username && a.tokenMatches(pass) {
		return "basic:" + user, true
	}
	if tok := r.Header.Get("X-Probing-Token"); tok != "" && a.tokenMatches(tok) {
		return "x-probing-token", true
	}
	return "", false
}

// middleware enforces auth outside the public paths and records the caller
// ("http:<method>@<remote>") for the audit log. mcp-go hands the request
// context to tool handlers, so CallerFrom works there.
func (a *httpAuth) middleware(next http.Handler, public map[string]bool, logger *slog.Logger) http.Handler {
	challenge := fmt.Sprintf("Basic realm=%q", a.realm)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := "anonymous"
		if a.enabled && !public[r.URL.Path] {
			m, ok := a.authenticate(r)
			if !ok {
				logRejected(logger, r, http.StatusUnauthorized, "credentials")
				w.Header().Set("WWW-Authenticate", challenge)
				writeHTTPError(w, http.StatusUnauthorized, "Authentication is required for this resource",
					"provide a Bearer token, Basic credentials, or X-Probing-Token")
				return
			}
			method = m
		}
		ctx := WithCaller(r.Context(), "http:"+method+"@"+r.RemoteAddr)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
