package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// recorded reads a reply Probing 0.2.4 gave (testdata/probing-0.2.4/README.md).
func recorded(t testing.TB, name string) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", "probing-0.2.4", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fakeProbing serves Probing 0.2.4's recorded replies on an abstract
// socket of this process (the peer check wants the agent's own pid): the
// overview lists this process's real threads, and callstack?tid= answers
// each from routes (a missing tid: Probing's 500 for a thread it cannot
// signal). It returns the agent and this process's tids, main first.
func fakeProbing(t *testing.T, routes func(tids []int) map[string]func(w http.ResponseWriter)) (*agent.Agent, []int) {
	t.Helper()
	pid := os.Getpid()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	tids := []int{pid}
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n != pid {
			tids = append(tids, n)
		}
	}
	sort.Ints(tids[1:])
	name := fmt.Sprintf("@pmcp-fake-probing-%d-%d", pid, time.Now().UnixNano())
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Skipf("abstract sockets: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	rs := routes(tids)
	var ov map[string]any
	json.Unmarshal(recorded(t, "overview.json"), &ov)
	ov["pid"], ov["main_thread"], ov["threads"] = pid, pid, tids
	ovb, _ := json.Marshal(ov)
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Path
		if tid := r.URL.Query().Get("tid"); tid != "" {
			key += "?tid=" + tid
		}
		if f := rs[key]; f != nil {
			f(w)
			return
		}
		switch {
		case r.URL.Path == "/apis/overview":
			w.Write(ovb)
		case r.URL.Path == "/apis/pythonext/callstack":
			w.WriteHeader(500)
			w.Write(recorded(t, "callstack_no_such_thread.txt"))
		case strings.HasPrefix(r.URL.Path, "/config/"):
			w.WriteHeader(500)
			fmt.Fprintf(w, "Error retrieving config '%s' not found", strings.TrimPrefix(r.URL.Path, "/config/"))
		default:
			w.WriteHeader(404)
		}
	}))
	return &agent.Agent{PID: pid, Kind: agent.KindProbing, Socket: name, Alive: true, UID: os.Getuid(),
		Identity: &agent.Identity{Rank: 1, WorldSize: 3}, IdentityFrom: "environ"}, tids
}

func serve(name string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		b, _ := os.ReadFile(filepath.Join("testdata", "probing-0.2.4", name))
		w.Write(b)
	}
}

// TestProbingEveryThreadCleaned: every thread the overview lists is asked
// for; Python frames come first, the signal handler's and Probing's own
// frames are gone, a thread Probing could not read is kept for /proc and
// said.
func TestProbingEveryThreadCleaned(t *testing.T) {
	a, tids := fakeProbing(t, func(tids []int) map[string]func(http.ResponseWriter) {
		if len(tids) < 4 {
			t.Skipf("this test process has %d threads; 4 are needed", len(tids))
		}
		return map[string]func(http.ResponseWriter){
			"/apis/pythonext/callstack?tid=" + strconv.Itoa(tids[0]): serve("callstack_main.json"),
			"/apis/pythonext/callstack?tid=" + strconv.Itoa(tids[1]): serve("callstack_python_thread.json"),
			"/apis/pythonext/callstack?tid=" + strconv.Itoa(tids[2]): serve("callstack_server_busy.json"),
		}
	})
	p := agent.Stacks(context.Background(), a, agent.StackOptions{AgentTimeout: 20 * time.Second})
	if p.Source != "probing" || p.Rank != 1 {
		t.Fatalf("source %q rank %d err %q", p.Source, p.Rank, p.Err)
	}
	byTID := map[int]stacks.Thread{}
	for _, th := range p.Threads {
		byTID[th.NativeID] = th
		for _, f := range th.Frames {
			for _, own := range []string{"probing_python", "signal_hook_registry", "9backtrace9backtrace"} {
				if strings.Contains(f.Function, own) {
					t.Errorf("thread %d keeps Probing's frame %s", th.NativeID, f.Function)
				}
			}
		}
	}
	main := byTID[tids[0]]
	if !main.IsMain || len(main.Frames) < 2 || main.Frames[0] != (stacks.Frame{File: "/tmp/pt/job.py", Line: 4, Function: "stuck_here"}) ||
		main.Frames[1].Function != "<module>" || !strings.HasPrefix(main.Frames[2].Function, "[native] ") {
		t.Errorf("main thread: %+v", main)
	}
	py := byTID[tids[1]]
	if len(py.Frames) == 0 || py.Frames[0].Function != "wait" || !strings.HasSuffix(py.Frames[0].File, "/threading.py") || py.Frames[2].Function != "worker_wait" {
		t.Errorf("Python thread: %+v", py)
	}
	if _, ok := byTID[tids[2]]; ok {
		t.Errorf("Probing's own server thread (no Python frame, its frames) is kept: %+v", byTID[tids[2]])
	}
	failed, ok := byTID[tids[3]]
	if !ok || len(failed.Frames) != 0 || failed.State == "" {
		t.Errorf("a thread Probing could not read should stay, frameless, with its /proc state: %+v", failed)
	}
	if !strings.Contains(p.Err, fmt.Sprintf("of %d threads' stacks not read", len(tids))) || !strings.Contains(p.Err, "No such process") {
		t.Errorf("err %q", p.Err)
	}
}

