package redteam

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/hmacauth"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// The job's token (issue 23): an address learnt from the job's store, a
// heartbeat or a saved membership file only says where to look; the token
// proves itself without travelling (internal/hmacauth), so such an
// address learns nothing, and a node counts once its answers prove it
// holds the token too.

// jobToken is the job's PROBING_AUTH_TOKEN in these attacks.
const jobToken = "redteam-job-token-2f6c1d"

// captured is one request as it reached an address: what an eavesdropper
// keeps to steal the token or to send again.
type captured struct {
	Method, URI, Host string
	Header            http.Header
	Body              []byte
}

// capture reads a request whole (its body bounded) and keeps it.
func capture(r *http.Request) captured {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	return captured{Method: r.Method, URI: r.URL.RequestURI(), Host: r.Host, Header: r.Header.Clone(), Body: b}
}

// planted is an address the attacker put in the job's membership: an
// in-process listener that records every request (headers and body) and
// answers as a node daemon holding ranks would, with a forged frame on
// each; sign says how it signs its answers: "" not at all, "echo" with
// the request's own signature (what it could try without the key).
type planted struct {
	srv  *httptest.Server
	node cluster.Node
	sign string
	mu   sync.Mutex
	got  []captured
}

func newPlanted(t *testing.T, host string, nodeRank int, sign string, ranks ...int) *planted {
	t.Helper()
	p := &planted{sign: sign}
	var procs []stacks.Process
	var evs []*evidence.RankEvidence
	var infos []node.RankInfo
	for i, rk := range ranks {
		procs = append(procs, rankProcess(rk, "/evil/pwn.py", 666, forged))
		evs = append(evs, rankEvidence(rk, "/evil/pwn.py", 666, forged))
		infos = append(infos, node.RankInfo{Rank: rk, LocalRank: i, PID: 1000 + rk, Alive: true, Kind: "probing-mcp"})
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := capture(r)
		p.mu.Lock()
		if len(p.got) < 1000 {
			p.got = append(p.got, c)
		}
		p.mu.Unlock()
		var v any
		switch r.URL.Path {
		case node.PathInfo:
			v = node.Info{Node: p.node, Version: "planted", NowNS: time.Now().UnixNano(), World: 4, Ranks: infos}
		case node.PathStacks:
			v = node.StacksReply{Processes: procs}
		case node.PathEvidence:
			v = evidenceReply(4, evs...)
		default:
			v = map[string]string{"status": "ok"}
		}
		if p.sign == "echo" {
			if s, err := hmacauth.Parse(r.Header.Get("Authorization")); err == nil {
				w.Header().Set(hmacauth.ResponseHeader, s.Sig)
			}
		}
		writeJSON(w, v)
	}))
	t.Cleanup(p.srv.Close)
	p.node = cluster.Node{Host: host, Addr: strings.TrimPrefix(p.srv.URL, "http://"), NodeRank: nodeRank, Ranks: rankRange(ranks), Kind: cluster.KindDaemon}
	return p
}

func (p *planted) requests() []captured {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]captured(nil), p.got...)
}

// learntNothing asserts that the planted address was asked (else the
// attack was not tried) and that nothing it received (request line, Host,
// headers, body) holds the token, the signing key derived from it (as
// hmacauth derives it: HMAC-SHA256 keyed with the token), or a bearer or
// basic credential.
func (p *planted) learntNothing(t *testing.T) {
	t.Helper()
	got := p.requests()
	if len(got) == 0 {
		t.Errorf("the planted address %s was never asked: the attack was not tried", p.node.Addr)
	}
	m := hmac.New(sha256.New, []byte(jobToken))
	m.Write([]byte("probing-mcp hmac key v1"))
	key := m.Sum(nil)
	secrets := [][]byte{[]byte(jobToken), key, []byte(hex.EncodeToString(key)), []byte(base64.StdEncoding.EncodeToString([]byte(jobToken)))}
	leaks := 0
	for _, c := range got {
		var all bytes.Buffer
		all.WriteString(c.Method + " " + c.URI + "\nHost: " + c.Host + "\n")
		c.Header.Write(&all)
		all.Write(c.Body)
		for _, s := range secrets {
			if bytes.Contains(all.Bytes(), s) {
				leaks++
				t.Errorf("the token (or its key) reached the planted address in %s %s:\n%.2000s", c.Method, c.URI, all.Bytes())
			}
		}
		for k, vs := range c.Header {
			for _, v := range vs {
				lv := strings.ToLower(strings.TrimSpace(v))
				if strings.HasPrefix(lv, "bearer") || strings.HasPrefix(lv, "basic") || strings.EqualFold(k, "X-Probing-Token") {
					leaks++
					t.Errorf("a credential reached the planted address: %s: %.200s", k, v)
				}
			}
		}
	}
	t.Logf("the planted address %s got %d request(s), %d with the token or a credential", p.node.Addr, len(got), leaks)
}

