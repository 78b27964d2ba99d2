package diagnosis

import (
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/stacks"
)

var (
	dataLoaderFrames = []stacks.Frame{
		{File: "/usr/lib/python3.11/multiprocessing/connection.py", Line: 440, Function: "_poll"},
		{File: "/usr/lib/python3.11/multiprocessing/queues.py", Line: 113, Function: "get"},
		{File: "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", Line: 1250, Function: "_try_get_data"},
		{File: "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", Line: 1420, Function: "_get_data"},
		{File: "/job/train.py", Line: 180, Function: "train_epoch"},
	}
	uploadFrames = []stacks.Frame{
		{File: "/usr/lib/python3.11/subprocess.py", Line: 2011, Function: "_wait"},
		{File: "/usr/lib/python3.11/subprocess.py", Line: 1264, Function: "wait"},
		{File: "/usr/lib/python3.11/subprocess.py", Line: 550, Function: "run"},
		{File: "/job/train.py", Line: 140, Function: "upload_checkpoint"},
	}
)

// A rank waiting for its DataLoader worker: the worker blocked opening a
// FIFO is named first (pid, state, wchan, the path quoted), ahead of the
// resource tracker, and the confirm hint points at it.
func TestSubCauseDataLoaderWorker(t *testing.T) {
	in := noClockJob(map[int][]stacks.Frame{0: barrierFrames, 1: barrierFrames, 2: dataLoaderFrames, 3: barrierFrames}, nil)
	in.Ranks[2].Waits = &evidence.Waits{Children: []evidence.SubProcess{
		{Child: procfacts.Child{PID: 4240, PPID: 2002, Cmdline: "python -c from multiprocessing.resource_tracker import main;main(5)", State: "S", WChan: "pipe_read_wait", AgeS: 90, Depth: 1,
			IO: &procfacts.IOWait{Syscall: "read", Path: "pipe:[77]", Kind: "pipe"}}},
		{Child: procfacts.Child{PID: 4242, PPID: 2002, Cmdline: "python train.py", State: "S", WChan: "wait_for_partner", AgeS: 95, CPUS: 0.4, IdleS: 94.6, Depth: 1,
			IO: &procfacts.IOWait{Syscall: "openat", Path: "/data/shard \"3\".bin", Kind: "fifo"}}},
	}}
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	if h.Category != CatCPUStall || h.Culprits != "2" {
		t.Fatalf("%+v", h)
	}
	if !strings.Contains(rep.Summary, `(⟦train_epoch⟧), waiting for its DataLoader worker pid 4242, blocked opening FIFO ⟦shard "3".bin⟧;`) {
		t.Errorf("summary: %s", rep.Summary)
	}
	text := evidenceText(h)
	for _, w := range []string{"rank 2's main thread waits for its DataLoader workers: pid 4242", "wait_for_partner", `opening ⟦/data/shard "3".bin⟧`, "a FIFO", "in wait_for_partner, asleep for the last 95 s; up 95 s, 0.4 s of CPU"} {
		if !strings.Contains(text, w) {
			t.Errorf("evidence does not say %q:\n%s", w, text)
		}
	}
	if !strings.Contains(text, "also pid 4240 (its other") || strings.Contains(text, "pipe:[77]") {
		t.Errorf("the resource tracker is not named last, by pid only:\n%s", text)
	}
	if !strings.HasPrefix(h.Confirm, "/proc/4242/wchan") {
		t.Errorf("confirm %q", h.Confirm)
	}
	if strings.Contains(text, "python train.py") {
		t.Errorf("a worker's command line (the rank's own) is noise:\n%s", text)
	}
}

// A rank waiting for its upload command: the child the main thread's wait4
// names, with its command line quoted as job data and how long it has run.
func TestSubCauseChildProcess(t *testing.T) {
	in := noClockJob(map[int][]stacks.Frame{0: uploadFrames, 1: barrierFrames, 2: barrierFrames, 3: barrierFrames}, nil)
	in.Ranks[0].Waits = &evidence.Waits{IO: &procfacts.IOWait{Syscall: "wait4", Path: "5151", Kind: "child"}, More: 2,
		Children: []evidence.SubProcess{
			{Child: procfacts.Child{PID: 5150, Cmdline: "other", State: "S", AgeS: -1, Depth: 1}},
			{Child: procfacts.Child{PID: 5151, Cmdline: "/tmp/upload.sh /ckpt/step-10.pt\n; rm -rf", CmdTruncated: true, State: "S", WChan: "hrtimer_nanosleep", AgeS: 41, Depth: 1}},
		}}
	rep := Diagnose(in)
	h := rep.Hypotheses[0]
	text := evidenceText(h)
	if !strings.Contains(rep.Summary, `(⟦upload_checkpoint⟧), waiting for its child process pid 5151 (⟦/tmp/upload.sh /ckpt/step-10.pt\n; rm -r⟧…[+1 bytes]…);`) {
		t.Errorf("summary: %s", rep.Summary)
	}
	for _, w := range []string{"rank 0's main thread waits for its child process: pid 5151", `command ⟦/tmp/upload.sh /ckpt/step-10.pt\n; rm -rf⟧…`, "; up 41 s", "also pid 5150 (its other children, no wait of their own seen); 2 more not read"} {
		if !strings.Contains(text, w) {
			t.Errorf("evidence does not say %q:\n%s", w, text)
		}
	}
	if h.Culprits != "0" || h.Category != CatCPUStall {
		t.Errorf("%+v", h)
	}
}

