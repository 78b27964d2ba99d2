package membership

import (
	"os"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/cluster"
)

func TestSelfNode(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	host, _ := os.Hostname()

	n, err := SelfNode(get, "10.0.0.5:9781")
	if err != nil || n.Addr != "10.0.0.5:9781" || n.Host != host || n.NodeRank != -1 || n.Kind != cluster.KindDaemon {
		t.Errorf("%+v %v", n, err)
	}
	env["MASTER_ADDR"] = "10.9.9.9"
	for _, wild := range []string{"0.0.0.0:9781", "[::]:9781", ":9781"} {
		_, err := SelfNode(get, wild)
		if err == nil || !strings.Contains(err.Error(), "PROBING_ADVERTISE_ADDR") || strings.Contains(err.Error(), "10.9.9.9") {
			t.Errorf("%s: %v", wild, err)
		}
	}
	env["PROBING_ADVERTISE_ADDR"] = " node-a.ib:9781 "
	env["PROBING_NODE_HOST"] = "node-a"
	env["SLURM_NODEID"] = "3"
	n, err = SelfNode(get, "0.0.0.0:9781")
	if err != nil || n.Addr != "node-a.ib:9781" || n.Host != "node-a" || n.NodeRank != 3 {
		t.Errorf("%+v %v", n, err)
	}
	env["GROUP_RANK"] = "2"
	if n, _ := SelfNode(get, ""); n.NodeRank != 2 {
		t.Errorf("GROUP_RANK first: %+v", n)
	}
	env["GROUP_RANK"] = "two"
	if _, err := SelfNode(get, ""); err == nil || !strings.Contains(err.Error(), "GROUP_RANK") {
		t.Errorf("bad rank: %v", err)
	}
	env["GROUP_RANK"] = "1"
	for _, bad := range []string{"node a", "a/b", "x\x1b[2J", strings.Repeat("n", cluster.MaxNodeName+1)} {
		env["PROBING_NODE_HOST"] = bad
		if _, err := SelfNode(get, ""); err == nil || !strings.Contains(err.Error(), "PROBING_NODE_HOST") || strings.Contains(err.Error(), "\x1b") {
			t.Errorf("node name %q: %v", bad, err)
		}
	}
	env["PROBING_NODE_HOST"] = " node-a "
	if n, err := SelfNode(get, "10.0.0.5:1"); err != nil || n.Host != "node-a" {
		t.Errorf("trimmed name: %+v %v", n, err)
	}
	for _, bad := range []string{"node-a", "0.0.0.0:9781", "node-a:0"} {
		env["PROBING_ADVERTISE_ADDR"] = bad
		if _, err := SelfNode(get, "10.0.0.5:1"); err == nil || !strings.Contains(err.Error(), "PROBING_ADVERTISE_ADDR") {
			t.Errorf("advertise %q: %v", bad, err)
		}
	}
	delete(env, "PROBING_ADVERTISE_ADDR")
	if _, err := SelfNode(get, "garbage"); err == nil {
		t.Error("garbage listen address")
	}
}
