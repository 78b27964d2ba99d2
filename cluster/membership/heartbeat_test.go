package membership

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func put(t *testing.T, url, body string) (int, putReply, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url+"/apis/nodes", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var rep putReply
	json.Unmarshal(b, &rep)
	return resp.StatusCode, rep, string(b)
}

func TestRegistryHeartbeats(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	reg := NewRegistry(25*time.Second, clk.now)
	srv := httptest.NewServer(reg.Handler())
	defer srv.Close()

	n0 := `{"rank":0,"world_size":4,"group_rank":0,"local_rank":0,"host":"node-a","addr":"10.0.0.1:9922","role":null}`
	n1 := `{"rank":1,"world_size":4,"group_rank":0,"local_rank":1,"host":"node-a","addr":"10.0.0.1:9923"}`
	n2 := `{"rank":2,"world_size":4,"group_rank":1,"local_rank":0,"host":"node-b","addr":"10.0.0.2:9922"}`
	code, rep, body := put(t, srv.URL, `{"nodes":[`+n0+`,`+n1+`],"seen_version":0}`)
	if code != 200 || !rep.OK || rep.Version != 2 || len(rep.Nodes) != 2 || len(rep.Removed) != 0 {
		t.Fatalf("%d %s", code, body)
	}
	// Unchanged reports move nothing; a delta from version 2 has only n2.
	clk.add(20 * time.Second)
	code, rep, body = put(t, srv.URL, `{"nodes":[`+n2+`,`+n0+`],"seen_version":2}`)
	if rep.Version != 3 || len(rep.Nodes) != 1 || !strings.Contains(string(rep.Nodes[0]), "10.0.0.2") {
		t.Fatalf("delta: %s", body)
	}
	ns, probs := reg.Nodes()
	if len(ns) != 3 || len(probs) != 0 {
		t.Fatalf("%+v %q", ns, probs)
	}
	if ns[0].Addr != "10.0.0.1:9922" || ns[0].Ranks != "0" || ns[0].NodeRank != 0 || ns[0].Kind != "probing" || ns[0].Source != "heartbeat" || !ns[0].LastSeen.Equal(clk.now()) {
		t.Errorf("%+v", ns[0])
	}
	// n1 silent 30 s: stale; 50 s: removed, and said so in the next delta.
	clk.add(10 * time.Second)
	_, probs = reg.Nodes()
	if len(probs) != 1 || !strings.Contains(probs[0], "⟦node-a⟧ (10.0.0.1:9923) silent for 30s") {
		t.Errorf("stale: %q", probs)
	}
	clk.add(20 * time.Second)
	code, rep, body = put(t, srv.URL, `{"nodes":[`+n0+`,`+n2+`],"seen_version":3}`)
	if len(rep.Removed) != 1 || rep.Removed[0] != "node-a:10.0.0.1:9923" || len(rep.Nodes) != 0 || rep.Version != 4 {
		t.Errorf("removal: %s", body)
	}
	if ns, _ := reg.Nodes(); len(ns) != 2 {
		t.Errorf("after removal: %+v", ns)
	}
	// A stale seen_version from before a restart gets everything.
	_, rep, _ = put(t, srv.URL, `{"nodes":[],"seen_version":99}`)
	if len(rep.Nodes) != 2 {
		t.Errorf("future seen_version: %d nodes", len(rep.Nodes))
	}
	resp, _ := http.Get(srv.URL + "/apis/nodes?offset=1&limit=5")
	var list struct {
		Version       uint64
		Total, Offset int
		Nodes         []json.RawMessage
	}
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if list.Total != 2 || list.Offset != 1 || len(list.Nodes) != 1 || list.Version != 4 {
		t.Errorf("GET: %+v", list)
	}
	// Another endpoint claims rank 2 while its holder reports: refused and
	// said (issue 23: a heartbeat anyone can send dropped the real node's
	// ranks); the holder keeps it.
	n2moved := strings.Replace(n2, "10.0.0.2:9922", "10.0.0.2:9930", 1)
	_, rep, body = put(t, srv.URL, `{"nodes":[`+n2moved+`],"seen_version":4}`)
	if len(rep.Nodes) != 0 || len(rep.Removed) != 0 || len(rep.Refused) != 1 || rep.Refused[0] != "node-b:10.0.0.2:9930" {
		t.Errorf("claim of a held rank: %s", body)
	}
	if ns, probs := reg.Nodes(); len(ns) != 2 || ns[1].Addr != "10.0.0.2:9922" ||
		len(probs) != 1 || !strings.Contains(probs[0], `rank 2 claimed by ⟦node-b:10.0.0.2:9930⟧, which rank ⟦node-b:10.0.0.2:9922⟧ holds`) {
		t.Errorf("after the refused claim: %+v %q", ns, probs)
	}
	// Once the holder is stale (a restarted process on a new port), the
	// rank moves: the old endpoint is removed at once.
	clk.add(26 * time.Second)
	_, rep, body = put(t, srv.URL, `{"nodes":[`+n2moved+`],"seen_version":4}`)
	if len(rep.Refused) != 0 || len(rep.Removed) != 1 || rep.Removed[0] != "node-b:10.0.0.2:9922" {
		t.Errorf("moved rank: %s", body)
	}
	if ns, _ := reg.Nodes(); len(ns) != 2 || ns[1].Addr != "10.0.0.2:9930" {
		t.Errorf("after move: %+v", ns)
	}
}

