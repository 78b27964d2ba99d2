package tcpstore

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/testpython"
)

// TestAgainstTorchTCPStore speaks to a real torch TCPStore (master side,
// in a Python process): set, check, get, add both ways, and a missing
// key answered at once instead of waited for.
func TestAgainstTorchTCPStore(t *testing.T) {
	py := testpython.Torch()
	if py == "" {
		t.Skip("no interpreter with torch.distributed (set PROBING_TORCH_PYTHON): the real store cannot run here")
	}
	script := `
import sys, torch.distributed as d
s = d.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
s.set("from_torch", "hello")
print(s.port, flush=True)
sys.stdin.readline()
print(s.get("from_go").decode(), s.add("counter", 0), flush=True)
sys.stdin.readline()
`
	cmd := exec.Command(py, "-c", script)
	in, _ := cmd.StdinPipe()
	outPipe, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); cmd.Process.Kill(); cmd.Wait() }()
	out := bufio.NewReader(outPipe)
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("port line %q", line)
	}
	c, err := Dial(context.Background(), "127.0.0.1:"+strconv.Itoa(port), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, err := c.Get("from_torch"); err != nil || string(v) != "hello" {
		t.Fatalf("get: %q %v", v, err)
	}
	start := time.Now()
	if _, err := c.Get("nobody/registered"); !errors.Is(err, ErrNoKey) {
		t.Fatalf("missing key: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a missing key took %s: it was waited for", d)
	}
	if ok, err := c.Check("from_torch", "nobody/registered"); ok || err != nil {
		t.Errorf("check of a missing key: %v %v", ok, err)
	}
	if err := c.Set("from_go", []byte("world")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Add("counter", 41); err != nil || n != 41 {
		t.Fatalf("add: %d %v", n, err)
	}
	if n, err := c.Add("counter", 1); err != nil || n != 42 {
		t.Fatalf("add: %d %v", n, err)
	}
	in.Write([]byte("\n"))
	line, err = out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "world 42" {
		t.Errorf("torch read back %q %v", line, err)
	}
}

// TestUntrustedStore: a "store" that answers garbage gets a clear error,
// an oversized length is refused without allocating it, and a silent one
// times out instead of hanging.
func TestUntrustedStore(t *testing.T) {
	serve := func(t *testing.T, reply func(c net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			reply(c)
		}()
		return ln.Addr().String()
	}
	addr := serve(t, func(c net.Conn) {
		buf := make([]byte, 4096)
		c.Read(buf)        // validate
		c.Write([]byte{7}) // a check reply that is neither 0 nor 1
		c.Read(buf)
	})
	c, err := Dial(context.Background(), addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Check("k"); err == nil || !strings.Contains(err.Error(), "neither ready") {
		t.Errorf("garbage check reply: %v", err)
	}
	c.Close()

	addr = serve(t, func(c net.Conn) {
		buf := make([]byte, 4096)
		c.Read(buf)
		c.Write([]byte{0}) // ready
		c.Read(buf)
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], 1<<62)
		c.Write(b[:])
		c.Read(buf)
	})
	c, _ = Dial(context.Background(), addr, 2*time.Second)
	if _, err := c.Get("k"); err == nil || !strings.Contains(err.Error(), "over the") || errors.Is(err, ErrTooLarge) {
		// Too large to read past: the connection ends (ErrTooLarge is for
		// a value the client dropped and can go on after).
		t.Errorf("oversized value: %v", err)
	}
	c.Close()

	addr = serve(t, func(c net.Conn) { io := make([]byte, 4096); c.Read(io); time.Sleep(5 * time.Second) })
	c, _ = Dial(context.Background(), addr, 300*time.Millisecond)
	if _, err := c.Check("k"); err == nil {
		t.Error("a silent store did not time out")
	}
	c.Close()
	if _, err := (&Client{}).Check(); err == nil {
		t.Error("an empty check was sent")
	}
}
