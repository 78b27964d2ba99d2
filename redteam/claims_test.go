package redteam

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// Rank claims (issue 23): anyone who reaches the job's store can register
// a node, and anyone on loopback can send a heartbeat.

// fanoutTime bounds a whole-job call: the fan-out's deadline
// (PROBING_STACK_FANOUT_DEADLINE_SEC, 10 s by default) with room for a
// busy machine.
const fanoutTime = 40 * time.Second

// forged is the frame the hostile node puts on rank 1's main thread.
const forged = "forged_culprit_frame"

// honestAndForger starts two fake nodes registered in a fake store: an
// honest node-a holding ranks 0-1 and a hostile node-b that registered
// hostileRanks ("" for none) and answers for rank 1 too, with a forged
// frame, before node-a answers (node-a waits, per request, until node-b
// has answered, and a little more; the assertions hold in either order,
// this only makes the attack's best case the one tried).
func honestAndForger(t *testing.T, hostileRanks string) (*fakeStore, *fakeNode, *fakeNode) {
	t.Helper()
	var mu sync.Mutex
	answered := map[string]chan struct{}{node.PathStacks: make(chan struct{}, 16), node.PathEvidence: make(chan struct{}, 16)}
	after := func(path string) {
		select {
		case <-answered[path]:
			time.Sleep(200 * time.Millisecond)
		case <-time.After(5 * time.Second):
		}
	}
	hostile := newFakeNode(t, "node-b", 1, []int{1, 2, 3}, map[string]http.HandlerFunc{
		node.PathStacks: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, node.StacksReply{Processes: []stacks.Process{
				rankProcess(1, "/evil/pwn.py", 666, forged), rankProcess(2, "/job/train.py", 40, "all_reduce"), rankProcess(3, "/job/train.py", 40, "all_reduce")}})
			mu.Lock()
			answered[node.PathStacks] <- struct{}{}
			mu.Unlock()
		},
		node.PathEvidence: func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, evidenceReply(4, rankEvidence(1, "/evil/pwn.py", 666, forged),
				rankEvidence(2, "/job/train.py", 40, "all_reduce"), rankEvidence(3, "/job/train.py", 40, "all_reduce")))
			mu.Lock()
			answered[node.PathEvidence] <- struct{}{}
			mu.Unlock()
		},
	})
	honest := newFakeNode(t, "node-a", 0, []int{0, 1}, map[string]http.HandlerFunc{
		node.PathStacks: func(w http.ResponseWriter, r *http.Request) {
			after(node.PathStacks)
			writeJSON(w, node.StacksReply{Processes: []stacks.Process{
				rankProcess(0, "/job/train.py", 40, "all_reduce"), rankProcess(1, "/job/data.py", 12, "honest_loader_wait")}})
		},
		node.PathEvidence: func(w http.ResponseWriter, r *http.Request) {
			after(node.PathEvidence)
			writeJSON(w, evidenceReply(4, rankEvidence(0, "/job/train.py", 40, "all_reduce"), rankEvidence(1, "/job/data.py", 12, "honest_loader_wait")))
		},
	})
	hostile.node.Ranks = hostileRanks
	store := newFakeStore(t)
	store.register(honest.node, hostile.node)
	return store, honest, hostile
}

// TestForgedRankAnswersFirst. Attack: a node the attacker registered in
// the job's store answers first, and for rank 1 too, with a forged frame.
// Before (b2aa69a): its frames were shown as rank 1's culprit frame and
// stored in history. Bound: get_stacks and diagnose_hang never show the
// forged frame and the history keeps none of it; the answer says the node
// answered for a rank membership registered to another; under 512 MB,
// each call within the fan-out's deadline (40 s allowed).
//
// Ownership is settled once every answer is in, never first-come: a slot
// that registers other ranks (2-3) or none may not speak for rank 1,
// which the honest node registered; a slot that registers rank 1 too makes
// rank 1 refused for both nodes, and said (its evidence is not believed
// from either).
func TestForgedRankAnswersFirst(t *testing.T) {
	for _, c := range []struct {
		name, ranks, said string
	}{
		{"registered_other_ranks", "2-3", "answered for ranks 1, which membership registered to no rank of it"},
		{"registered_no_ranks", "", "answered for ranks 1, which other nodes registered: dropped"},
		{"registered_rank_1_too", "1", "2 nodes answered for it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			forgedRank(t, c.ranks, c.said)
		})
	}
}

