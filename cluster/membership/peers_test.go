package membership

import (
	"strconv"
	"strings"
	"testing"
)

func TestParsePeers(t *testing.T) {
	ns, probs, err := ParsePeers(" node-a:9781 , [::1]:9000,10.0.0.3:1,,node-a:9781\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(ns) != 3 {
		t.Fatalf("%d nodes: %+v", len(ns), ns)
	}
	want := []struct{ host, addr string }{{"node-a", "node-a:9781"}, {"::1", "[::1]:9000"}, {"10.0.0.3", "10.0.0.3:1"}}
	for i, w := range want {
		n := ns[i]
		if n.Host != w.host || n.Addr != w.addr || n.NodeRank != i || n.Source != "peers" || n.Kind != "probing-mcp" {
			t.Errorf("node %d: %+v", i, n)
		}
	}
	if len(probs) != 1 || !strings.Contains(probs[0], "node-a:9781 more than once") {
		t.Errorf("problems %q", probs)
	}
	for _, bad := range []string{"node-a", "node-a:0", "node-a:70000", ":9781", "::1:9000", "a b:1", "h:port"} {
		_, _, err := ParsePeers("ok:1," + bad)
		if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "host:port") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if ns, _, err := ParsePeers("  "); err != nil || len(ns) != 0 {
		t.Errorf("empty: %v %v", ns, err)
	}
}

func TestParsePeersBounded(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 100000; i++ {
		b.WriteString("n")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(":")
		b.WriteString("9781,")
	}
	_, _, err := ParsePeers(b.String())
	if err == nil || !strings.Contains(err.Error(), "more than 16384") {
		t.Fatalf("100k entries: %v", err)
	}
	// Exactly MaxNodes distinct entries pass.
	b.Reset()
	for i := 0; i < MaxNodes; i++ {
		b.WriteString("10.0.")
		b.WriteString(itoa(i / 256))
		b.WriteString(".")
		b.WriteString(itoa(i % 256))
		b.WriteString(":9781,")
	}
	ns, probs, err := ParsePeers(b.String())
	if err != nil || len(ns) != MaxNodes || len(probs) != 0 {
		t.Fatalf("%d nodes, %d problems, %v", len(ns), len(probs), err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