func TestRegistryUntrusted(t *testing.T) {
	reg := NewRegistry(0, nil)
	srv := httptest.NewServer(reg.Handler())
	defer srv.Close()
	for name, body := range map[string]string{
		"garbage": "{nope",
		"badaddr": `{"nodes":[{"rank":0,"addr":"nowhere"}]}`,
		"notobj":  `{"nodes":[5]}`,
		"huge":    `{"nodes":[` + strings.Repeat(`{"addr":"a:1"},`, MaxHeartbeatBody/14) + `{"addr":"a:1"}]}`,
	} {
		if code, _, b := put(t, srv.URL, body); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", name, code, b)
		}
	}
	// issue 23: one report of 5,000 members (under 1 MiB), and a host name
	// with a newline, register nothing.
	var many []string
	for i := 0; i < 5000; i++ {
		many = append(many, fmt.Sprintf(`{"rank":%d,"addr":"10.0.%d.%d:9922"}`, i, i/250, i%250))
	}
	if code, _, b := put(t, srv.URL, `{"nodes":[`+strings.Join(many, ",")+`]}`); code != http.StatusRequestEntityTooLarge || !strings.Contains(b, "over the 4096 one report may carry") {
		t.Errorf("5,000 members: %d %.200s", code, b)
	}
	if code, _, b := put(t, srv.URL, `{"nodes":[{"rank":0,"addr":"10.0.0.1:1","host":"evil\nSYSTEM"}]}`); code != http.StatusBadRequest || !strings.Contains(b, "host") {
		t.Errorf("bad host: %d %s", code, b)
	}
	if resp, err := http.Post(srv.URL+"/apis/nodes", "application/json", bytes.NewReader(nil)); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("empty POST: %v %v", resp, err)
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL, nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: %v %v", resp, err)
	}
	if ns, _ := reg.Nodes(); len(ns) != 0 {
		t.Errorf("bad reports registered: %+v", ns)
	}
	for v, ok := range map[string]bool{"": true, "40": true, "0": false, "x": false} {
		d, err := StaleAfter(func(string) string { return v })
		if (err == nil) != ok || (v == "" && d != 25*time.Second) || (v == "40" && d != 40*time.Second) {
			t.Errorf("StaleAfter(%q) = %v %v", v, d, err)
		}
	}
}