// TestProbingGILHeld: the overview answers but callstack never does (it
// waits for the GIL): no other thread is asked, and the error says what
// happened and what /proc shows.
func TestProbingGILHeld(t *testing.T) {
	asked := make(chan string, 100)
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	a, tids := fakeProbing(t, func(tids []int) map[string]func(http.ResponseWriter) {
		r := map[string]func(http.ResponseWriter){}
		for _, tid := range tids {
			key := "/apis/pythonext/callstack?tid=" + strconv.Itoa(tid)
			r[key] = func(http.ResponseWriter) { asked <- key; <-block }
		}
		return r
	})
	p := agent.Stacks(context.Background(), a, agent.StackOptions{AgentTimeout: 300 * time.Millisecond})
	for _, want := range []string{"did not answer within 300ms", "holds the GIL or is wedged", "/proc shows the main thread in state"} {
		if !strings.Contains(p.Err, want) {
			t.Errorf("err %q lacks %q", p.Err, want)
		}
	}
	if p.AgentErr != "timeout" || p.Source != "proc" || len(p.OSThreads) == 0 || len(p.Threads) != len(tids) {
		t.Errorf("agent err %q source %q os threads %d threads %d", p.AgentErr, p.Source, len(p.OSThreads), len(p.Threads))
	}
	if n := len(asked); n != 1 || <-asked != "/apis/pythonext/callstack?tid="+strconv.Itoa(tids[0]) {
		t.Errorf("%d callstack requests; only the main thread's should be made", n)
	}
}

// TestProbingConfigKeys: Probing's own names: server.address is its
// runtime store's (the live address), the DataFusion settings keep their
// probing. names, either spelling finds a key, and a listing shows the
// live address, not the setting's stale 0.0.0.0:0.
func TestProbingConfigKeys(t *testing.T) {
	a, _ := fakeProbing(t, func([]int) map[string]func(http.ResponseWriter) {
		return map[string]func(http.ResponseWriter){
			"/config/server.address": func(w http.ResponseWriter) { w.Write([]byte("0.0.0.0:40645")) },
			"/query":                 serve("query_df_settings.json"),
		}
	})
	ctx := context.Background()
	for key, want := range map[string]string{
		"server.address":         "server.address=0.0.0.0:40645",
		"probing.server.address": "server.address=0.0.0.0:40645",
		"server.timeout":         "probing.server.timeout=30",
		"probing.server.timeout": "probing.server.timeout=30",
		" server.log_level ":     "probing.server.log_level=info",
	} {
		got, err := agent.Config(ctx, a, key)
		if err != nil || len(got) != 1 {
			t.Errorf("%q: %v %v", key, got, err)
			continue
		}
		for k, v := range got {
			if k+"="+v != want {
				t.Errorf("%q: %s=%s, want %s", key, k, v, want)
			}
		}
	}
	all, err := agent.Config(ctx, a, "")
	if err != nil || all["server.address"] != "0.0.0.0:40645" || all["probing.server.timeout"] != "30" {
		t.Fatalf("listing: %v %v", all, err)
	}
	if _, stale := all["probing.server.address"]; stale {
		t.Errorf("the listing keeps the stale setting: %v", all)
	}
	_, err = agent.Config(ctx, a, "no.such.key")
	if ae, ok := errors.AsType[*agent.Error](err); !ok || ae.Status != 404 || !strings.Contains(err.Error(), "no config key no.such.key") || !strings.Contains(err.Error(), "server.address") {
		t.Errorf("unknown key: %v", err)
	}
}

