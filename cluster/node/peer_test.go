package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/cluster/fedsql"
)

// stubSource answers /v1/node and /v1/stacks with nothing in them: the
// tests here are about who is served, not what.
type stubSource struct{}

var errStub = errors.New("not served by this test's source")

func (stubSource) Info(context.Context) (*Info, error) { return &Info{Version: "stub"}, nil }
func (stubSource) Stacks(context.Context, StacksRequest) (*StacksReply, error) {
	return &StacksReply{Problems: []string{"the secret stacks"}}, nil
}
func (stubSource) Evidence(context.Context, EvidenceRequest) (*EvidenceReply, error) {
	return nil, errStub
}
func (stubSource) FlightRecorder(context.Context, FRRequest) (*FRReply, error) { return nil, errStub }
func (stubSource) Tables(context.Context) ([]fedsql.Table, error)              { return nil, errStub }
func (stubSource) Scan(context.Context, fedsql.ScanRequest) (*fedsql.ScanReply, error) {
	return nil, errStub
}
func (stubSource) GPU(context.Context, GPURequest) (*GPUReply, error) { return nil, errStub }

func mustAddrPort(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// post asks url's /v1/stacks from this process.
func post(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 20 * time.Second}
	res, err := c.Post(url+PathStacks, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestPeerSameUser: without a token, a client of the daemon's own uid is
// served over real loopback TCP (v4, and v6 where the host has it).
func TestPeerSameUser(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v (no such loopback here)", addr, err)
			continue
		}
		s := httptest.NewUnstartedServer(Handler(Config{Source: stubSource{}}))
		s.Listener.Close()
		s.Listener = ln
		s.Start()
		code, body := post(t, s.URL)
		s.Close()
		if code != 200 || !strings.Contains(body, "the secret stacks") {
			t.Errorf("%s: the daemon's own user: %d %s", addr, code, body)
		}
	}
}

