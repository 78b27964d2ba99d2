package metrics

// The system endpoints' configuration, as NVIDIA Dynamo names it: health
// and liveness paths every listener serves, and an optional system port
// for a process whose MCP transport is stdio. The serving is the
// listeners' own (mcp for serve, cluster/node for the daemon), each
// behind its rules; this file only reads and checks the variables.

import (
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/netaddr"
)

// The variables.
const (
	EnvSystemPort       = "PROBING_SYSTEM_PORT"
	EnvSystemHealthPath = "PROBING_SYSTEM_HEALTH_PATH"
	EnvSystemLivePath   = "PROBING_SYSTEM_LIVE_PATH"
)

// Path is where every listener serves the registry.
const Path = "/metrics"

// Default health and liveness paths (Dynamo's).
const (
	DefaultHealthPath = "/health"
	DefaultLivePath   = "/live"
)

// reserved are paths a listener already routes: a health or live path
// there would shadow it (and http.ServeMux panics on a duplicate).
var reserved = []string{Path, "/mcp", "/apis/nodes"}

// Paths are the health and liveness paths.
type Paths struct {
	Health, Live string
}

// PathsFromEnv reads PROBING_SYSTEM_HEALTH_PATH and PROBING_SYSTEM_LIVE_PATH.
func PathsFromEnv(getenv func(string) string) (Paths, error) {
	p := Paths{Health: DefaultHealthPath, Live: DefaultLivePath}
	var err error
	if v := getenv(EnvSystemHealthPath); v != "" {
		if p.Health, err = checkPath(EnvSystemHealthPath, v); err != nil {
			return Paths{}, err
		}
	}
	if v := getenv(EnvSystemLivePath); v != "" {
		if p.Live, err = checkPath(EnvSystemLivePath, v); err != nil {
			return Paths{}, err
		}
	}
	if p.Health == p.Live {
		return Paths{}, fmt.Errorf("%s and %s are both %q: give them different paths (defaults %s and %s)",
			EnvSystemHealthPath, EnvSystemLivePath, p.Health, DefaultHealthPath, DefaultLivePath)
	}
	return p, nil
}

// checkPath accepts "/a/b" made of the URL path characters that need no
// escaping (the path ends up in http.ServeMux patterns, where spaces and
// braces mean something), already clean, not a path the listeners route.
func checkPath(name, v string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("%s=%q: %s; want an absolute URL path such as /healthz (letters, digits, '-', '.', '_', '~' and '/')", name, v, why)
	}
	p := strings.TrimSpace(v)
	if !strings.HasPrefix(p, "/") || p == "/" {
		return "", bad("not a path below /")
	}
	if len(p) > 128 {
		return "", bad("over 128 characters")
	}
	for _, r := range p {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/-._~", r)
		if !ok {
			return "", bad(fmt.Sprintf("%q is not allowed", r))
		}
	}
	if path.Clean(p) != p {
		return "", bad("not clean (a trailing '/', '//', '.' or '..')")
	}
	for _, r := range reserved {
		if p == r {
			return "", bad(r + " is served already")
		}
	}
	if p == "/v1" || strings.HasPrefix(p, "/v1/") {
		return "", bad("/v1/ is the node daemon's API")
	}
	return p, nil
}

// System is the optional system port of a stdio server.
type System struct {
	// Addr is where to listen, host:port; "" when PROBING_SYSTEM_PORT is
	// unset.
	Addr string
	// Token is PROBING_AUTH_TOKEN: without it Addr is loopback.
	Token string
	Paths
}

// SystemFromEnv reads PROBING_SYSTEM_PORT: a port number (loopback, or
// every interface when PROBING_AUTH_TOKEN is set) or host:port (a host off
// loopback only with the token), plus the paths. A bad value is an error
// naming the variable and the fix.
func SystemFromEnv(getenv func(string) string) (System, error) {
	s := System{Token: strings.TrimSpace(getenv("PROBING_AUTH_TOKEN"))}
	var err error
	if s.Paths, err = PathsFromEnv(getenv); err != nil {
		return System{}, err
	}
	v := strings.TrimSpace(getenv(EnvSystemPort))
	if v == "" {
		return s, nil
	}
	host, port := "", v
	if strings.Contains(v, ":") {
		if host, port, err = net.SplitHostPort(v); err != nil {
			return System{}, fmt.Errorf("%s=%q: want a port number (e.g. 9464) or host:port (e.g. 127.0.0.1:9464): %v", EnvSystemPort, v, err)
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return System{}, fmt.Errorf("%s=%q: the port must be a number from 0 to 65535 (e.g. 9464; 0 picks a free one)", EnvSystemPort, v)
	}
	switch {
	case host == "" && !strings.Contains(v, ":") && s.Token == "":
		host = "127.0.0.1"
	case host == "" && s.Token == "":
		// ":9464" names every interface: refused like 0.0.0.0 below.
		return System{}, refuseOpen(v, port)
	case host != "" && s.Token == "" && !Loopback(host):
		return System{}, refuseOpen(v, port)
	}
	s.Addr = net.JoinHostPort(host, strconv.Itoa(n))
	return s, nil
}

func refuseOpen(v, port string) error {
	return fmt.Errorf("%s=%q would serve /metrics beyond this machine without authentication: set PROBING_AUTH_TOKEN "+
		"(then a bearer token is required off loopback), or bind loopback, e.g. %s=127.0.0.1:%s", EnvSystemPort, v, EnvSystemPort, port)
}

// Loopback is whether host (a name or address, optionally with a port or
// brackets) is this machine only: localhost, 127.0.0.0/8 or ::1.
func Loopback(host string) bool { return netaddr.Loopback(host) }
