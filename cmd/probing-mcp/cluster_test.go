package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/membership"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/internal/testpython"
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

// TestServeJobThroughTorchStore: the coordinator finds the node daemons
// that registered in a real torch TCPStore, keeps that membership on
// disk, and falls back to it once the store is gone (a dead job).
func TestServeJobThroughTorchStore(t *testing.T) {
	py := testpython.Torch()
	if py == "" {
		t.Skip("no interpreter with torch.distributed (set PROBING_TORCH_PYTHON): the real store cannot run here")
	}
	cmd := exec.Command(py, "-c", "import sys, torch.distributed as d\ns = d.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False)\nprint(s.port, flush=True)\nsys.stdin.readline()\n")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopStore := func() { in.Close(); cmd.Wait() }
	defer stopStore()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	store := "127.0.0.1:" + strings.TrimSpace(line)
	t.Setenv("TORCHELASTIC_RUN_ID", "job-"+strings.TrimSpace(line))
	t.Setenv("PROBING_AUTH_TOKEN", "tok")
	ctx := context.Background()
	for i, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		ln, err := net.Listen("tcp", ip+":0")
		if err != nil {
			t.Skip(err)
		}
		src := &node.Local{Agents: agent.Options{DataDir: t.TempDir(), CtrlRoot: t.TempDir()}}
		src.Self = cluster.Node{Host: fmt.Sprintf("n%d", i), Addr: ln.Addr().String(), NodeRank: i, Kind: cluster.KindDaemon}
		srv := &http.Server{Handler: node.Handler(node.Config{Source: src, Token: "tok"})}
		go srv.Serve(ln)
		defer srv.Close()
		if err := membership.Register(ctx, store, membership.RunID(os.Getenv), src.Self, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	dataDir := t.TempDir()
	membershipTTL = 0 // every call reads the store: its death is seen at once
	defer func() { membershipTTL = membership.CacheTTL }()
	j, _, err := clusterJob(store, "", 0, dataDir, slog.New(slog.DiscardHandler))
	if err != nil || j == nil {
		t.Fatal(err)
	}
	ns, cov, err := j.Nodes(ctx)
	if err != nil || !cov.Complete() || len(ns) != 2 || ns[0].Source != "store" {
		t.Fatalf("%+v %s %v", ns, cov.Text(), err)
	}
	stopStore()
	ns, cov, err = j.Nodes(ctx)
	if err != nil || !cov.Complete() || len(ns) != 2 || !strings.Contains(strings.Join(cov.Problems, ";"), "using the membership last saved") {
		t.Fatalf("after the store died: %+v %s %v %v", ns, cov.Text(), cov.Problems, err)
	}
}

// TestHeartbeatsAreMembers: an original Probing agent that pushes its
// heartbeat (PUT /apis/nodes) is listed as a member, not queried, and
// says how to include its ranks.
func TestHeartbeatsAreMembers(t *testing.T) {
	t.Setenv("PROBING_AUTH_TOKEN", "")
	j, beats, err := clusterJob("", "127.0.0.1:1", 0, t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil || beats == nil {
		t.Fatal(err)
	}
	// Without a token the server refuses every heartbeat (any local user
	// reaches loopback); with one, they are members.
	off := httptest.NewServer(heartbeatRoutes(beats, "", slog.New(slog.DiscardHandler))["/apis/nodes"])
	defer off.Close()
	res, err := http.Post(off.URL+"/apis/nodes", "application/json", strings.NewReader(`{"nodes":[{"rank":3,"host":"node-b","addr":"10.0.0.2:9922"}]}`))
	if err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("tokenless heartbeat: %v %v", err, res)
	}
	res.Body.Close()
	if hb, _ := beats.Nodes(); len(hb) != 0 {
		t.Fatalf("a tokenless heartbeat counted: %+v", hb)
	}
	srv := httptest.NewServer(heartbeatRoutes(beats, "tok", slog.New(slog.DiscardHandler))["/apis/nodes"])
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/apis/nodes", strings.NewReader(`{"nodes":[{"rank":3,"world_size":4,"group_rank":1,"local_rank":0,"host":"node-b","addr":"10.0.0.2:9922","timestamp":1}],"seen_version":0}`))
	res, err = http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("heartbeat: %v %v", err, res)
	}
	res.Body.Close()
	ns, _, err := j.Nodes(context.Background())
	if err != nil || len(ns) != 2 || ns[1].Host != "node-b" || ns[1].Status != "not_daemon" || ns[1].Ranks != "3" {
		t.Fatalf("%+v %v", ns, err)
	}
}

// TestOwnAddrToward: a daemon bound to every interface advertises its
// own address on the route to the master, unless told one; never the
// master's.
func TestOwnAddrToward(t *testing.T) {
	t.Setenv("PROBING_ADVERTISE_ADDR", "")
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	if got := ownAddrToward("0.0.0.0", "[::]:9781"); got != "127.0.0.1:9781" {
		t.Errorf("wildcard: %q", got)
	}
	if got := ownAddrToward("127.0.0.2", "127.0.0.2:9781"); got != "" {
		t.Errorf("a named bind: %q", got)
	}
	t.Setenv("PROBING_ADVERTISE_ADDR", "10.0.0.5:9781")
	if got := ownAddrToward("0.0.0.0", "[::]:9781"); got != "" {
		t.Errorf("advertised: %q", got)
	}
	t.Setenv("PROBING_ADVERTISE_ADDR", "")
	t.Setenv("MASTER_ADDR", "")
	if got := ownAddrToward("", ":9781"); got != "" {
		t.Errorf("no master: %q", got)
	}
}
