package procfacts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// taskStatLine is a real /proc/<pid>/stat line (cat's), with the name, state,
// ppid, utime, stime, thread count and start time put in.
func taskStatLine(pid int, comm, state string, ppid, utime, stime, threads int, start uint64) string {
	return fmt.Sprintf("%d (%s) %s %d 20164 9476 0 -1 4194304 103 0 0 0 %d %d 0 0 20 0 %d 0 %d 3133440 412 18446744073709551615 94592610287616 94592610307497 140730426900304 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 94592610323504 94592610325120 94592818085888 140730426907331 140730426907351 140730426907351 140730426908651 0\n",
		pid, comm, state, ppid, utime, stime, threads, start)
}

const taskStatusText = "Name:\todd) (name\nUmask:\t0022\nState:\tD (disk sleep)\nTgid:\t4242\nPid:\t4242\nPPid:\t1\nUid:\t1000\t1001\t1000\t1000\nGid:\t100\t100\t100\t100\nVmPeak:\t 9000 kB\nVmRSS:\t    2048 kB\nThreads:\t3\n"

type fakeTask struct {
	tid                int
	comm, state, wchan string
	syscall            string
	utime, stime       int
	noStat             bool // exited between the listing and the read
}

// fakeProc writes a /proc tree under a temporary root.
func fakeProc(t *testing.T, pid int, comm, state string, tasks []fakeTask) string {
	t.Helper()
	root := t.TempDir()
	w := func(rel, text string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w("stat", "cpu  1 2 3\nbtime 1760000000\nprocesses 5\n")
	d := fmt.Sprint(pid)
	w(d+"/stat", taskStatLine(pid, comm, state, 1, 1234, 56, len(tasks), 98765))
	w(d+"/cmdline", "python\x00-u\x00train.py\x00--lr\x001e-3\x00")
	w(d+"/status", taskStatusText)
	w(d+"/environ", "RANK=3\x00WORLD_SIZE=8\x00RANK=9\x00NOEQUALS\x00X=a=b\x00")
	for _, tk := range tasks {
		td := fmt.Sprintf("%s/task/%d/", d, tk.tid)
		if err := os.MkdirAll(filepath.Join(root, td), 0o755); err != nil {
			t.Fatal(err)
		}
		if tk.noStat {
			continue
		}
		w(td+"stat", taskStatLine(tk.tid, tk.comm, tk.state, 1, tk.utime, tk.stime, len(tasks), 98765))
		w(td+"wchan", tk.wchan)
		if tk.syscall != "" {
			w(td+"syscall", tk.syscall+"\n")
		}
	}
	return root
}

func TestReadFake(t *testing.T) {
	root := fakeProc(t, 4242, "odd) (name", "D", []fakeTask{
		{tid: 4242, comm: "odd) (name", state: "D", wchan: "nfs_wait_bit_killable", syscall: "0 0x3 0x7f 0x10"},
		{tid: 4250, comm: "pt_autograd_0", state: "S", wchan: "futex_wait_queue", syscall: "202 0x1 0x2"},
		{tid: 4251, comm: "gone", noStat: true},
		{tid: 4252, comm: "pt_nccl_watchdg", state: "R", wchan: "0", syscall: "running"},
	})
	p, err := readProcess(root, 4242)
	if err != nil {
		t.Fatal(err)
	}
	if p.Comm != "odd) (name" || p.State != "D" || p.PPID != 1 || p.UTime != 12340*time.Millisecond || p.STime != 560*time.Millisecond ||
		p.NumThreads != 4 || p.VmRSS != 2<<20 || p.UID != 1000 || p.StartTime != 98765 || strings.Join(p.Cmdline, " ") != "python -u train.py --lr 1e-3" {
		t.Errorf("%+v", p)
	}
	if !p.Started.Equal(time.Unix(1760000000, 0).Add(987650 * time.Millisecond)) {
		t.Errorf("started %v", p.Started)
	}
	if len(p.Threads) != 3 {
		t.Fatalf("%d threads (the exited one is left out): %+v", len(p.Threads), p.Threads)
	}
	if w := p.Threads[2]; w.WChan != "" || w.Syscall != -1 || w.State != "R" {
		t.Errorf("running thread: %+v", w)
	}
	if SyscallName(202) == "futex" && (p.Threads[1].Syscall != 202 || waitText(p.Threads[1]) != "futex (wchan futex_wait_queue)") {
		t.Errorf("futex thread: %+v", p.Threads[1])
	}

	d := Diagnose(p)
	text := strings.Join(d, "\n")
	for _, want := range []string{
		"pid 4242 (python -u train.py …): state D, 3 thread(s), RSS 2 MiB, up ",
		"d", "h, CPU time 12.34s user + 560ms system",
		"main thread in D state (uninterruptible sleep) in ",
		"(wchan nfs_wait_bit_killable): blocked in the kernel",
		"1 thread(s) running (R) when read: pt_nccl_watchdg (tid 4252)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in\n%s", want, text)
		}
	}
	// With a sample: a thread at 100% is named, the main thread's CPU shown.
	p.CPU, p.CPUInterval = map[int]float64{4242: 0, 4250: 0.2, 4252: 99.6}, 2*time.Second
	text = strings.Join(Diagnose(p), "\n")
	for _, want := range []string{"(wchan nfs_wait_bit_killable), 0% CPU over a 2s sample: blocked", "thread pt_nccl_watchdg (tid 4252) at 100% CPU over a 2s sample"} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in\n%s", want, text)
		}
	}

	env, err := EnvAt(root, 4242, MaxEnvBytes)
	if err != nil || len(env) != 3 || env["RANK"] != "3" || env["X"] != "a=b" {
		t.Errorf("env %v %v", env, err)
	}
	env, err = EnvAt(root, 4242, 20) // "RANK=3\0WORLD_SIZE=8\0" is 20 bytes, the next cut
	if !errors.Is(err, ErrTruncated) || len(env) != 2 || env["WORLD_SIZE"] != "8" {
		t.Errorf("truncated env %v %v", env, err)
	}
	sp := p.AsStacks(-1, "")
	if sp.Threads[0].WChan != "nfs_wait_bit_killable" || sp.Threads[0].State != "D" || !sp.Threads[0].IsMain || sp.Threads[1].Name != "pt_autograd_0" {
		t.Errorf("%+v", sp.Threads)
	}
}