// daemon is a real `probing-mcp node` with the job's token, named
// node-real, on its own data dir; extra adds to its environment. It
// returns the process and the address it listens at (listen, or one it
// picks when listen is "").
func daemon(t *testing.T, listen string, extra ...string) (*proc, string) {
	t.Helper()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	p := start(t, env(t, t.TempDir(), append([]string{"PROBING_AUTH_TOKEN=" + jobToken, "PROBING_NODE_HOST=node-real"}, extra...)...),
		nil, "node", "--http", listen, "--no-register", "--idle-exit", "0")
	addr := p.logLine(serving, startTime)[1]
	if !strings.HasSuffix(listen, ":0") {
		addr = listen
	}
	return p, addr
}

// realNode is the daemon's entry in the job's membership: no ranks (it
// runs no agent here), node rank 0.
func realNode(addr string) cluster.Node {
	return cluster.Node{Host: "node-real", Addr: addr, NodeRank: 0, Kind: cluster.KindDaemon}
}

// theftTools are the calls of the attack: each asks every node.
var theftTools = []string{"list_cluster_nodes", "get_stacks", "diagnose_hang"}

// notCounted asserts the answers list each planted address as not
// counted, with the reason, never show its forged frames, and count the
// real daemon at real (with the token, only an answer signed with it
// counts).
func notCounted(t *testing.T, tool string, r toolResult, real string, ps ...*planted) {
	t.Helper()
	all := r.Text + string(r.Structured)
	if r.IsError {
		t.Errorf("%s failed: %.2000s", tool, r.Text)
	}
	if strings.Contains(all, forged) {
		t.Errorf("%s shows a planted node's forged frame:\n%s", tool, tail(r.Text, 3000))
	}
	for _, p := range ps {
		want := "not counted: the answer is not signed: whoever answered did not prove it holds the job's PROBING_AUTH_TOKEN"
		if p.sign == "echo" {
			want = "not counted: the answer's signature is wrong: whoever answered does not hold the job's PROBING_AUTH_TOKEN"
		}
		mustContain(t, tool, all, p.node.Addr, want)
		said(t, strings.ReplaceAll(all, `","`, "\n"), want[:40])
	}
	if tool == "list_cluster_nodes" {
		mustContain(t, tool, r.Text, "⟦node-real⟧ "+real+" node_rank 0 ranks -: ok", fmt.Sprintf("%d node(s): 1 answered", len(ps)+1))
	} else {
		mustContain(t, tool, all, fmt.Sprintf("1/%d node(s) answered", len(ps)+1))
	}
}

