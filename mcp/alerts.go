package mcp

import (
	"context"
	"sync"

	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/tools"
)

// alertSubs are the sessions subscribed to tools.AlertsURI, per server.
type alertSubs struct {
	mu  sync.Mutex
	ids map[string]bool
}

var (
	subsMu  sync.Mutex
	subsFor = map[*server.MCPServer]*alertSubs{}
)

// withAlertSubscriptions tracks who subscribes to the alerts resource,
// through the server's own hooks (added, never replacing others').
func withAlertSubscriptions(s *server.MCPServer) {
	subs := &alertSubs{ids: map[string]bool{}}
	subsMu.Lock()
	subsFor[s] = subs
	subsMu.Unlock()
	h := s.GetHooks()
	if h == nil {
		h = &server.Hooks{}
		server.WithHooks(h)(s)
	}
	h.AddAfterSubscribe(func(ctx context.Context, _ any, req *mcplib.SubscribeRequest, _ *mcplib.EmptyResult) {
		if sess := server.ClientSessionFromContext(ctx); sess != nil && req.Params.URI == tools.AlertsURI {
			subs.mu.Lock()
			subs.ids[sess.SessionID()] = true
			subs.mu.Unlock()
		}
	})
	h.AddAfterUnsubscribe(func(ctx context.Context, _ any, req *mcplib.UnsubscribeRequest, _ *mcplib.EmptyResult) {
		if sess := server.ClientSessionFromContext(ctx); sess != nil && req.Params.URI == tools.AlertsURI {
			subs.mu.Lock()
			delete(subs.ids, sess.SessionID())
			subs.mu.Unlock()
		}
	})
	h.AddOnUnregisterSession(func(_ context.Context, sess server.ClientSession) {
		subs.mu.Lock()
		delete(subs.ids, sess.SessionID())
		subs.mu.Unlock()
	})
}

// NotifyAlerts tells the sessions subscribed to the alerts resource that
// it changed (a watcher event was kept). Never blocks: mcp-go drops a
// notification for a session whose channel is full.
func NotifyAlerts(s *server.MCPServer) {
	subsMu.Lock()
	subs := subsFor[s]
	subsMu.Unlock()
	if subs == nil {
		return
	}
	subs.mu.Lock()
	ids := make([]string, 0, len(subs.ids))
	for id := range subs.ids {
		ids = append(ids, id)
	}
	subs.mu.Unlock()
	for _, id := range ids {
		_ = s.SendNotificationToSpecificClient(id, mcplib.MethodNotificationResourceUpdated, map[string]any{"uri": tools.AlertsURI})
	}
}