// TestProbingRanksFromEnviron: original agents write no identity file:
// their rank, world size and role come from their environment, whatever
// data dir they name (they do not use ours), so a rank lookup finds them;
// their parent with an agent and no rank is the launcher, not a rank.
func TestProbingRanksFromEnviron(t *testing.T) {
	opt := newDirs(t)
	// A launcher (bash, PROBING=2 and no rank) and its child, a rank.
	cmd := exec.Command("bash", "-c", "RANK=2 LOCAL_RANK=0 WORLD_SIZE=3 PROBING_DP_RANK=2 sleep 300 & echo $!; wait")
	cmd.Env = append(os.Environ(), "PROBING=2", "PROBING_DATA_DIR="+t.TempDir())
	for _, k := range []string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "SLURM_LOCALID"} {
		cmd.Env = append(cmd.Env, k+"=") // not a number: not a rank
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	fmt.Fscan(out, &child)
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL); cmd.Process.Kill(); cmd.Wait() })
	if child <= 0 {
		t.Fatal("no child pid")
	}
	// $! is the fork; its environment is the rank's once it has exec'd.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", child)); strings.HasPrefix(string(b), "sleep\x00") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rank never exec'd sleep")
		}
	}
	// /proc/net/unix as it lists Probing's abstract sockets.
	opt.ProcNetUnix = filepath.Join(t.TempDir(), "unix")
	os.WriteFile(opt.ProcNetUnix, []byte("Num       RefCount Protocol Flags    Type St Inode Path\n"+
		fmt.Sprintf("0000000000000000: 00000002 00000000 00010000 0001 01 8111 @probing-%d\n", cmd.Process.Pid)+
		fmt.Sprintf("0000000000000000: 00000002 00000000 00010000 0001 01 8112 @probing-%d\n", child)), 0o644)
	found, err := agent.Discover(opt)
	if err != nil {
		t.Fatal(err)
	}
	rank, launcher := find(found, child), find(found, cmd.Process.Pid)
	if rank == nil || rank.Rank() != 2 || rank.OtherDataDir != "" || rank.Untrusted != "" || rank.IdentityFrom != "environ" ||
		rank.Identity.WorldSize != 3 || rank.Identity.LocalRank != 0 || rank.Identity.Role != "dp=2" || rank.Identity.StartTime == 0 {
		t.Fatalf("the rank: %+v %+v", rank, rank.Identity)
	}
	if launcher == nil || launcher.Rank() != -1 || launcher.Identity.Role != agent.RoleLauncher || launcher.OtherDataDir != "" {
		t.Fatalf("the launcher: %+v %+v", launcher, launcher.Identity)
	}
	sel, err := agent.Select(found, agent.Selection{Ranks: []int{2}})
	if err != nil || len(sel) != 1 || sel[0].PID != child {
		t.Fatalf("rank 2: %v %v", sel, err)
	}
	all, _ := agent.Select(found, agent.Selection{})
	if len(all) != 2 {
		t.Errorf("a plain fan-out reaches both original agents, whatever their data dir: %d", len(all))
	}
}
