package agent_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/storage/memt"
)

// The attacks of issue 9 on a shared node: another user's files and
// sockets in the world-writable data dir and control root must never make
// a root server signal, call or believe anything.

const nobody = 65534

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the attacker is a second Unix user (uid 65534), the server root")
	}
}

// sharedDirs are a data dir and a control root everyone may write to
// (1777, as /dev/shm/probing and /tmp/probing are on a shared node), in
// a place the second user can reach.
func sharedDirs(t *testing.T) agent.Options {
	t.Helper()
	var o agent.Options
	for _, p := range []*string{&o.DataDir, &o.CtrlRoot} {
		d, err := os.MkdirTemp("", "probing-shared-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		if err := os.Chmod(d, 0o1777); err != nil {
			t.Fatal(err)
		}
		*p = d
	}
	return o
}

// nobodyPython is a Python interpreter the second user can run (a pyenv
// shim under /root is not one).
func nobodyPython(t *testing.T) string {
	t.Helper()
	cands := []string{"/usr/bin/python3", "/usr/local/bin/python3"}
	if out, err := exec.Command(python(t), "-c", "import sys; print(sys.executable)").Output(); err == nil {
		cands = append([]string{strings.TrimSpace(string(out))}, cands...)
	}
	for _, c := range cands {
		cmd := exec.Command(c, "-c", "print('ok')")
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		if out, err := cmd.Output(); err == nil && strings.TrimSpace(string(out)) == "ok" {
			return c
		}
	}
	t.Skipf("no Python interpreter that uid %d can run (tried %v)", nobody, cands)
	return ""
}

// asNobody runs Python code as the second user; it prints READY when set.
func asNobody(t *testing.T, code string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(nobodyPython(t), append([]string{"-c", code}, args...)...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if sc := bufio.NewScanner(out); !sc.Scan() || sc.Text() != "READY" {
		t.Fatal("the second user's process did not start")
	}
	return cmd
}

// victim is a root process that has nothing to do with probing.
func victim(t *testing.T) (pid int, start uint64, done <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep(1)")
	}
	ch := make(chan struct{})
	go func() { cmd.Wait(); close(ch) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-ch })
	st, err := procfacts.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, st, ch
}

func identity(pid int, start uint64, extra string) string {
	return `{"agent":"probing-mcp","pid":` + strconv.Itoa(pid) + `,"start_time":` + strconv.FormatUint(start, 10) +
		`,"rank":0,"world_size":1` + extra + `}`
}

