package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/gpu"
)

// buildBinary builds this command into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "probing-mcp")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = os.Environ()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// The real binary under LD_BIND_NOW=1, which resolves every symbol at
// start: without libnvidia-ml it must still start, say why there is no
// GPU, serve MCP and run the node daemon (go-nvml's own symbols would
// kill it at exec time; ours are stubs bound after dlopen).
func TestBinaryStartsUnderBindNow(t *testing.T) {
	bin := buildBinary(t)
	env := append(os.Environ(), "LD_BIND_NOW=1", "PROBING_DATA_DIR="+t.TempDir(), "PROBING_CTRL_ROOT="+t.TempDir(),
		"PROBING_MCP_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1")

	// probing-mcp gpu
	cmd := exec.Command(bin, "gpu", "--json")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gpu --json under LD_BIND_NOW=1: %v\n%s", err, out)
	}
	var rep struct {
		Status struct{ State, Reason string }
		Source string
	}
	if err := json.Unmarshal(out, &rep); err != nil || rep.Status.State != "no_library" || !strings.Contains(rep.Status.Reason, "/nonexistent/libnvidia-ml.so.1") {
		t.Fatalf("gpu --json: %v %+v\n%s", err, rep, out)
	}

	// probing-mcp serve: initialize and tools/list over stdio.
	srv := exec.Command(bin, "serve")
	srv.Env = env
	stdin, _ := srv.StdinPipe()
	stdout, _ := srv.StdoutPipe()
	srv.Stderr = io.Discard
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	io.WriteString(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`+"\n")
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	got := 0
	for got < 2 && sc.Scan() {
		var m struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Result != nil {
			got++
			if m.ID == 2 && !strings.Contains(string(m.Result), `"name":"diagnose_hang"`) {
				t.Fatalf("tools/list: %s", m.Result)
			}
		}
	}
	if got != 2 {
		t.Fatalf("serve under LD_BIND_NOW=1 answered %d of 2 requests: %v", got, sc.Err())
	}
	stdin.Close()
	srv.Wait()

	// probing-mcp node: it serves its health route.
	nd := exec.Command(bin, "node", "--http", "127.0.0.1:0", "--idle-exit", "0", "--no-register")
	nd.Env = env
	stderr, _ := nd.StderrPipe()
	if err := nd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { nd.Process.Kill(); nd.Wait() }()
	addrRe := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`)
	sc = bufio.NewScanner(stderr)
	addr := ""
	var logs []string
	for addr == "" && sc.Scan() {
		logs = append(logs, sc.Text())
		if m := addrRe.FindStringSubmatch(sc.Text()); m != nil && strings.Contains(sc.Text(), "node daemon serving") {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("the node daemon under LD_BIND_NOW=1 never served:\n%s", strings.Join(logs, "\n"))
	}
	go io.Copy(io.Discard, stderr)
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get("http://" + addr + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("health: %s", resp.Status)
	}
}

// probing-mcp gpu --rings shows the newest round a sampler left in the
// data dir, every field with --devices.
func TestGPUCommandReadsRings(t *testing.T) {
	dir := t.TempDir()
	rings, err := gpu.OpenRings(dir, "node-z")
	if err != nil {
		t.Fatal(err)
	}
	defer rings.Close()
	u, p, l := uint32(100), 71.0, 400.0
	snap := gpu.Snapshot{Index: 0, Name: "NVIDIA A100-SXM4-40GB", UUID: "GPU-1", PCIBusID: "00000000:07:00.0",
		Utilization: &gpu.Utilization{GPU: u}, PowerW: &p, PowerLimitW: &l, Time: time.Now(),
		Processes: []gpu.Process{{PID: 99, Rank: 6, LocalRank: 0, GPUInstance: -1}}}
	rep := gpu.NewReport("node-z", gpu.Status{State: gpu.StateOK, Devices: 1}, []gpu.Snapshot{snap}, nil, 0)
	rep.IntervalMS = 1000
	if err := rings.Write(gpu.Tick{Report: rep}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("gpu", "--rings", "--data-dir", dir, "--devices")
	if code != 0 || !strings.Contains(out, "GPU 0 NVIDIA A100-SXM4-40GB GPU-1 00000000:07:00.0: spinning") ||
		!strings.Contains(out, "power 71 W of 400 W") || !strings.Contains(out, "pid 99 rank 6") || !strings.Contains(out, "from the rings of pid") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = runCLI("gpu", "--rings", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "GPU 0 (NVIDIA A100-SXM4-40GB) spinning: 100% util, 71 W of 400 W") || !strings.Contains(out, "ranks 6") {
		t.Fatalf("summary: exit %d\n%s", code, out)
	}
	code, _, errOut = runCLI("gpu", "--rings", "--data-dir", t.TempDir(), "--require")
	if code != 1 || !strings.Contains(errOut, "not_sampled") {
		t.Fatalf("--require on an empty data dir: exit %d, %s", code, errOut)
	}
}
