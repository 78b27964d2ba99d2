package mcp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	mcplib "github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/probing-mcp/probing-mcp/tools"
)

// connectLegacy is connect at the protocol version that still has
// resources/subscribe (2026-07-28 moved it into subscriptions/listen).
func connectLegacy(t *testing.T, s *server.MCPServer, got chan<- string) *client.Client {
	t.Helper()
	c, err := client.NewInProcessClient(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	c.OnNotification(func(n mcplib.JSONRPCNotification) {
		if n.Method == mcplib.MethodNotificationResourceUpdated {
			got <- n.Params.AdditionalFields["uri"].(string)
		}
	})
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var ir mcplib.InitializeRequest
	ir.Params.ProtocolVersion = "2025-06-18"
	ir.Params.ClientInfo = mcplib.Implementation{Name: "test", Version: "0"}
	if _, err := c.Initialize(ctx, ir); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAlertsResourceSubscription: a client subscribed to probing://alerts
// hears that it changed when the watcher keeps an event; one that did not
// subscribe hears nothing; reading the resource gives list_alerts' page.
func TestAlertsResourceSubscription(t *testing.T) {
	s, _ := testServer(t, false, "")
	sub, other := make(chan string, 4), make(chan string, 4)
	c := connectLegacy(t, s, sub)
	connectLegacy(t, s, other)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var req mcplib.SubscribeRequest
	req.Params.URI = tools.AlertsURI
	if err := c.Subscribe(ctx, req); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	NotifyAlerts(s)
	select {
	case uri := <-sub:
		if uri != tools.AlertsURI {
			t.Fatalf("updated %q", uri)
		}
	case <-ctx.Done():
		t.Fatal("the subscribed client heard nothing")
	}
	select {
	case uri := <-other:
		t.Fatalf("a client that did not subscribe heard %q", uri)
	default:
	}
	var rr mcplib.ReadResourceRequest
	rr.Params.URI = tools.AlertsURI
	res, err := c.ReadResource(ctx, rr)
	if err != nil || len(res.Contents) != 1 {
		t.Fatalf("read: %+v %v", res, err)
	}
	txt := res.Contents[0].(mcplib.TextResourceContents).Text
	if !strings.Contains(txt, `"summary"`) || !strings.Contains(txt, "watcher") {
		t.Errorf("resource: %s", txt)
	}
	var ureq mcplib.UnsubscribeRequest
	ureq.Params.URI = tools.AlertsURI
	if err := c.Unsubscribe(ctx, ureq); err != nil {
		t.Fatal(err)
	}
	subsMu.Lock()
	subs := subsFor[s]
	subsMu.Unlock()
	subs.mu.Lock()
	left := len(subs.ids)
	subs.mu.Unlock()
	if left != 0 {
		t.Errorf("%d session(s) still subscribed after unsubscribing", left)
	}
}