// forgedRank runs the attack with the hostile node registering
// hostileRanks; the answers must say want.
func forgedRank(t *testing.T, hostileRanks, want string) {
	store, honest, _ := honestAndForger(t, hostileRanks)
	data := t.TempDir()
	c := serveStdio(t, env(t, data, "TORCHELASTIC_RUN_ID="+runID), "--job", store.addr())
	var slowest time.Duration
	for _, tool := range []string{"get_stacks", "diagnose_hang"} {
		r := c.call(tool, map[string]any{}, fanoutTime)
		slowest = max(slowest, r.Took)
		if r.IsError {
			t.Errorf("%s failed: %.1000s", tool, r.Text)
			continue
		}
		if strings.Contains(r.Text, forged) || strings.Contains(string(r.Structured), forged) {
			t.Errorf("%s shows the forged frame:\n%s", tool, tail(r.Text, 3000))
		}
		mustContain(t, tool, r.Text, want)
		said(t, r.Text, want)
	}
	if honest.hits.Load() == 0 {
		t.Error("the honest node was never asked")
	}
	c.close()
	bounded(t, "forged rank 1 answering first: "+t.Name(), c.p, slowest, fanoutTime)
	// The coordinator's history, read by a server of this node's scope on
	// its data dir: captures were stored, none holds the forged frame.
	l := serveStdio(t, env(t, data))
	defer l.close()
	h := l.call("query", map[string]any{"sql": "SELECT (SELECT count(*) FROM history.stack_captures WHERE stacks_json LIKE '%" + forged + "%') + " +
		"(SELECT count(*) FROM history.diagnoses WHERE report_json LIKE '%" + forged + "%') AS forged_rows, " +
		"(SELECT count(*) FROM history.stack_captures) AS captures"}, toolTime)
	if h.IsError || !strings.Contains(h.Text, "forged_rows | captures\n0 | ") || strings.Contains(h.Text, "0 | 0\n") {
		t.Errorf("the history: want captures and none of the forged frame:\n%s", h.Text)
	}
}

// heartbeatServer is `serve --http` on loopback in the whole job's scope
// with a token (an agent's heartbeat carries the job's token), its MCP
// URL and heartbeat URL.
func heartbeatServer(t *testing.T) (p *proc, mcpURL, beatURL string, token string) {
	t.Helper()
	honest := newFakeNode(t, "node-a", 0, []int{0, 1}, nil)
	token = "redteam-token"
	p = start(t, env(t, t.TempDir(), "PROBING_AUTH_TOKEN="+token), nil, "serve", "--http", "127.0.0.1:0", "--peers", honest.node.Addr)
	m := p.logLine(regexp.MustCompile(`msg="MCP HTTP server listening" addr=(\S+)`), startTime)
	return p, "http://" + m[1] + "/mcp", "http://" + m[1] + "/apis/nodes", token
}

// heartbeat PUTs one report; it returns the status and the body.
func heartbeat(t *testing.T, url, token string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := (&http.Client{Timeout: startTime}).Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, string(b)
}

func beatOf(members ...map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"nodes": members, "seen_version": 0})
	return b
}

// TestHeartbeatFlood. Attack: one heartbeat (PUT /apis/nodes) listing
// 20,000 members. Before (b2aa69a): it made 16,384 fake nodes. Bound:
// refused with 413 naming the count and the limit; no member is added;
// under 512 MB, the answer within 60 s.
func TestHeartbeatFlood(t *testing.T) {
	p, _, beatURL, token := heartbeatServer(t)
	members := make([]map[string]any, 20000)
	for i := range members {
		// Compact, so that the report fits the 1 MiB body limit and the
		// member count is what is tried.
		members[i] = map[string]any{"addr": fmt.Sprintf("127.0.0.1:%d", 1+i), "rank": i}
	}
	t0 := time.Now()
	code, body := heartbeat(t, beatURL, token, beatOf(members...))
	took := time.Since(t0)
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("20,000 members: %d %.300s, want 413", code, body)
	}
	mustContain(t, "the refusal", body, "20000 members in one report", "4096", "refused")
	said(t, body, "members")
	res, err := http.Get(strings.Replace(beatURL, "http://", "http://x:"+token+"@", 1))
	if err == nil {
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if strings.Contains(string(b), `"addr":"127.0.0.1:`) {
			t.Errorf("members of the refused report were kept: %.300s", b)
		}
	}
	if code := p.stop(); code != 0 {
		t.Errorf("serve exited %d on SIGTERM", code)
	}
	bounded(t, "heartbeat with 20,000 members", p, took, startTime)
}

