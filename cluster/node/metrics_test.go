package node_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/internal/hmacauth"
	"github.com/probing-mcp/probing-mcp/internal/metrics"
)

// TestSystemPathsFollowHealthsRules: with a token, /metrics and the
// configured health and liveness paths answer unsigned requests as
// /health does (a scraper cannot sign), a signed one is checked and its
// answer signed, and the node API still takes signed requests only.
func TestSystemPathsFollowHealthsRules(t *testing.T) {
	s := newServerWith(t, node.Config{Token: "tok", Paths: metrics.Paths{Health: "/healthz", Live: "/k8s/livez"}})
	for _, p := range []string{"/metrics", "/healthz", "/k8s/livez", node.PathHealth} {
		if code, body := do(t, "GET", s.URL+p, "", "", nil); code != 200 {
			t.Errorf("GET %s unsigned: %d %.200s", p, code, body)
		}
		// The signature covers the bytes sent: ask for them unzipped, as
		// the coordinator's client does (Go's would unzip them unasked).
		if code, _, err := doSigned(t, "GET", s.URL+p, signed, "", map[string]string{"Accept-Encoding": "identity"}); code != 200 || err != nil {
			t.Errorf("GET %s signed: %d, answer's signature: %v", p, code, err)
		}
	}
	if code, _ := do(t, "GET", s.URL+"/live", "", "", nil); code == 200 {
		t.Error("/live still answers after PROBING_SYSTEM_LIVE_PATH moved it")
	}
	if code, _ := do(t, "GET", s.URL+node.PathInfo, "", "", nil); code != 401 {
		t.Errorf("the node API unsigned: %d, want 401", code)
	}
	// A forged signature on /metrics is refused like one on /health.
	if code, _ := do(t, "GET", s.URL+"/metrics", hmacauth.Scheme+" garbage", "", nil); code < 400 {
		t.Errorf("a bad signature on /metrics: %d, want a refusal", code)
	}
	code, body := do(t, "GET", s.URL+"/metrics", "", "", nil)
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the daemon's exposition does not parse: %v", err)
	}
	if mfs["process_cpu_seconds_total"] == nil || mfs["go_goroutines"] == nil {
		t.Errorf("the daemon's /metrics lacks the process and Go collectors")
	}
}

// TestSystemPathsWithoutToken: without a token the daemon's own user is
// served on loopback (TestPeerOtherUser refuses another uid's scrape).
func TestSystemPathsWithoutToken(t *testing.T) {
	s := newServerWith(t, node.Config{})
	for _, p := range []string{"/metrics", "/health", "/live"} {
		if code, body := do(t, "GET", s.URL+p, "", "", nil); code != 200 {
			t.Errorf("GET %s: %d %.200s", p, code, body)
		}
	}
}

// newServerWith is newServer with cfg's other fields.
func newServerWith(t *testing.T, cfg node.Config) *httptest.Server {
	cfg.Source = &node.Local{Self: cluster.Node{Host: "n0", Addr: "127.0.0.1:1"}, Agents: agent.Options{DataDir: t.TempDir(), CtrlRoot: t.TempDir()}}
	s := httptest.NewServer(node.Handler(cfg))
	t.Cleanup(s.Close)
	return s
}