// subprocess.run(shell=True): the shell the wait4 names waits for its
// command, which is shown as well.
func TestSubCauseShellCommand(t *testing.T) {
	in := noClockJob(map[int][]stacks.Frame{0: uploadFrames, 1: barrierFrames, 2: barrierFrames, 3: barrierFrames}, nil)
	in.Ranks[0].Waits = &evidence.Waits{IO: &procfacts.IOWait{Syscall: "wait4", Path: "600", Kind: "child"},
		Children: []evidence.SubProcess{
			{Child: procfacts.Child{PID: 600, PPID: 2000, Cmdline: "/bin/sh -c aws s3 cp x s3://y", State: "S", WChan: "do_wait", AgeS: 30, Depth: 1,
				IO: &procfacts.IOWait{Syscall: "wait4", Path: "-1", Kind: "child"}}},
			{Child: procfacts.Child{PID: 601, PPID: 600, Cmdline: "aws s3 cp x s3://y", State: "S", WChan: "do_epoll_wait", AgeS: 30, Depth: 2}},
		}}
	text := evidenceText(Diagnose(in).Hypotheses[0])
	for _, w := range []string{`pid 600, command ⟦/bin/sh -c aws s3 cp x s3://y⟧ (state S, in do_wait; up 30 s, 0.0 s of CPU) waiting for its own child`,
		`pid 601 (a grandchild, under pid 600), command ⟦aws s3 cp x s3://y⟧`} {
		if !strings.Contains(text, w) {
			t.Errorf("evidence does not say %q:\n%s", w, text)
		}
	}
}

// A worker that computes (R) is said to be running, not blocked.
func TestSubCauseBusyWorker(t *testing.T) {
	in := noClockJob(map[int][]stacks.Frame{0: barrierFrames, 1: dataLoaderFrames, 2: barrierFrames, 3: barrierFrames}, nil)
	in.Ranks[1].Waits = &evidence.Waits{Children: []evidence.SubProcess{{Child: procfacts.Child{PID: 77, State: "R", AgeS: 50, CPUS: 49, Depth: 1}}}}
	text := evidenceText(Diagnose(in).Hypotheses[0])
	if !strings.Contains(text, "pid 77 (state R; up 50 s, 49.0 s of CPU); pid 77 is running, not blocked") {
		t.Errorf("%s", text)
	}
}

// A rank reading a FIFO itself; and a rank that waits in a collective
// gets no such line (only culprits are explained).
func TestSubCauseOwnRead(t *testing.T) {
	in := noClockJob(map[int][]stacks.Frame{0: barrierFrames, 1: loaderFrames, 2: barrierFrames, 3: barrierFrames}, nil)
	in.Ranks[1].Waits = &evidence.Waits{IO: &procfacts.IOWait{Syscall: "read", Path: "/data/shard-1.bin", Kind: "fifo"}}
	in.Ranks[0].Waits = &evidence.Waits{IO: &procfacts.IOWait{Syscall: "read", Path: "/data/x", Kind: "file"}}
	rep := Diagnose(in)
	text := evidenceText(rep.Hypotheses[0])
	if !strings.Contains(text, `rank 1's main thread is blocked (state S) reading ⟦/data/shard-1.bin⟧ (read), a FIFO`) {
		t.Errorf("%s", text)
	}
	if strings.Contains(text, "/data/x") {
		t.Errorf("a victim's read explained:\n%s", text)
	}
	if !strings.Contains(rep.Summary, `(⟦read_shard⟧), blocked reading FIFO ⟦shard-1.bin⟧;`) {
		t.Errorf("summary: %s", rep.Summary)
	}
}