// TestHeartbeatConflictingClaim. Attack: a heartbeat from another
// endpoint claiming rank 1, which a live member holds. Before (b2aa69a):
// it took the rank and dropped the real node's ranks until the server
// restarted. Bound: refused in the reply and said as a membership problem
// by list_cluster_nodes; the holder keeps the rank; under 512 MB, each
// answer within 60 s.
func TestHeartbeatConflictingClaim(t *testing.T) {
	p, mcpURL, beatURL, token := heartbeatServer(t)
	real := map[string]any{"host": "node-a", "addr": "127.0.0.1:9931", "rank": 1}
	if code, body := heartbeat(t, beatURL, token, beatOf(real)); code != 200 {
		t.Fatalf("the holder's heartbeat: %d %.300s", code, body)
	}
	t0 := time.Now()
	code, body := heartbeat(t, beatURL, token, beatOf(map[string]any{"host": "evil", "addr": "127.0.0.1:9666", "rank": 1}))
	took := time.Since(t0)
	if code != 200 || !strings.Contains(body, `"refused":["evil:127.0.0.1:9666"]`) {
		t.Errorf("the conflicting claim: %d %.500s, want it refused in the reply", code, body)
	}
	// The holder reports again and is still the one listed.
	heartbeat(t, beatURL, token, beatOf(real))
	r := httpTool(t, mcpURL, token, "list_cluster_nodes", map[string]any{}, fanoutTime)
	all := r.Text + string(r.Structured)
	mustContain(t, "list_cluster_nodes", all, `rank 1 claimed by ⟦evil:127.0.0.1:9666⟧, which rank ⟦node-a:127.0.0.1:9931⟧ holds`, "refused")
	said(t, strings.ReplaceAll(all, `","`, "\n"), "rank 1 claimed by")
	if strings.Contains(all, `"addr":"127.0.0.1:9666"`) {
		t.Errorf("the refused claimant is listed as a node:\n%s", tail(all, 3000))
	}
	if code := p.stop(); code != 0 {
		t.Errorf("serve exited %d on SIGTERM", code)
	}
	bounded(t, "conflicting heartbeat claim", p, max(took, r.Took), startTime)
}

// TestTokenlessHeartbeatOnLoopback. Attack: a heartbeat (PUT
// /apis/nodes) without a token, from loopback (where every local user
// reaches), to `serve --http 127.0.0.1` without PROBING_AUTH_TOKEN in the
// whole job's scope, claiming the real node's ranks 0-1 for another
// address. Before (b2aa69a): accepted; it dropped the real node's ranks
// until the server restarted. Bound: refused with 401 naming
// PROBING_AUTH_TOKEN (and the member list is not served either);
// list_cluster_nodes still shows the real node's ranks and nothing of the
// claimant; under 512 MB, each answer within 60 s. (A conflicting claim
// with the token is TestHeartbeatConflictingClaim.)
func TestTokenlessHeartbeatOnLoopback(t *testing.T) {
	honest := newFakeNode(t, "node-a", 0, []int{0, 1}, nil)
	p := start(t, env(t, t.TempDir()), nil, "serve", "--http", "127.0.0.1:0", "--peers", honest.node.Addr)
	m := p.logLine(regexp.MustCompile(`msg="MCP HTTP server listening" addr=(\S+)`), startTime)
	mcpURL, beatURL := "http://"+m[1]+"/mcp", "http://"+m[1]+"/apis/nodes"
	claim := beatOf(map[string]any{"host": "evil", "addr": "127.0.0.1:9666", "rank": 0}, map[string]any{"host": "evil", "addr": "127.0.0.1:9666", "rank": 1})
	var slowest time.Duration
	for _, method := range []string{http.MethodPut, http.MethodGet} {
		req, _ := http.NewRequest(method, beatURL, strings.NewReader(string(claim)))
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		res, err := (&http.Client{Timeout: startTime}).Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, beatURL, err)
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		res.Body.Close()
		slowest = max(slowest, time.Since(t0))
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("tokenless %s /apis/nodes on loopback: %d %.300s, want 401", method, res.StatusCode, b)
		}
		mustContain(t, "the refusal", string(b), "heartbeats need PROBING_AUTH_TOKEN, loopback included")
		said(t, string(b), "PROBING_AUTH_TOKEN")
	}
	r := httpTool(t, mcpURL, "", "list_cluster_nodes", map[string]any{}, fanoutTime)
	all := r.Text + string(r.Structured)
	mustContain(t, "list_cluster_nodes", r.Text, honest.node.Addr+" node_rank 0 ranks 0-1: ok", "1 node(s): 1 answered")
	if strings.Contains(all, "9666") || strings.Contains(all, "evil") {
		t.Errorf("the tokenless claimant is listed:\n%s", tail(all, 3000))
	}
	mustContain(t, "serve's log", p.stderr.String(), "heartbeats (PUT /apis/nodes) refused: they need PROBING_AUTH_TOKEN")
	if code := p.stop(); code != 0 {
		t.Errorf("serve exited %d on SIGTERM", code)
	}
	bounded(t, "tokenless heartbeat on loopback", p, max(slowest, r.Took), startTime)
}

