package metrics

import (
	"strings"
	"testing"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestSystemFromEnv(t *testing.T) {
	for _, c := range []struct {
		env      []string
		addr     string // want, when ok
		errParts []string
	}{
		{nil, "", nil},
		{[]string{EnvSystemPort, "9464"}, "127.0.0.1:9464", nil},
		{[]string{EnvSystemPort, " 0 "}, "127.0.0.1:0", nil},
		{[]string{EnvSystemPort, "9464", "PROBING_AUTH_TOKEN", "s"}, ":9464", nil},
		{[]string{EnvSystemPort, "[::1]:9464"}, "[::1]:9464", nil},
		{[]string{EnvSystemPort, "localhost:9464"}, "localhost:9464", nil},
		{[]string{EnvSystemPort, "0.0.0.0:9464", "PROBING_AUTH_TOKEN", "s"}, "0.0.0.0:9464", nil},
		// Off loopback without the token: refused, naming the fix.
		{[]string{EnvSystemPort, "0.0.0.0:9464"}, "", []string{EnvSystemPort, "PROBING_AUTH_TOKEN", "127.0.0.1:9464"}},
		{[]string{EnvSystemPort, ":9464"}, "", []string{EnvSystemPort, "PROBING_AUTH_TOKEN"}},
		{[]string{EnvSystemPort, "10.1.2.3:9464"}, "", []string{"without authentication"}},
		{[]string{EnvSystemPort, "http"}, "", []string{EnvSystemPort, `"http"`, "0 to 65535"}},
		{[]string{EnvSystemPort, "65536"}, "", []string{"0 to 65535"}},
		{[]string{EnvSystemPort, "-1"}, "", []string{"0 to 65535"}},
		{[]string{EnvSystemPort, "a:b:c"}, "", []string{"host:port"}},
	} {
		s, err := SystemFromEnv(env(c.env...))
		if c.errParts == nil {
			if err != nil || s.Addr != c.addr {
				t.Errorf("%v: %q, %v; want %q", c.env, s.Addr, err, c.addr)
			}
			continue
		}
		if err == nil {
			t.Errorf("%v: accepted (%q); want an error", c.env, s.Addr)
			continue
		}
		for _, p := range c.errParts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("%v: error %q does not name %q", c.env, err, p)
			}
		}
	}
}

func TestPathsFromEnv(t *testing.T) {
	p, err := PathsFromEnv(env())
	if err != nil || p != (Paths{"/health", "/live"}) {
		t.Fatalf("defaults: %+v, %v", p, err)
	}
	p, err = PathsFromEnv(env(EnvSystemHealthPath, "/healthz", EnvSystemLivePath, "/k8s/livez"))
	if err != nil || p != (Paths{"/healthz", "/k8s/livez"}) {
		t.Fatalf("set: %+v, %v", p, err)
	}
	for _, c := range [][]string{
		{EnvSystemHealthPath, "healthz"},  // not absolute
		{EnvSystemHealthPath, "/"},        // the root
		{EnvSystemLivePath, "/live/"},     // not clean
		{EnvSystemLivePath, "/a//b"},      // not clean
		{EnvSystemLivePath, "/a/../b"},    // not clean
		{EnvSystemHealthPath, "/he alth"}, // a space: a mux pattern's separator
		{EnvSystemHealthPath, "/{x}"},     // a mux wildcard
		{EnvSystemHealthPath, "/metrics"}, // served already
		{EnvSystemLivePath, "/mcp"},       // served already
		{EnvSystemLivePath, "/v1/node"},   // the node API
		{EnvSystemHealthPath, "/live"},    // the same as live
		{EnvSystemLivePath, "/health"},    // the same as health
		{EnvSystemHealthPath, "/" + strings.Repeat("a", 200)},
	} {
		_, err := PathsFromEnv(env(c...))
		if err == nil {
			t.Errorf("%s=%q accepted; want an error", c[0], c[1])
			continue
		}
		if !strings.Contains(err.Error(), c[0]) {
			t.Errorf("%s=%q: error %q does not name the variable", c[0], c[1], err)
		}
	}
	// A bad path stops the system port's configuration too.
	if _, err := SystemFromEnv(env(EnvSystemPort, "9464", EnvSystemHealthPath, "x")); err == nil {
		t.Error("SystemFromEnv accepted a bad health path")
	}
}

func TestLoopback(t *testing.T) {
	for h, want := range map[string]bool{
		"127.0.0.1": true, "127.9.9.9:80": true, "[::1]:1": true, "::1": true, "localhost": true, "LOCALHOST:9": true,
		"::ffff:127.0.0.1": true, "10.0.0.1": false, "0.0.0.0": false, "": false, "example.com": false, "[::]:80": false,
	} {
		if got := Loopback(h); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", h, got, want)
		}
	}
}
