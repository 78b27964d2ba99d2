package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/cluster"
	"github.com/probing-mcp/probing-mcp/cluster/node"
	"github.com/probing-mcp/probing-mcp/internal/demojob"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
	"github.com/probing-mcp/probing-mcp/traceexport"
)

// TestExportUsage: bad input is refused at start, naming the flag and
// the fix, exit 2 and nothing written.
func TestExportUsage(t *testing.T) {
	t.Setenv("PROBING_DATA_DIR", t.TempDir())
	t.Setenv("PROBING_MCP_HISTORY", "off")
	out := filepath.Join(t.TempDir(), "t.json")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"export"}, "say where the trace goes: --trace FILE"},
		{[]string{"export", "--trace", out, "--ranks", "3-1"}, `--ranks: rank set "3-1"`},
		{[]string{"export", "--trace", out, "--ranks", "0-99999"}, "a trace holds at most 16384 tracks"},
		{[]string{"export", "--trace", out, "--max-events", "0"}, "--max-events 0: want 1..1000000"},
		{[]string{"export", "--trace", out, "--since", "-5m"}, "--since -5m0s: want a positive duration"},
		{[]string{"export", "--trace", out, "--dumps", "x", "--peers", "a:1"}, "pass one or the other"},
		{[]string{"export", "--trace", out, "extra"}, `unexpected argument "extra"`},
		{[]string{"export", "--trac", out}, "did you mean --trace?"},
	} {
		code, stdout, errOut := runCLI(c.args...)
		if code != 2 || stdout != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, stdout, errOut, c.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a refused export wrote %s", out)
	}
	// A place that cannot be written: said before anything is read.
	code, _, errOut := runCLI("export", "--trace", filepath.Join(out, "sub", "t.json"))
	if code != 1 || !strings.Contains(errOut, "cannot write in "+filepath.Join(out, "sub")+": no such file or directory") {
		t.Errorf("unwritable: exit %d, %q", code, errOut)
	}
	// No job here: exit 1, saying so, and no file (nor its temporary).
	code, _, errOut = runCLI("export", "--trace", out)
	if code != 1 || !strings.Contains(errOut, "no training job found here") {
		t.Errorf("no job: exit %d, %q", code, errOut)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), "*")); len(left) > 0 {
		t.Errorf("a failed export left %v", left)
	}
}

// TestExportDumps: post mortem, from the shipped Flight Recorder dumps,
// to stdout: a valid trace whose selection is the analysis' culprit and
// its group.
func TestExportDumps(t *testing.T) {
	code, out, errOut := runCLI("export", "--trace", "-", "--dumps", "../../testdata/fr/real/missing_rank")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if err := traceexport.Validate([]byte(out)); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, w := range []string{"wrote stdout: 19 collective slice(s) on 4 rank track(s) (ranks 0-3), 4 still inside, 1 never-entered mark(s)",
		"the Flight Recorder analysis' culprit (MISSING_RANKS"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errOut)
		}
	}
	if strings.Contains(errOut, "ui.perfetto.dev") {
		t.Errorf("the pointer to a file for stdout: %s", errOut)
	}
}

