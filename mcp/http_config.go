package mcp

// HTTP transport configuration: defaults, the PROBING_* variables, and the
// rule that an unauthenticated server binds loopback only.

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/bytesize"
	"github.com/probing-mcp/probing-mcp/internal/metrics"
	"github.com/probing-mcp/probing-mcp/internal/netaddr"
)

// Defaults mirror the Probing agent's.
const (
	defaultAuthUsername    = "admin"
	defaultAuthRealm       = "Probe Server"
	defaultMaxRequestBytes = 4 << 20
	defaultHTTPTimeout     = 30 * time.Second
	defaultMaxInFlight     = 128
)

// HTTPConfig configures the HTTP transport. Zero values mean the defaults
// above, so a literal HTTPConfig{Addr: ...} is usable as is; BasePath is
// normalised like PROBING_BASE_PATH.
type HTTPConfig struct {
	Addr            string        // listen address, host:port
	BasePath        string        // URL prefix such as "/probing"; "" for none
	AuthToken       string        // shared secret; "" turns auth off (loopback binds only)
	AuthUsername    string        // user name Basic credentials must carry
	AuthRealm       string        // realm in the WWW-Authenticate challenge
	MaxRequestBytes int64         // request body cap (413 beyond it)
	Timeout         time.Duration // end-to-end deadline per request (504 beyond it)
	MaxInFlight     int           // concurrent requests before 503
	AllowedOrigins  []string      // extra browser origins, "scheme://host[:port]", or "*"
	Version         string        // reported by /health when set
	// HealthPath and LivePath (below BasePath) answer health and liveness
	// probes without credentials (PROBING_SYSTEM_HEALTH_PATH, _LIVE_PATH;
	// default /health and /live). <base>/metrics is behind auth like /mcp.
	HealthPath, LivePath string
	// Extra routes served beside /mcp, behind the same auth and limits
	// (the whole-job view's PUT /apis/nodes heartbeats).
	Extra map[string]http.Handler
}

// resolve fills in defaults and normalises BasePath, which ends up in mux
// patterns: "probing/" unchecked would register host "probing" instead.
func (c HTTPConfig) resolve() (HTTPConfig, error) {
	base, err := parseBasePath(c.BasePath)
	if err != nil {
		return HTTPConfig{}, err
	}
	c.BasePath = base
	if c.HealthPath == "" {
		c.HealthPath = metrics.DefaultHealthPath
	}
	if c.LivePath == "" {
		c.LivePath = metrics.DefaultLivePath
	}
	if c.AuthUsername == "" {
		c.AuthUsername = defaultAuthUsername
	}
	if c.AuthRealm == "" {
		c.AuthRealm = defaultAuthRealm
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = defaultMaxRequestBytes
	}
	if c.Timeout <= 0 {
		c.Timeout = defaultHTTPTimeout
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = defaultMaxInFlight
	}
	return c, nil
}

