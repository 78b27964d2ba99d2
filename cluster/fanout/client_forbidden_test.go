package fanout_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"

	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/cluster/node"
)

// TestForbiddenSaysWhy: a daemon's 403 (a tokenless daemon refusing
// another user's coordinator) reaches the coverage with the daemon's own
// words, not as a wrong token.
func TestForbiddenSaysWhy(t *testing.T) {
	why := "refused: without PROBING_AUTH_TOKEN this node daemon serves only its job's user (uid 1000) and root"
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"error":"` + why + `"}`))
	}))
	defer s.Close()
	n := cluster.Node{Host: "n0", Addr: s.Listener.Addr().String(), Kind: cluster.KindDaemon}
	var info node.Info
	err := fanout.NewClient("", 1).Do(context.Background(), n, http.MethodGet, node.PathInfo, nil, &info)
	var pe *evidence.PeerError
	if !errors.As(err, &pe) || pe.Kind != fanout.KindAuth || !strings.Contains(pe.Msg, why) || strings.Contains(pe.Msg, "token was refused") {
		t.Errorf("got %v", err)
	}
}
