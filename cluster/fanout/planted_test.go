package fanout_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/fanout"
	"github.com/probing-mcp/probing-mcp/cluster/node"
)

// TestPlantedAddressLearnsNoToken: issue 23. An address planted in the
// job's store (anyone who reaches MASTER_ADDR:MASTER_PORT can write a node
// slot) used to receive `Authorization: Bearer <token>` on the
// coordinator's first call. Now it sees only a signature it cannot reuse
// elsewhere, nothing it says counts (its answer is not signed), and
// relaying the request to a real daemon is refused there.
func TestPlantedAddressLearnsNoToken(t *testing.T) {
	const token = "the-jobs-secret-token"
	real := httptest.NewServer(node.Handler(node.Config{Token: token,
		Source: &node.Local{Self: cluster.Node{Host: "real", Addr: "127.0.0.1:1"}, Agents: agent.Options{DataDir: t.TempDir(), CtrlRoot: t.TempDir()}}}))
	defer real.Close()

	var mu sync.Mutex
	var seen []string
	relayed := map[int]string{}
	planted := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		for k, vs := range r.Header {
			seen = append(seen, k+": "+strings.Join(vs, ","))
		}
		mu.Unlock()
		if r.URL.Path == node.PathStacks {
			// Relay the request as is to the real daemon, and its answer back.
			req, _ := http.NewRequest(r.Method, real.URL+r.URL.RequestURI(), r.Body)
			req.Header = r.Header.Clone()
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				w.WriteHeader(502)
				return
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			mu.Lock()
			relayed[res.StatusCode] = string(b)
			mu.Unlock()
			for k, vs := range res.Header {
				w.Header()[k] = vs
			}
			w.WriteHeader(res.StatusCode)
			w.Write(b)
			return
		}
		// Made-up evidence: rank 1 is "the culprit" at a frame of its choosing.
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"node":{"host":"evil","addr":"x:1","node_rank":0,"kind":"probing-mcp","source":"store"},"version":"1","now_ns":1,"world":2,"ranks":[{"rank":1,"local_rank":0,"pid":1,"alive":true,"kind":"daemon"}]}`))
	}))
	defer planted.Close()

	n := cluster.Node{Host: "evil", Addr: strings.TrimPrefix(planted.URL, "http://"), Kind: cluster.KindDaemon, Source: "store"}
	c := fanout.NewClient(token, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var info node.Info
	err := c.Do(ctx, n, http.MethodGet, node.PathInfo, nil, &info)
	var pe *evidence.PeerError
	if !errors.As(err, &pe) || pe.Kind != fanout.KindAuth || !strings.Contains(pe.Msg, "not counted") || info.World != 0 {
		t.Fatalf("a planted node's answer counted: %v %+v", err, info)
	}
	var st node.StacksReply
	err = c.Do(ctx, n, http.MethodPost, node.PathStacks, node.StacksRequest{}, &st)
	if !errors.As(err, &pe) || pe.Kind != fanout.KindAuth || !strings.Contains(pe.Msg, "relayed") {
		t.Fatalf("relay: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, h := range seen {
		if strings.Contains(h, token) || strings.Contains(strings.ToLower(h), "bearer") {
			t.Errorf("the planted address saw %q", h)
		}
	}
	if _, ok := relayed[http.StatusForbidden]; !ok || len(relayed) != 1 {
		t.Errorf("the real daemon answered the relay: %v", relayed)
	}
	// The coordinator reaches the real daemon, and believes it.
	rn := cluster.Node{Host: "real", Addr: strings.TrimPrefix(real.URL, "http://"), Kind: cluster.KindDaemon}
	if err := c.Do(ctx, rn, http.MethodGet, node.PathInfo, nil, &info); err != nil || info.Node.Host != "real" {
		t.Fatalf("real daemon: %v %+v", err, info)
	}
}

// TestLoopbackDaemonOfAnotherUserDoesNotCount: without a token, a loopback
// answer counts only from a daemon this user or root runs (the owner of
// the listening socket); with one, only a signed answer. Another user who
// took the port first (here nobody, answering made-up evidence) is not
// believed either way. Needs root (to run the other user).
func TestLoopbackDaemonOfAnotherUserDoesNotCount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a listener as another user (nobody)")
	}
	py := "/usr/bin/python3" // a pyenv shim under /root is not runnable by nobody
	if _, err := os.Stat(py); err != nil {
		t.Skip("needs /usr/bin/python3 for the other user's listener")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	script := `import http.server,sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b=b'{"node":{"host":"evil","addr":"x:1","node_rank":0,"kind":"probing-mcp","source":"store"},"world":2,"ranks":[]}'
        self.send_response(200);self.send_header("Content-Length",str(len(b)));self.end_headers();self.wfile.write(b)
    def log_message(self,*a): pass
s=http.server.HTTPServer(("127.0.0.1",int(sys.argv[1])),H)
print("up",flush=True)
s.serve_forever()`
	cmd := exec.Command(py, "-c", script, strconv.Itoa(port))
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot run a process as nobody: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line := make([]byte, 3)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "up\n" {
		t.Fatalf("the other user's listener did not start: %q %v", line, err)
	}
	n := cluster.Node{Host: "evil", Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Kind: cluster.KindDaemon}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for tok, why := range map[string]string{"": "runs as uid 65534", "tok": "the answer is not signed"} {
		var info node.Info
		err := fanout.NewClient(tok, 1).Do(ctx, n, http.MethodGet, node.PathInfo, nil, &info)
		var pe *evidence.PeerError
		if !errors.As(err, &pe) || pe.Kind != fanout.KindAuth || !strings.Contains(pe.Msg, why) || info.World != 0 {
			t.Errorf("token %q: another user's loopback daemon counted: %v %+v", tok, err, info)
		}
	}
}