func TestDiagnoseSleepers(t *testing.T) {
	tasks := []Task{{TID: 10, Comm: "python", State: "S", WChan: "futex_do_wait", Syscall: -1}}
	for i := range 11 {
		tasks = append(tasks, Task{TID: 11 + i, Comm: fmt.Sprintf("pt_autograd_%d", i), State: "S", WChan: "futex_wait_queue", Syscall: -1})
	}
	p := &Process{PID: 10, Comm: "python", State: "S", Threads: tasks}
	text := strings.Join(Diagnose(p), "\n")
	if !strings.Contains(text, "all 12 threads sleeping in futex waits: likely blocked in a collective or on a lock") {
		t.Errorf("%s", text)
	}
	p.Threads[0].WChan, p.Threads[1].WChan = "sk_wait_data", "ep_poll"
	text = strings.Join(Diagnose(p), "\n")
	for _, want := range []string{"main thread sleeping in sk_wait_data: the network: a TCPStore or rendezvous", "all 12 threads sleeping: futex_wait_queue ×10, ep_poll ×1, sk_wait_data ×1"} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in\n%s", want, text)
		}
	}
	p.State, p.PPID = "Z", 77
	if d := Diagnose(p); len(d) != 2 || !strings.Contains(d[1], "parent (pid 77)") {
		t.Errorf("%q", d)
	}
}

func TestExitsMidRead(t *testing.T) {
	root := fakeProc(t, 4242, "x", "S", []fakeTask{{tid: 4242, comm: "x", state: "S"}})
	// The task directory went: the process exited after stat was read.
	if err := os.RemoveAll(filepath.Join(root, "4242", "task")); err != nil {
		t.Fatal(err)
	}
	_, err := readProcess(root, 4242)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "pid 4242") {
		t.Errorf("%v", err)
	}
	// Every thread went between the listing and the reads, and then the
	// process directory.
	root = fakeProc(t, 4243, "x", "S", []fakeTask{{tid: 4243, noStat: true}})
	os.Remove(filepath.Join(root, "4243", "status"))
	if _, err := readProcess(root, 4243); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%v", err)
	}
	if _, err := readProcess(root, 99999); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "pid 99999") {
		t.Errorf("%v", err)
	}
	if _, err := sampleCPU(root, 99999, 0); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%v", err)
	}
}