func alive(done <-chan struct{}) bool {
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func find(as []*agent.Agent, pid int) *agent.Agent {
	for _, a := range as {
		if a.PID == pid {
			return a
		}
	}
	return nil
}

// TestAnotherUserCannotMakeRootKill: the second user writes an identity
// file naming a root process, its real start time and faulthandler signal
// 9. Today's get_stacks would send SIGKILL; now the entry is untrusted,
// listed with the reason, and nothing is sent.
func TestAnotherUserCannotMakeRootKill(t *testing.T) {
	needRoot(t)
	opt := sharedDirs(t)
	pid, start, done := victim(t)
	asNobody(t, `
import os, sys
d = os.path.join(sys.argv[1], sys.argv[2])
os.makedirs(d)
with open(os.path.join(d, ".identity.json"), "w") as f:
    f.write(sys.argv[3])
open(os.path.join(d, ".stacks.txt"), "w").close()
print("READY", flush=True)
`, opt.DataDir, strconv.Itoa(pid), identity(pid, start, `,"faulthandler_signal":9,"faulthandler_file":"`+filepath.Join(opt.DataDir, strconv.Itoa(pid), ".stacks.txt")+`"`))

	found, err := agent.Discover(opt)
	if err != nil {
		t.Fatal(err)
	}
	// What get_stacks {} does: the default selection, then every stack.
	picked, _ := agent.Select(found, agent.Selection{})
	agent.CollectStacks(context.Background(), picked, agent.StackOptions{SignalTimeout: 200 * time.Millisecond})
	a := find(found, pid)
	if a == nil || !strings.Contains(a.Untrusted, "belongs to uid 65534") || !strings.Contains(a.Untrusted, "runs as uid 0") {
		t.Fatalf("the planted identity is not marked untrusted: %+v", a)
	}
	// Even asked for directly, its signal is never sent.
	agent.Stacks(context.Background(), a, agent.StackOptions{SignalTimeout: 200 * time.Millisecond})
	if _, err := agent.Select(found, agent.Selection{PIDs: []int{pid}}); err == nil || !strings.Contains(err.Error(), "untrusted") {
		t.Errorf("selecting the untrusted pid: %v", err)
	}
	if !alive(done) {
		t.Fatal("the root process was killed")
	}
}

// TestSignalOnlyWhatIsCaught: even an identity file root itself wrote is
// not obeyed when its signal would kill: signal 9 is no stack-dump signal,
// and a process that does not catch SIGUSR2 would die of it.
func TestSignalOnlyWhatIsCaught(t *testing.T) {
	needRoot(t)
	opt := sharedDirs(t)
	pid, start, done := victim(t)
	d := filepath.Join(opt.DataDir, strconv.Itoa(pid))
	os.MkdirAll(d, 0o755)
	for _, sig := range []int{9, int(syscall.SIGUSR2)} {
		extra := `,"faulthandler_signal":` + strconv.Itoa(sig) + `,"faulthandler_file":"` + filepath.Join(d, ".stacks.txt") + `"`
		os.WriteFile(filepath.Join(d, ".identity.json"), []byte(identity(pid, start, extra)), 0o644)
		found, err := agent.Discover(opt)
		if err != nil {
			t.Fatal(err)
		}
		picked, _ := agent.Select(found, agent.Selection{})
		procs := agent.CollectStacks(context.Background(), picked, agent.StackOptions{SignalTimeout: 200 * time.Millisecond})
		if len(procs) != 1 || !strings.Contains(procs[0].Err, "signal refused") {
			t.Errorf("signal %d: %+v", sig, procs)
		}
		if !alive(done) {
			t.Fatalf("signal %d killed the process", sig)
		}
	}
}

// TestAnotherUsersFakeAgent: the second user runs a process posing as an
// agent, with a control socket in the shared root and an identity file
// for its own pid. A root server with the job's own agent beside it
// cannot tell whose job to serve and says so; told the job's user, it
// never calls the fake, whose made-up stacks never appear.
func TestAnotherUsersFakeAgent(t *testing.T) {
	needRoot(t)
	opt := sharedDirs(t)
	real := startAgentIn(t, opt, "print('READY', flush=True)\nimport time\ntime.sleep(600)\n", "RANK=1", "WORLD_SIZE=2")
	fake := asNobody(t, `
import json, os, socket, sys, http.server, socketserver
data, ctrl = sys.argv[1], sys.argv[2]
pid = os.getpid()
with open("/proc/self/stat") as f:
    start = int(f.read().rsplit(")", 1)[1].split()[19])
d = os.path.join(data, str(pid))
os.makedirs(d)
hit = os.path.join(d, "hit")
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        open(hit, "a").write(self.path + "\n")
        body = json.dumps({"pid": pid, "threads": [{"id": 1, "native_id": pid, "name": "MainThread", "is_main": True,
                           "frames": [{"file": "/evil/made_up.py", "line": 1, "function": "blame_rank_0"}]}]}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
srv = socketserver.UnixStreamServer(os.path.join(ctrl, "%d.sock" % pid), H)
with open(os.path.join(d, ".identity.json"), "w") as f:
    json.dump({"agent": "probing-mcp", "pid": pid, "start_time": start, "rank": 0, "world_size": 2,
               "socket": os.path.join(ctrl, "%d.sock" % pid)}, f)
print("READY", flush=True)
srv.serve_forever()
`, opt.DataDir, opt.CtrlRoot)
	fpid := fake.Process.Pid

	found, err := agent.Discover(opt)
	if err != nil {
		t.Fatal(err)
	}
	if picked, _ := agent.Select(found, agent.Selection{}); len(picked) != 0 {
		t.Errorf("with two users' agents and no PROBING_MCP_JOB_USER, the default selection took %d", len(picked))
	}
	if a := find(found, fpid); a == nil || !strings.Contains(a.Untrusted, "PROBING_MCP_JOB_USER") {
		t.Errorf("ambiguity not said: %+v", a)
	}

	opt.Scope = &procfacts.Scope{Self: 0, UIDs: []int{0}}
	found, err = agent.Discover(opt)
	if err != nil {
		t.Fatal(err)
	}
	picked, err := agent.Select(found, agent.Selection{})
	if err != nil || len(picked) != 1 || picked[0].PID != real.pid() {
		t.Fatalf("told the job's user, the selection is %+v (%v)", picked, err)
	}
	if a := find(found, fpid); a == nil || !strings.Contains(a.Untrusted, "another user's") {
		t.Errorf("the fake is not untrusted: %+v", a)
	}
	if _, err := agent.Select(found, agent.Selection{Ranks: []int{0}}); err == nil {
		t.Error("the fake's rank 0 was selectable")
	}
	// Even named directly, it is not called.
	p := agent.Stacks(context.Background(), find(found, fpid), agent.StackOptions{})
	b, _ := json.Marshal(p)
	if strings.Contains(string(b), "made_up") {
		t.Errorf("the fake's stacks were used: %s", b)
	}
	if _, err := os.Stat(filepath.Join(opt.DataDir, strconv.Itoa(fpid), "hit")); err == nil {
		t.Error("the fake agent was called")
	}
}

// TestAbstractSocketSquatter: anyone can bind the abstract socket
// @probing-<pid> of a process that has none (the original Probing agent's
// name). The listener's credentials must be that process's.
func TestAbstractSocketSquatter(t *testing.T) {
	pid, _, _ := victim(t)
	ln, err := net.Listen("unix", "@probing-"+strconv.Itoa(pid))
	if err != nil {
		t.Skipf("abstract sockets: %v", err)
	}
	defer ln.Close()
	hits := 0
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		w.Write([]byte(`[{"PyFrame":{"file":"/evil/made_up.py","func":"blame_rank_0","lineno":1}}]`))
	}))
	opt := newDirs(t)
	found, err := agent.Discover(opt)
	if err != nil {
		t.Fatal(err)
	}
	a := find(found, pid)
	if a == nil || a.Kind != agent.KindProbing {
		t.Fatalf("the squatted socket is not found: %+v", a)
	}
	p := agent.Stacks(context.Background(), a, agent.StackOptions{})
	b, _ := json.Marshal(p)
	if strings.Contains(string(b), "made_up") || !strings.Contains(p.Err, "served by pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("the squatter answered for pid %d: %s", pid, b)
	}
}