// TestExportLiveDemoJob runs the built binary on the demo's real hung
// job (torch-free ranks, the agent recording each all-reduce): by
// default the culprit (rank 2) and its group; ranks 0, 1 and 3 still
// inside the same all-reduce, rank 2 marked as never entering it; a
// --ranks selection with a rank the job has not is said, not dropped;
// the cap truncates loudly.
func TestExportLiveDemoJob(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3: the demo job needs it")
	}
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	job, err := demojob.Start(ctx, demojob.Options{Torch: "no", Python: "python3"})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Stop()
	if err := job.WaitHung(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + dir, "PROBING_DATA_DIR=" + job.DataDir,
		"PROBING_CTRL_ROOT=" + job.CtrlRoot, "PROBING_MCP_HISTORY=off"}
	export := func(args ...string) (string, []byte) {
		t.Helper()
		file := filepath.Join(dir, "trace.json")
		os.Remove(file)
		cmd := exec.CommandContext(ctx, bin, append([]string{"export", "--trace", file}, args...)...)
		cmd.Env = env
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("export %v: %v\n%s", args, err, errb.String())
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := traceexport.Validate(b); err != nil {
			t.Fatalf("export %v: %v", args, err)
		}
		return errb.String(), b
	}
	// The verdict takes the job's stall past its threshold: until then
	// the selection is every rank, which is the same four here; the
	// culprit's selection is waited for (the idle time only grows).
	var errOut string
	var raw []byte
	for {
		errOut, raw = export("--stall-seconds", "1")
		if strings.Contains(errOut, "culprit (cpu_stall: rank 2") || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(errOut, "(selection: the verdict's culprit (cpu_stall: rank 2, high confidence) and its group)") ||
		!strings.Contains(errOut, "on 4 rank track(s) (ranks 0-3), 3 still inside, 1 never-entered mark(s)") || !strings.Contains(errOut, "ui.perfetto.dev") {
		t.Fatalf("stderr:\n%s", errOut)
	}
	var tr struct {
		TraceEvents []struct {
			Name, Ph, Cat string
			TID           int
			Args          map[string]any
		}
		Metadata map[string]any
	}
	if err := json.Unmarshal(raw, &tr); err != nil {
		t.Fatal(err)
	}
	stuck := map[int]float64{}
	lastSeq := map[int]float64{}
	var never []string
	for _, e := range tr.TraceEvents {
		switch {
		case e.Ph == "X" && e.Args["still_inside"] == true:
			stuck[e.TID] = e.Args["seq"].(float64)
			if e.Args["op"] != "all_reduce" || e.Args["group_ranks"] != "0-3" || e.Args["bytes"] != 8.0 {
				t.Errorf("stuck slice %+v", e)
			}
		case e.Ph == "X":
			lastSeq[e.TID] = max(lastSeq[e.TID], e.Args["seq"].(float64))
		case e.Cat == "never_entered":
			never = append(never, e.Name)
			if e.TID != 2 {
				t.Errorf("never entered on rank %d", e.TID)
			}
		}
	}
	s := stuck[0]
	if len(stuck) != 3 || s < 1 || stuck[1] != s || stuck[3] != s || lastSeq[2] != s-1 || len(never) != 1 ||
		never[0] != "never entered all_reduce #"+ftoa(s) {
		t.Errorf("stuck %v, rank 2's last #%v, never %v", stuck, lastSeq[2], never)
	}
	if tr.Metadata["selection"] != "ranks 0-3" || tr.Metadata["source"] != "ring (python.comm_collective)" {
		t.Errorf("metadata %v", tr.Metadata)
	}
	// --ranks with a rank the job has not, in the last hour.
	errOut, raw = export("--ranks", "1,2,9", "--since", "1h")
	if !strings.Contains(errOut, "on 2 rank track(s) (ranks 1-2)") || !strings.Contains(errOut, "no call recorded for rank 9") ||
		!strings.Contains(string(raw), `"ranks_without_calls":"9"`) {
		t.Errorf("--ranks 1,2,9: %s", errOut)
	}
	// A cap below the calls: the newest kept, the cut said on stderr.
	errOut, raw = export("--ranks", "0-3", "--max-events", "4")
	if !strings.Contains(errOut, "4 collective slice(s)") || !strings.Contains(errOut, "truncated: ") || !strings.Contains(string(raw), `"truncated":true`) {
		t.Errorf("--max-events 4: %s", errOut)
	}
	// Post mortem: the ranks killed (no record of their end), their rings
	// left; the calls they were inside end with them, said. All are
	// stopped first, so that none sees a peer die and leaves its call.
	for _, sig := range []syscall.Signal{syscall.SIGSTOP, syscall.SIGKILL} {
		for _, pid := range job.PIDs() {
			syscall.Kill(pid, sig)
		}
	}
	for {
		errOut, _ = export("--ranks", "0-3")
		if !strings.Contains(errOut, "still inside") || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(errOut, "on 4 rank track(s) (ranks 0-3), 3 ended inside (the rank's process is gone), 1 never-entered mark(s)") {
		t.Errorf("dead job: %s", errOut)
	}
}

func ftoa(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// TestExportWholeJob: the demo job split over two simulated nodes, each
// with a real node daemon; `export --peers` reads both nodes' rings
// through them: a process per node, the four ranks' tracks, the culprit
// (rank 2, on the second node) and its group.
func TestExportWholeJob(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3: the demo job needs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	job, err := demojob.Start(ctx, demojob.Options{Torch: "no", Python: "python3", Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Stop()
	if err := job.WaitHung(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for i, nd := range job.NodeDirs {
		e, err := sqlengine.New(sqlengine.Options{DataDir: nd.DataDir, Host: nd.Host})
		if err != nil {
			t.Fatal(err)
		}
		// A loopback address per node: --peers names a node by its
		// address, and the trace draws a process per node.
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:0", i+2))
		if err != nil {
			t.Skip(err)
		}
		self := cluster.Node{Host: nd.Host, Addr: ln.Addr().String(), NodeRank: i, Kind: cluster.KindDaemon, Source: "peers"}
		srv := &http.Server{Handler: node.Handler(node.Config{Source: &node.Local{Self: self,
			Agents: agent.Options{DataDir: nd.DataDir, CtrlRoot: nd.CtrlRoot}, SQL: e, Version: "test"}})}
		go srv.Serve(ln)
		defer srv.Close()
		addrs = append(addrs, self.Addr)
	}
	t.Setenv("PROBING_DATA_DIR", t.TempDir())
	t.Setenv("PROBING_CTRL_ROOT", t.TempDir())
	t.Setenv("PROBING_MCP_HISTORY", "off")
	t.Setenv("PROBING_AUTH_TOKEN", "")
	file := filepath.Join(t.TempDir(), "job.json")
	var errOut string
	for {
		var code int
		code, _, errOut = runCLI("export", "--trace", file, "--peers", strings.Join(addrs, ","), "--stall-seconds", "1")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if strings.Contains(errOut, "culprit (cpu_stall: rank 2") || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !strings.Contains(errOut, "on 4 rank track(s) (ranks 0-3), 3 still inside, 1 never-entered mark(s)") {
		t.Fatalf("stderr:\n%s", errOut)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := traceexport.Validate(raw); err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name, Ph string
			PID, TID int
			Args     map[string]any
		}
	}
	if err := json.Unmarshal(raw, &tr); err != nil {
		t.Fatal(err)
	}
	procs := map[int]string{}
	pidOf := map[int]int{}
	for _, e := range tr.TraceEvents {
		if e.Ph == "M" && e.Name == "process_name" {
			procs[e.PID] = e.Args["name"].(string)
		}
		if e.Ph == "X" {
			pidOf[e.TID] = e.PID
		}
	}
	if len(procs) != 2 || procs[pidOf[0]] != "node 127.0.0.2" || procs[pidOf[3]] != "node 127.0.0.3" || pidOf[0] != pidOf[1] || pidOf[2] != pidOf[3] {
		t.Errorf("processes %v, ranks' %v", procs, pidOf)
	}
}