// TestStoreReadEveryCall. Attack: 4,000 slots planted in the job's store
// beside one honest node's: node entries of a hundred bytes naming
// addresses where nothing listens (each asked, and missing), or whose
// address is no address (each skipped with a problem line). Before
// (b2aa69a): every call re-read the whole store, 2-5 s per call. Bound:
// the store is read by the first call only (its GETs counted at the fake
// store); the next calls within the cache's 10 s reuse it and say its age
// ("membership as read Ns ago", once N is a second or more); the honest
// node is listed by each; under 512 MB, each call within 40 s.
func TestStoreReadEveryCall(t *testing.T) {
	t.Run("unreachable_slots", func(t *testing.T) {
		storeReadOnce(t, func(i int) (string, string) {
			// 127.0.0.0/8 beyond .1, port 9 (discard): refused at once.
			return fmt.Sprintf("127.%d.%d.%d:9", 1+i>>16, i>>8&255, i&255), "4001 node(s): 1 answered, 4000 did not"
		})
	})
	t.Run("skipped_slots", func(t *testing.T) {
		storeReadOnce(t, func(i int) (string, string) {
			return fmt.Sprintf("planted-slot-%d", i), `address ⟦planted-slot-`
		})
	})
}

// storeReadOnce runs the attack with the planted slots' addresses from
// addr (and what the answer says of them, seen).
func storeReadOnce(t *testing.T, addr func(i int) (a, seen string)) {
	const planted = 4000
	honest := newFakeNode(t, "node-a", 0, []int{0, 1}, nil)
	store := newFakeStore(t)
	var seen string
	for i := 0; i < planted; i++ {
		a, s := addr(i)
		seen = s
		b, _ := json.Marshal(map[string]any{"host": fmt.Sprintf("evil-%d", i), "addr": a, "node_rank": 1 + i, "ranks": fmt.Sprint(2 + i)})
		store.set(fmt.Sprintf("probing-mcp/%s/node/%d", runID, i), b)
	}
	store.set("probing-mcp/"+runID+"/nodes", []byte(fmt.Sprint(planted)))
	store.register(honest.node)
	c := serveStdio(t, env(t, t.TempDir(), "TORCHELASTIC_RUN_ID="+runID), "--job", store.addr())
	age := regexp.MustCompile(`membership as read (\d+)s ago \(the job's store is re-read every 10s\)`)
	var first int64
	var slowest time.Duration
	var ageMissing []string
	for call := 1; call <= 3; call++ {
		if call == 2 {
			// The age is said from a second on: a content check, not a
			// timing margin.
			time.Sleep(1100 * time.Millisecond)
		}
		before := store.gets.Load()
		// Only the nodes that answered are listed (the planted ones would
		// fill the first pages), but every node is asked.
		r := c.call("list_cluster_nodes", map[string]any{"status": "ok"}, fanoutTime)
		gets := store.gets.Load() - before
		slowest = max(slowest, r.Took)
		all := r.Text + string(r.Structured)
		t.Logf("call %d: %.2f s, %d store GETs, %d bytes of text", call, r.Took.Seconds(), gets, len(r.Text))
		mustContain(t, "list_cluster_nodes", r.Text, "⟦node-a⟧ "+honest.node.Addr+" node_rank 0 ranks 0,1: ok")
		mustContain(t, "list_cluster_nodes", all, seen)
		if call == 1 {
			first = gets
			if gets < planted {
				t.Errorf("the first call read %d keys of the store, want every slot (%d)", gets, planted+1)
			}
			continue
		}
		if gets != 0 {
			t.Errorf("call %d re-read the store: %d GETs (the first call made %d)", call, gets, first)
		}
		if m := age.FindStringSubmatch(all); m == nil || m[1] == "0" {
			ageMissing = append(ageMissing, fmt.Sprintf("call %d:\n%s", call, tail(r.Text, 1500)))
		} else {
			said(t, strings.ReplaceAll(all, `","`, "\n"), "membership as read")
		}
	}
	c.close()
	bounded(t, "4,000 planted store slots, three calls: "+t.Name(), c.p, slowest, fanoutTime)
	t.Run("age_said", func(t *testing.T) {
		for _, m := range ageMissing {
			t.Errorf("the membership's age is not said: %s", m)
		}
	})
}