// TestTokenTheftThroughStore. Attack: node slots planted in the job's
// TCPStore (anyone who reaches MASTER_ADDR:MASTER_PORT can write one)
// naming the attacker's addresses, beside a real node daemon's; the
// coordinator (serve --job) runs with PROBING_AUTH_TOKEN. One planted
// address answers unsigned, the other with the request's own signature
// echoed. Before (b2aa69a): serve --job sent Authorization: Bearer
// <PROBING_AUTH_TOKEN> to the planted address on its first call
// (/v1/node, /v1/stacks), and its answers counted. Bound: nothing a
// planted address receives (headers or body) holds the token, the key
// derived from it or a bearer credential; each is listed as not counted, with the reason (it did not
// prove it holds the token), and its forged frames are never shown; the
// real daemon answers, signed; under 512 MB, each call within the
// fan-out's deadline (40 s allowed).
func TestTokenTheftThroughStore(t *testing.T) {
	d, addr := daemon(t, "")
	unsigned, echo := newPlanted(t, "evil-a", 1, "", 0, 1), newPlanted(t, "evil-b", 2, "echo", 2, 3)
	store := newFakeStore(t)
	store.register(realNode(addr), unsigned.node, echo.node)
	c := serveStdio(t, env(t, t.TempDir(), "TORCHELASTIC_RUN_ID="+runID, "PROBING_AUTH_TOKEN="+jobToken), "--job", store.addr())
	var slowest time.Duration
	for _, tool := range theftTools {
		r := c.call(tool, map[string]any{}, fanoutTime)
		slowest = max(slowest, r.Took)
		notCounted(t, tool, r, addr, unsigned, echo)
	}
	c.close()
	unsigned.learntNothing(t)
	echo.learntNothing(t)
	if strings.Contains(d.stderr.String(), "node API request refused") {
		t.Errorf("the real daemon refused the coordinator:\n%s", tail(d.stderr.String(), 2000))
	}
	bounded(t, "token theft through the store", c.p, slowest, fanoutTime)
}

// TestTokenTheftThroughSavedFile. Attack: the job's store is down and the
// coordinator falls back on the membership it saved
// (<data dir>/probing-mcp/cluster/<run>.json), a file it does load (its
// own user's, 0600, in its private directory: a stale but legitimate
// file) whose addresses are now taken by the attacker. Before (b2aa69a): the token
// was sent there (and the file was loaded whoever wrote it; that a file
// of another user is not loaded is TestSavedMembershipPlanted). Bound:
// the planted addresses learn nothing of the token and are not counted,
// with the reason; the real daemon the file also names answers; under
// 512 MB, each call within 40 s.
func TestTokenTheftThroughSavedFile(t *testing.T) {
	_, addr := daemon(t, "")
	unsigned, echo := newPlanted(t, "evil-a", 1, "", 0, 1), newPlanted(t, "evil-b", 2, "echo", 2, 3)
	data := t.TempDir()
	saved := filepath.Join(data, "probing-mcp", "cluster", runID+".json")
	if err := os.MkdirAll(filepath.Dir(saved), 0o700); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal([]cluster.Node{realNode(addr), unsigned.node, echo.node})
	if err := os.WriteFile(saved, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c := serveStdio(t, env(t, data, "TORCHELASTIC_RUN_ID="+runID, "PROBING_AUTH_TOKEN="+jobToken), "--job", freePort(t))
	var slowest time.Duration
	for _, tool := range theftTools {
		r := c.call(tool, map[string]any{}, fanoutTime)
		slowest = max(slowest, r.Took)
		notCounted(t, tool, r, addr, unsigned, echo)
		if tool == "list_cluster_nodes" {
			mustContain(t, tool, r.Text+string(r.Structured), "using the membership last saved")
		}
	}
	c.close()
	unsigned.learntNothing(t)
	echo.learntNothing(t)
	bounded(t, "token theft through a saved membership file", c.p, slowest, fanoutTime)
}

// relay is a hop on the way to a node daemon (a NAT, a proxy, a switch
// port the attacker mirrors): it forwards each request to the daemon and
// keeps a copy of it, and counts the answers that came back signed.
type relay struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []captured
	signed int
}

func newRelay(t *testing.T, to string) *relay {
	t.Helper()
	rl := &relay{}
	hc := &http.Client{Timeout: startTime}
	rl.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := capture(r)
		res, err := send(hc, to, c, c.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<20))
		rl.mu.Lock()
		if len(rl.got) < 1000 {
			rl.got = append(rl.got, c)
		}
		if res.Header.Get(hmacauth.ResponseHeader) != "" {
			rl.signed++
		}
		rl.mu.Unlock()
		for k, vs := range res.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(res.StatusCode)
		w.Write(b)
	}))
	t.Cleanup(rl.srv.Close)
	return rl
}

func (rl *relay) addr() string { return strings.TrimPrefix(rl.srv.URL, "http://") }