// TestPeerUnknownOwner: a connection whose owner cannot be read is refused
// with a 403 that names the rule and the fix: no table, a table without
// the row, a closed client's row (uid 0 in TIME_WAIT must not pass for
// root), a bad uid column, and no time left.
func TestPeerUnknownOwner(t *testing.T) {
	s := httptest.NewServer(Handler(Config{Source: stubSource{}}))
	defer s.Close()
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	dir := t.TempDir()
	table := func(name, rows string) string {
		p := filepath.Join(dir, name)
		hdr := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
		if err := os.WriteFile(p, []byte(hdr+rows), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := procNetTCP
	t.Cleanup(func() { procNetTCP = old })
	for name, paths := range map[string][]string{
		"no tables":   {filepath.Join(dir, "none"), filepath.Join(dir, "none6")},
		"no row":      {table("empty", "   0: 0100007F:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123 1\n")},
		"a directory": {dir},
	} {
		procNetTCP = paths
		code, body := post(t, s.URL)
		if code != http.StatusForbidden || !strings.Contains(body, "could not be found") || !strings.Contains(body, "PROBING_AUTH_TOKEN") {
			t.Errorf("%s: %d %s", name, code, body)
		}
	}

	// Rows as the kernel writes them, for a connection to the server.
	ctx := context.Background()
	local := mustAddrPort(t, "127.0.0.1:"+port)
	remote := mustAddrPort(t, "127.0.0.1:40000")
	row := func(st, uid, inode string) string {
		return fmt.Sprintf("   1: %s %s %s 00000000:00000000 00:00000000 00000000 %s 0 %s 1\n", kernelAddr(remote, false), kernelAddr(local, false), st, uid, inode)
	}
	for name, c := range map[string]struct{ rows, want string }{
		"time-wait as uid 0": {row("06", "0", "0"), "no longer open"},
		"orphaned":           {row("04", "0", "0"), "no longer open"},
		"bad uid":            {row("01", "x", "99"), "not a number"},
	} {
		procNetTCP = []string{table(strings.ReplaceAll(name, " ", "_"), c.rows)}
		if uid, err := peerUID(ctx, local, remote); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: uid %d, err %v; want %q", name, uid, err, c.want)
		}
	}
	procNetTCP = []string{table("good", row("01", "1234", "99"))}
	if uid, err := peerUID(ctx, local, remote); err != nil || uid != 1234 {
		t.Errorf("an established row: uid %d, %v", uid, err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	procNetTCP = []string{table("late", row("01", "1234", "99"))}
	if _, err := peerUID(done, local, remote); err == nil || !strings.Contains(err.Error(), "no answer within") {
		t.Errorf("no time left: %v", err)
	}
}

// TestPeerOtherUser: with real processes, the daemon serves its own uid and
// root and refuses another uid with a clear 403 (never a hang). The
// daemon runs as uid 65534, the clients as root, 65534 and 65533.
func TestPeerOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it runs the daemon and its clients as other uids (65534, 65533)")
	}
	bin := sharedCopy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	srv := helper(ctx, bin, 65534, "serve", "")
	stdin, _ := srv.StdinPipe()
	out, _ := srv.StdoutPipe()
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); srv.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the daemon as uid 65534 did not start: %v", err)
	}
	url := "http://" + strings.TrimSpace(line)

	if code, body := post(t, url); code != 200 {
		t.Errorf("root's client: %d %s", code, body)
	}
	for uid, want := range map[uint32]string{65534: "200", 65533: "403"} {
		start := time.Now()
		b, err := helper(ctx, bin, uid, "client", url).CombinedOutput()
		got := string(b)
		if err != nil {
			t.Errorf("uid %d's client: %v: %s", uid, err, got)
			continue
		}
		if !strings.HasPrefix(got, want+" ") {
			t.Errorf("uid %d's client: got %s, want %s", uid, got, want)
		}
		if want == "403" && (strings.Contains(got, "the secret stacks") || !strings.Contains(got, "uid 65533") || !strings.Contains(got, "PROBING_AUTH_TOKEN")) {
			t.Errorf("uid %d's refusal should name its uid and the fix, and tell nothing: %s", uid, got)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("uid %d's client took %s", uid, d)
		}
	}
	// /metrics follows /health's rules: without a token, the same users.
	for uid, want := range map[uint32]string{65534: "200", 65533: "403"} {
		b, err := helper(ctx, bin, uid, "metrics-client", url).CombinedOutput()
		if got := string(b); err != nil || !strings.HasPrefix(got, want+" ") {
			t.Errorf("uid %d's scrape: %v %.200s, want %s", uid, err, got, want)
		}
	}
}

// TestPeerHelper is the other-uid process of TestPeerOtherUser.
func TestPeerHelper(t *testing.T) {
	switch os.Getenv("PROBING_TEST_PEER_ROLE") {
	case "serve":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println(ln.Addr())
		go http.Serve(ln, Handler(Config{Source: stubSource{}}))
		io.Copy(io.Discard, os.Stdin) // until the test closes it
	case "client", "metrics-client":
		c := &http.Client{Timeout: 20 * time.Second}
		res, err := c.Post(os.Getenv("PROBING_TEST_PEER_URL")+PathStacks, "application/json", strings.NewReader("{}"))
		if os.Getenv("PROBING_TEST_PEER_ROLE") == "metrics-client" {
			res, err = c.Get(os.Getenv("PROBING_TEST_PEER_URL") + "/metrics")
		}
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		b, _ := io.ReadAll(res.Body)
		fmt.Println(res.StatusCode, string(b))
	default:
		t.Skip("the helper process of TestPeerOtherUser")
	}
}

func helper(ctx context.Context, bin string, uid uint32, role, url string) *exec.Cmd {
	c := exec.CommandContext(ctx, bin, "-test.run=^TestPeerHelper$", "-test.count=1")
	c.Env = append(os.Environ(), "PROBING_TEST_PEER_ROLE="+role, "PROBING_TEST_PEER_URL="+url)
	c.Dir = "/"
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	return c
}

// sharedCopy copies the test binary where other uids can run it (go test
// builds it in a directory only its user can enter).
func sharedCopy(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "peer-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "node.test")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
