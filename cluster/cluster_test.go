package cluster

import (
	"os"
	"strings"
	"testing"
)

// TestNodeNameAndRankFromEnv: PROBING_NODE_HOST trimmed and checked (a
// hostile environment's name is refused, not used), GROUP_RANK before
// SLURM_NODEID, -1 when neither; HostName falls back to the hostname.
func TestNodeNameAndRankFromEnv(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	host, _ := os.Hostname()
	if h, err := NodeNameFromEnv(get); h != "" || err != nil {
		t.Errorf("unset: %q %v", h, err)
	}
	if r, err := NodeRankFromEnv(get); r != -1 || err != nil {
		t.Errorf("unset: %d %v", r, err)
	}
	env[EnvNodeHost] = "  node-7.cluster  "
	if h, err := NodeNameFromEnv(get); h != "node-7.cluster" || err != nil || HostName(get) != "node-7.cluster" {
		t.Errorf("set: %q %v %q", h, err, HostName(get))
	}
	for _, bad := range []string{"a b", "a\tb", "a/b", `a\b`, "u@h", "h?x", "h#x", "h\x01", "h\x7f", "h\xff", strings.Repeat("h", MaxNodeName+1)} {
		env[EnvNodeHost] = bad
		h, err := NodeNameFromEnv(get)
		if h != "" || err == nil || !strings.Contains(err.Error(), EnvNodeHost) || len(err.Error()) > 300 {
			t.Errorf("%q: %q %v", bad, h, err)
		}
		if HostName(get) != host {
			t.Errorf("%q: HostName %q, want the hostname %q", bad, HostName(get), host)
		}
	}
	env[EnvNodeHost] = strings.Repeat("h", MaxNodeName)
	if _, err := NodeNameFromEnv(get); err != nil {
		t.Errorf("%d bytes: %v", MaxNodeName, err)
	}
	env["SLURM_NODEID"] = " 3 "
	if r, err := NodeRankFromEnv(get); r != 3 || err != nil {
		t.Errorf("SLURM_NODEID: %d %v", r, err)
	}
	env["GROUP_RANK"] = "2"
	if r, err := NodeRankFromEnv(get); r != 2 || err != nil {
		t.Errorf("GROUP_RANK first: %d %v", r, err)
	}
	for _, bad := range []string{"two", "-1", "16777216", "1e3"} {
		env["GROUP_RANK"] = bad
		if r, err := NodeRankFromEnv(get); r != -1 || err == nil || !strings.Contains(err.Error(), "GROUP_RANK") {
			t.Errorf("%q: %d %v", bad, r, err)
		}
	}
}