// send sends a captured request again, to addr, with body: its method,
// request-target and headers as they were (Host is addr's, as the
// attacker's client would send it).
func send(hc *http.Client, addr string, c captured, body []byte) (*http.Response, error) {
	req, err := http.NewRequest(c.Method, "http://"+addr+c.URI, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range c.Header {
		if !strings.EqualFold(k, "Content-Length") {
			req.Header[k] = vs
		}
	}
	return hc.Do(req)
}

// replay sends c again to addr with body and returns the status and the
// answer.
func replay(t *testing.T, addr string, c captured, body []byte) (int, string) {
	t.Helper()
	res, err := send(&http.Client{Timeout: startTime}, addr, c, body)
	if err != nil {
		t.Fatalf("replaying %s %s to %s: %v", c.Method, c.URI, addr, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, string(b)
}

// TestHMACReplay. Attack: a signed request between the coordinator and a
// node daemon, captured on its way (a relay the daemon is reached
// through, as behind a NAT: it advertises the relay's address), sent to
// the daemon again as it was, with its body changed, or (one the
// coordinator sent to a planted address) relayed to the daemon; and the
// same against a Python agent's TCP listener, which takes the same
// signed scheme. Before (b2aa69a): the bearer token itself travelled, so
// a captured request was as good as the token. Bound: each is refused,
// and says why: an exact replay 401 "nonce was used before", a changed
// body 401 "signature is wrong", a request signed for another address
// 403 "relayed"; nothing of the job in the refusal; the coordinator's own
// requests through the relay are served and their answers signed; under
// 512 MB, each answer within 60 s.
func TestHMACReplay(t *testing.T) {
	listen := freePort(t)
	rl := newRelay(t, listen)
	d, _ := daemon(t, listen, "PROBING_ADVERTISE_ADDR="+rl.addr())
	evil := newPlanted(t, "evil-a", 1, "", 0, 1)
	store := newFakeStore(t)
	store.register(realNode(rl.addr()), evil.node)
	c := serveStdio(t, env(t, t.TempDir(), "TORCHELASTIC_RUN_ID="+runID, "PROBING_AUTH_TOKEN="+jobToken), "--job", store.addr())
	for _, tool := range []string{"list_cluster_nodes", "get_stacks"} {
		r := c.call(tool, map[string]any{}, fanoutTime)
		notCounted(t, tool, r, rl.addr(), evil)
	}
	c.close()
	rl.mu.Lock()
	got, signed := append([]captured(nil), rl.got...), rl.signed
	rl.mu.Unlock()
	if signed == 0 || signed != len(got) {
		t.Errorf("%d of the %d answers through the relay were signed, want all", signed, len(got))
	}
	var stacksReq *captured
	for i := range got {
		if got[i].URI == node.PathStacks {
			stacksReq = &got[i]
		}
	}
	fromPlanted := evil.requests()
	if stacksReq == nil || len(fromPlanted) == 0 {
		t.Fatalf("nothing to replay: the relay saw %d request(s), the planted address %d", len(got), len(fromPlanted))
	}
	if !hmacauth.IsSigned(stacksReq.Header.Get("Authorization")) {
		t.Fatalf("the coordinator's request is not signed: %v", stacksReq.Header)
	}
	changed := []byte(`{"ranks":"0"}`)
	if bytes.Equal(changed, stacksReq.Body) {
		changed = []byte(`{"ranks":"1"}`)
	}
	var slowest time.Duration
	for _, a := range []struct {
		name   string
		req    captured
		body   []byte
		status int
		want   string
	}{
		{"exact replay", *stacksReq, stacksReq.Body, 401, "the request's nonce was used before: a replayed request is refused"},
		{"body changed", *stacksReq, changed, 401, "the request's signature is wrong"},
		{"relayed from the planted address", fromPlanted[0], fromPlanted[0].Body, 403, "the request was signed for " + evil.node.Addr + ", which is not this listener: relayed by another address?"},
	} {
		t0 := time.Now()
		code, body := replay(t, listen, a.req, a.body)
		slowest = max(slowest, time.Since(t0))
		if code != a.status {
			t.Errorf("%s to the daemon: %d %.300s, want %d", a.name, code, body, a.status)
		}
		mustContain(t, a.name+"'s refusal", body, a.want)
		said(t, body, a.want[:20])
		if strings.Contains(body, "processes") {
			t.Errorf("%s: the refusal tells of the job: %.300s", a.name, body)
		}
	}
	mustContain(t, "the daemon's log", d.stderr.String(), "node API request refused")
	bounded(t, "HMAC replay at the node daemon", d, slowest, startTime)
	t.Run("python_agent", func(t *testing.T) { agentReplay(t, fromPlanted[0]) })
}

// agentReplay is TestHMACReplay's attack on a Python agent's TCP listener
// (PROBING_SERVER_ADDR with PROBING_AUTH_TOKEN): a request a token holder
// signed for it, captured, sent again as it was or with its body changed,
// and the coordinator's request captured at a planted address relayed to
// it.
func agentReplay(t *testing.T, fromPlanted captured) {
	py := os.Getenv("PROBING_TEST_PYTHON")
	if py == "" {
		py = "python3"
	}
	if _, err := exec.LookPath(py); err != nil {
		t.Skipf("no %s: a real agent cannot run here (set PROBING_TEST_PYTHON); agent/python/tests/test_core_trust_tcp.py covers it", py)
	}
	site := filepath.Join(t.TempDir(), "site")
	if err := agent.ExtractTo(site, "redteam"); err != nil {
		t.Fatal(err)
	}
	// The control root under /tmp: a Unix socket's path is short.
	ctrl, err := os.MkdirTemp("", "pmcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ctrl) })
	addr := freePort(t)
	cmd := exec.Command(py, "-c", "import site, sys\nsite.addsitedir(sys.argv[1])\nprint('READY', flush=True)\nsys.stdin.read()\n", site)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PROBING=1", "PROBING_MCP_NODE=0",
		"PROBING_DATA_DIR=" + t.TempDir(), "PROBING_CTRL_ROOT=" + ctrl, "PROBING_SERVER_ADDR=" + addr, "PROBING_AUTH_TOKEN=" + jobToken}
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	stderr := &capped{max: 1 << 20}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "READY" {
		t.Fatalf("the agent's process said %q; stderr:\n%s", line, tail(stderr.String(), 2000))
	}
	hc := &http.Client{Timeout: startTime}
	deadline := time.Now().Add(startTime)
	for {
		res, err := hc.Get("http://" + addr + "/health")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's TCP listener %s did not answer within %s (%v); stderr:\n%s", addr, startTime, err, tail(stderr.String(), 2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A request signed by a holder of the token (a tool of the job's own),
	// as the attacker captures it on its way: served once, answer signed.
	key := hmacauth.NewKey(jobToken)
	signed := func(method, target string, body []byte) (captured, string) {
		h, nonce := key.Sign(method, target, addr, body, time.Now())
		return captured{Method: method, URI: target, Header: http.Header{"Authorization": {h}}, Body: body}, nonce
	}
	id, nonce := signed("GET", "/apis/identity", nil)
	res, err := send(hc, addr, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || key.VerifyResponse(nonce, 200, b, res.Header.Get(hmacauth.ResponseHeader)) != nil {
		t.Fatalf("the token holder's signed request: %d (signature %q) %.300s", res.StatusCode, res.Header.Get(hmacauth.ResponseHeader), b)
	}
	put, _ := signed("PUT", "/config/comm.collectives", []byte("on"))
	var slowest time.Duration
	for _, a := range []struct {
		name   string
		req    captured
		body   []byte
		status int
		want   string
	}{
		{"exact replay", id, nil, 401, "the request's nonce was used before: a replayed request is refused"},
		{"body changed", put, []byte("off"), 401, "the request's signature is wrong"},
		{"relayed from the planted address", fromPlanted, fromPlanted.Body, 403, "which is not this listener: relayed by another address?"},
	} {
		t0 := time.Now()
		code, body := replay(t, addr, a.req, a.body)
		slowest = max(slowest, time.Since(t0))
		if code != a.status {
			t.Errorf("%s to the agent: %d %.300s, want %d", a.name, code, body, a.status)
		}
		mustContain(t, a.name+"'s refusal", body, a.want)
		said(t, body, a.want[:20])
		if strings.Contains(body, `"pid"`) {
			t.Errorf("%s: the refusal tells of the process: %.300s", a.name, body)
		}
	}
	t.Logf("redteam: HMAC replay at the agent's TCP listener: slowest answer %.2f s (bound %s)", slowest.Seconds(), startTime)
	if slowest >= startTime {
		t.Errorf("an answer took %s", slowest)
	}
}
