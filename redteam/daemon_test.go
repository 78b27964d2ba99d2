package redteam

import (
	"strings"
	"testing"
	"time"
)

// TestTokenlessDaemonOtherUser. Attack: another local user (uid 65534)
// asks a node daemon that runs without a token on loopback (the default
// the agent starts) for the job's stacks, evidence and trace rows. Before
// (b2aa69a): the daemon answered another user's POST /v1/stacks,
// /v1/evidence and /v1/scan with every stack, exception message and trace
// row of root's job. Bound: each is refused with 403 naming the rule
// (only the job's user and root without PROBING_AUTH_TOKEN), the client's
// uid and the fix, telling nothing of the job; the daemon's own user is
// served; under 512 MB, each answer within 60 s.
func TestTokenlessDaemonOtherUser(t *testing.T) {
	attacker(t)
	p := start(t, env(t, t.TempDir()), nil, "node", "--http", "127.0.0.1:0", "--no-register", "--idle-exit", "0")
	addr := p.logLine(serving, startTime)[1]
	var slowest time.Duration
	for _, c := range []struct{ path, body string }{
		{"/v1/stacks", "{}"},
		{"/v1/evidence", "{}"},
		{"/v1/scan", `{"table":"probing.rings"}`},
		{"/v1/node", ""},
	} {
		method := "POST"
		if c.body == "" {
			method = "GET"
		}
		t0 := time.Now()
		code, body := attackerRequest(t, method, "http://"+addr+c.path, c.body)
		slowest = max(slowest, time.Since(t0))
		if code != 403 {
			t.Errorf("uid 65534's %s %s: %d %.300s, want 403", method, c.path, code, body)
			continue
		}
		mustContain(t, "the refusal of "+c.path, body, "without PROBING_AUTH_TOKEN this node daemon serves only its job's user (uid 0) and root",
			"this client runs as uid 65534", "PROBING_AUTH_TOKEN")
		if strings.Contains(body, "processes") || strings.Contains(body, "bundle") {
			t.Errorf("the refusal of %s tells of the job: %.500s", c.path, body)
		}
		if c.path == "/v1/stacks" {
			said(t, body, "refused")
		}
	}
	// The job's own user (root here) is served.
	if code, body := post(t, "http://"+addr+"/v1/stacks", "{}"); code != 200 || !strings.Contains(body, `"processes"`) {
		t.Errorf("the daemon's own user: %d %.300s", code, body)
	}
	if code := p.stop(); code != 0 {
		t.Errorf("the daemon exited %d on SIGTERM", code)
	}
	bounded(t, "tokenless daemon asked by another user", p, slowest, startTime)
}
