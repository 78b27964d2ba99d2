package main

import (
	"strings"
	"testing"
)

// TestNodeAndServeRefuseBadSetups: the node daemon never serves other
// hosts without a token, and the coordinator's membership flags are
// checked at start, each refusal naming the fix.
func TestNodeAndServeRefuseBadSetups(t *testing.T) {
	t.Setenv("PROBING_DATA_DIR", t.TempDir())
	t.Setenv("PROBING_MCP_HISTORY", "off")
	t.Setenv("PROBING_AUTH_TOKEN", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"node", "--http", "0.0.0.0:0"}, "set PROBING_AUTH_TOKEN"},
		{[]string{"node", "--http", "nonsense"}, "want host:port"},
		{[]string{"serve", "--peers", "a:1,b"}, "--peers"},
		{[]string{"serve", "--job", "nohostport"}, "want the job's TCPStore as host:port"},
	} {
		code, _, errOut := runCLI(c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d %q, want 2 and %q", c.args, code, errOut, c.want)
		}
	}
	t.Setenv("PROBING_FANOUT_CONCURRENCY", "lots")
	if code, _, errOut := runCLI("serve", "--peers", "127.0.0.1:9781"); code != 2 || !strings.Contains(errOut, "PROBING_FANOUT_CONCURRENCY") {
		t.Errorf("bad concurrency: exit %d %q", code, errOut)
	}
}
