package mcp

// The system port (PROBING_SYSTEM_PORT): health, liveness and /metrics
// for a server whose MCP transport is stdio, which has no listener of its
// own to put them on. Without PROBING_AUTH_TOKEN it binds loopback only;
// with it, /metrics off loopback takes the token as /mcp does, while the
// health and liveness paths stay open to probes, as on serve --http.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

var httpLiveBody = []byte(`{"status":"alive"}`)

// metricsHandler serves the registry; GET and HEAD only.
func metricsHandler() http.Handler {
	h := metrics.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeHTTPError(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path, "use GET")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// SystemHandler serves the system port's paths. /metrics needs the token
// unless the request is local: from a loopback address and naming a
// loopback Host (a page rebound to 127.0.0.1 in a browser here names its
// own host, and gets the 401).
func SystemHandler(sys metrics.System, version string, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, _ := HTTPConfig{AuthToken: sys.Token}.resolve() // no BasePath: cannot fail
	mux := http.NewServeMux()
	mux.Handle(sys.Health, httpStaticJSON(httpHealthBody(version)))
	mux.Handle(sys.Live, httpStaticJSON(httpLiveBody))
	mux.Handle(metrics.Path, metricsHandler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeHTTPError(w, http.StatusNotFound, "no route for "+r.URL.Path,
			"this is the system port: "+sys.Health+", "+sys.Live+" and "+metrics.Path)
	})
	auth := newHTTPAuth(cfg)
	challenge := fmt.Sprintf("Basic realm=%q", cfg.AuthRealm)
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		public := r.URL.Path == sys.Health || r.URL.Path == sys.Live
		local := metrics.Loopback(r.RemoteAddr) && isLoopbackHost(r.Host)
		if !public && !local {
			if _, ok := auth.authenticate(r); !auth.enabled || !ok {
				logRejected(logger, r, http.StatusUnauthorized, "system port credentials")
				w.Header().Set("WWW-Authenticate", challenge)
				writeHTTPError(w, http.StatusUnauthorized, "off loopback the system port's "+metrics.Path+" requires the token",
					"send Authorization: Bearer <PROBING_AUTH_TOKEN>")
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
	h = httpOriginGuard(h, cfg, logger)
	h = httpInFlightLimit(h, 16, logger)
	return h
}

// ServeSystem serves SystemHandler on sys.Addr until ctx ends; nothing
// when sys.Addr is "". A listen failure is returned at once, so a taken
// port stops the start-up with its reason; done yields how serving ended
// (nil after ctx ended) and is then closed.
func ServeSystem(ctx context.Context, sys metrics.System, version string, logger *slog.Logger) (<-chan error, error) {
	done := make(chan error, 1)
	if sys.Addr == "" {
		close(done)
		return done, nil
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	host, _, err := net.SplitHostPort(sys.Addr)
	if err != nil || (sys.Token == "" && !metrics.Loopback(host)) {
		// SystemFromEnv never builds one; a hand-made System is checked too.
		return nil, fmt.Errorf("%s: refusing to serve %s on %q without PROBING_AUTH_TOKEN off loopback", metrics.EnvSystemPort, metrics.Path, sys.Addr)
	}
	ln, err := net.Listen("tcp", sys.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w", metrics.EnvSystemPort, sys.Addr, err)
	}
	srv := &http.Server{
		Handler:           SystemHandler(sys, version, logger),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	addr := ln.Addr().String()
	logger.Info("system port listening", "addr", addr, "metrics", "http://"+addr+metrics.Path,
		"health", sys.Health, "live", sys.Live, "auth", sys.Token != "")
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		if err != nil {
			// MCP goes on: the system port is for the operator, not the client.
			logger.Error("system port stopped serving", "addr", addr, "err", err)
		}
		done <- err
		close(done)
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return done, nil
}