// TestPipeMustBeAFIFO: the dump pipe named by an identity file is written
// only if it is a FIFO of the process's owner; a regular file in its
// place (here a file of root's) is left untouched.
func TestPipeMustBeAFIFO(t *testing.T) {
	opt := newDirs(t)
	pid, start, _ := victim(t)
	d := filepath.Join(opt.DataDir, strconv.Itoa(pid))
	os.MkdirAll(d, 0o755)
	target := filepath.Join(t.TempDir(), "precious_")
	os.WriteFile(target+"0.pipe", []byte("precious"), 0o644)
	os.WriteFile(filepath.Join(d, ".identity.json"), []byte(identity(pid, start, `,"fr_pipe_prefix":"`+target+`","fr_dump_prefix":"`+target+`dump_"`)), 0o644)
	found, err := agent.Discover(opt)
	if err != nil {
		t.Fatal(err)
	}
	a := find(found, pid)
	if a == nil || a.Untrusted != "" {
		t.Fatalf("agent %+v", a)
	}
	_, err = agent.SnapshotViaPipe(context.Background(), a, time.Second)
	if b, _ := os.ReadFile(target + "0.pipe"); string(b) != "precious" {
		t.Fatalf("the regular file was written: %q", b)
	}
	if err == nil || !strings.Contains(err.Error(), "is not a FIFO") {
		t.Errorf("error: %v", err)
	}
}

// TestRingsOfAReusedPid: a directory that holds only rings is alive only
// if its pid is still the process that wrote them (their recorded start
// time), not whatever process got the pid since.
func TestRingsOfAReusedPid(t *testing.T) {
	opt := newDirs(t)
	me := os.Getpid()
	path := filepath.Join(opt.DataDir, strconv.Itoa(me), "python.x")
	w, err := memt.Create(path, []memt.Column{{Name: "timestamp", Type: memt.I64}}, memt.Options{ChunkSize: 256, NumChunks: 2})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	found, err := agent.Discover(opt)
	if a := find(found, me); err != nil || a == nil || !a.Alive {
		t.Fatalf("the writer's own rings: %+v %v", a, err)
	}
	// The same pid, another process: the recorded start time differs.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], 1)
	if _, err := f.WriteAt(b[:], 48); err != nil { // creator start time
		t.Fatal(err)
	}
	f.Close()
	found, err = agent.Discover(opt)
	if a := find(found, me); err != nil || a == nil || a.Alive {
		t.Fatalf("rings of a reused pid taken as alive: %+v %v", a, err)
	}
}

// The node daemon's GPU rings (identity agent probing-mcp-node) are a
// rings-only process of role node and no rank, whatever rank its
// environment inherited from the rank that started it.
func TestNodeDaemonRingsAreNoRank(t *testing.T) {
	opt := newDirs(t)
	me := os.Getpid()
	dir := filepath.Join(opt.DataDir, strconv.Itoa(me))
	w, err := memt.Create(filepath.Join(dir, "gpu.nvml"), []memt.Column{{Name: "ts", Type: memt.I64}}, memt.Options{ChunkSize: 256, NumChunks: 2})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	st, _ := procfacts.StartTime(me)
	b, _ := json.Marshal(procfacts.Identity{Agent: procfacts.AgentNode, PID: me, StartTime: st, Rank: -1, LocalRank: -1, NodeRank: -1, Role: "node"})
	if err := os.WriteFile(filepath.Join(dir, procfacts.IdentityFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RANK", "0")
	found, err := agent.Discover(opt)
	a := find(found, me)
	if err != nil || a == nil || a.Kind != agent.KindRingOnly || a.Rank() != -1 || a.Identity == nil || a.Identity.Role != "node" {
		t.Fatalf("node daemon dir: %+v %v", a, err)
	}
}
