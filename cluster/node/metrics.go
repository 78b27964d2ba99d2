package node

// The daemon's system paths: the configured health and liveness paths and
// the Prometheus registry at /metrics, each under /health's rules (with a
// token: open to unsigned requests, a signed one checked and its answer
// signed; without: loopback clients of this user or root only, peer.go).
// Prometheus cannot sign, and the registry holds counts and timings,
// never job text.

import (
	"net/http"

	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// systemRoutes adds the system paths to mux and returns every path served
// under /health's rules, /health included.
func systemRoutes(mux *http.ServeMux, cfg Config) map[string]bool {
	public := map[string]bool{PathHealth: true, metrics.Path: true}
	health := func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": cfg.Version})
	}
	live := func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "alive"})
	}
	p := cfg.Paths
	if p.Health == "" {
		p.Health = metrics.DefaultHealthPath
	}
	if p.Live == "" {
		p.Live = metrics.DefaultLivePath
	}
	if !public[p.Health] {
		mux.HandleFunc("GET "+p.Health, health)
		public[p.Health] = true
	}
	if !public[p.Live] { // a live path of /health: /health answers it
		mux.HandleFunc("GET "+p.Live, live)
		public[p.Live] = true
	}
	mux.Handle("GET "+metrics.Path, metrics.Handler())
	return public
}