// HTTPConfigFromEnv builds an HTTPConfig for addr from the PROBING_*
// variables the Probing agent reads. A bad value is an error naming the
// variable, rather than a silent fallback to the default.
func HTTPConfigFromEnv(addr string, getenv func(string) string) (HTTPConfig, error) {
	cfg := HTTPConfig{
		Addr:         addr,
		AuthToken:    strings.TrimSpace(getenv("PROBING_AUTH_TOKEN")),
		AuthUsername: getenv("PROBING_AUTH_USERNAME"),
		AuthRealm:    getenv("PROBING_AUTH_REALM"),
	}
	var err error
	if cfg.BasePath, err = parseBasePath(getenv("PROBING_BASE_PATH")); err != nil {
		return HTTPConfig{}, err
	}
	paths, err := metrics.PathsFromEnv(getenv)
	if err != nil {
		return HTTPConfig{}, err
	}
	cfg.HealthPath, cfg.LivePath = paths.Health, paths.Live
	if v := getenv("PROBING_MAX_REQUEST_SIZE"); v != "" {
		n, ok := bytesize.Parse(v)
		if !ok {
			return HTTPConfig{}, httpEnvError("PROBING_MAX_REQUEST_SIZE", v,
				"a positive number of bytes, optionally with a unit such as 512KB, 8MiB or 8M")
		}
		cfg.MaxRequestBytes = n
	}
	if v := getenv("PROBING_SERVER_TIMEOUT_SECS"); v != "" {
		n, ok := httpPositiveInt(v)
		if !ok || n > math.MaxInt64/int64(time.Second) {
			return HTTPConfig{}, httpEnvError("PROBING_SERVER_TIMEOUT_SECS", v, "a positive integer number of seconds")
		}
		cfg.Timeout = time.Duration(n) * time.Second
	}
	if v := getenv("PROBING_MAX_CONNECTIONS"); v != "" {
		n, ok := httpPositiveInt(v)
		if !ok || n > math.MaxInt32 {
			return HTTPConfig{}, httpEnvError("PROBING_MAX_CONNECTIONS", v, "a positive integer number of concurrent requests")
		}
		cfg.MaxInFlight = int(n)
	}
	if v := getenv("PROBING_ALLOWED_ORIGINS"); v != "" {
		for item := range strings.SplitSeq(v, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			origin, ok := normalizeOrigin(item)
			if !ok {
				return HTTPConfig{}, httpEnvError("PROBING_ALLOWED_ORIGINS", v,
					fmt.Sprintf("comma-separated origins like https://host:8080 or *, and %q is not one", item))
			}
			cfg.AllowedOrigins = append(cfg.AllowedOrigins, origin)
		}
	}
	return cfg.resolve()
}

func httpEnvError(name, value, want string) error {
	return fmt.Errorf("%s=%q: want %s", name, value, want)
}

func httpPositiveInt(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n, err == nil && n > 0
}

// parseBasePath normalises PROBING_BASE_PATH to "" or "/a/b". Only URL path
// characters that need no escaping are accepted: the prefix ends up in
// http.ServeMux patterns, where spaces, braces and the like mean something.
func parseBasePath(v string) (string, error) {
	p := strings.TrimSpace(v)
	for _, r := range p {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/-._~", r)
		if !ok {
			return "", httpEnvError("PROBING_BASE_PATH", v,
				"a URL path prefix such as /probing (letters, digits, '-', '.', '_', '~' and '/')")
		}
	}
	p = path.Clean("/" + p)
	if p == "/" {
		return "", nil
	}
	return p, nil
}

// normalizeOrigin returns "*" or the lower-case "scheme://host[:port]" form
// of an http(s) origin, without a default port, so that comparisons are
// plain string equality.
func normalizeOrigin(s string) (string, bool) {
	if s == "*" {
		return s, true
	}
	u, err := url.Parse(strings.TrimSuffix(s, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	return u.Scheme + "://" + canonicalHostPort(u.Host, u.Scheme), true
}

// canonicalHostPort lower-cases host[:port] and drops the scheme's default
// port, so "Example.com:443" and "example.com" compare equal under https.
func canonicalHostPort(hostport, scheme string) string {
	hostport = strings.ToLower(hostport)
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport // no port
	}
	if port == "" || (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		if strings.Contains(host, ":") {
			return "[" + host + "]"
		}
		return host
	}
	return net.JoinHostPort(host, port)
}

// isLoopbackHost reports whether a host or host:port names this machine's
// loopback interface: localhost, 127.0.0.0/8 or ::1.
func isLoopbackHost(hostport string) bool { return netaddr.Loopback(hostport) }

// CheckListenAddr refuses to expose an unauthenticated server beyond this
// machine: without a token, only a loopback bind is allowed. An empty host
// (":8080") binds every interface and is refused like 0.0.0.0.
func CheckListenAddr(addr string, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("invalid HTTP listen address %q: %w", addr, err)
	}
	if token != "" || isLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("refusing to serve MCP over HTTP on %q without authentication: "+
		"set PROBING_AUTH_TOKEN, or bind a loopback address such as 127.0.0.1:%s",
		addr, listenPort(addr))
}

func listenPort(addr string) string {
	if _, port, err := net.SplitHostPort(addr); err == nil && port != "" {
		return port
	}
	return "8080"
}
