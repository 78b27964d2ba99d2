package stacks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/jobtext/jobtexttest"
)

const (
	lib   = "/usr/lib/python3.11/"
	torch = "/opt/venv/lib/python3.11/site-packages/torch/"
)

func fr(spec string) []Frame {
	var out []Frame
	for _, s := range strings.Split(spec, " ") {
		fn, rest, _ := strings.Cut(s, "@")
		file, line, _ := strings.Cut(rest, ":")
		var n int
		fmt.Sscan(line, &n)
		out = append(out, Frame{File: file, Line: n, Function: fn})
	}
	return out
}

var (
	threadTail  = " run@" + lib + "threading.py:982 _bootstrap_inner@" + lib + "threading.py:1045 _bootstrap@" + lib + "threading.py:1002"
	mainTail    = " train_step@/job/train.py:120 main@/job/train.py:200 <module>@/job/train.py:210"
	inAllReduce = fr("all_reduce@" + torch + "distributed/distributed_c10d.py:2050 wrapper@" + torch + "distributed/c10d_logger.py:79" + mainTail)
	inLoader    = fr("wait@" + lib + "threading.py:320 get@" + lib + "queue.py:180 _get_data@" + torch + "utils/data/dataloader.py:1133 __next__@" + torch + "utils/data/dataloader.py:630" + mainTail)
	pinIdle     = fr("select@" + lib + "selectors.py:415 wait@" + lib + "multiprocessing/connection.py:947 _poll@" + lib + "multiprocessing/connection.py:440 poll@" + lib + "multiprocessing/connection.py:257 get@" + lib + "multiprocessing/queues.py:113 do_one_step@" + torch + "utils/data/_utils/pin_memory.py:31 _pin_memory_loop@" + torch + "utils/data/_utils/pin_memory.py:54" + threadTail)
	poolIdle    = fr("_worker@" + lib + "concurrent/futures/thread.py:81" + threadTail)
	beatSleep   = fr("loop@/job/heartbeat.py:22" + threadTail)
	beatSend    = fr("send@/job/heartbeat.py:30 loop@/job/heartbeat.py:24" + threadTail)
)

// job is 16 ranks: all main threads in all_reduce but rank 9's (in the
// data loader); every rank has an idle pin-memory thread, two idle pool
// workers and a heartbeat thread, asleep except rank 3's (sending).
func job() []Process {
	var ps []Process
	for r := 0; r < 16; r++ {
		p := Process{PID: 1000 + r, Rank: r, Host: "node-a", Source: SourceAgent, CapturedAt: time.Unix(1760000000, 0)}
		main := inAllReduce
		if r == 9 {
			main = inLoader
		}
		beat := beatSleep
		if r == 3 {
			beat = beatSend
		}
		p.Threads = []Thread{
			{ID: 1, NativeID: 1000 + r, Name: "MainThread", IsMain: true, Frames: main},
			{ID: 2, Name: fmt.Sprintf("Thread-%d (_pin_memory_loop)", 3+r%4), Daemon: true, Frames: pinIdle},
			{ID: 3, Name: fmt.Sprintf("ThreadPoolExecutor-0_%d", r%2), Daemon: true, Frames: poolIdle},
			{ID: 5, Name: fmt.Sprintf("ThreadPoolExecutor-0_%d", 1-r%2), Daemon: true, Frames: poolIdle},
			{ID: 4, Name: "heartbeat", Daemon: true, Frames: beat},
		}
		ps = append(ps, p)
	}
	return ps
}

func TestMergeOutlier(t *testing.T) {
	m := Merge(job(), MergeOptions{})
	if m.Processes != 16 || m.Threads != 80 || m.Stacks != 6 || m.Ranks != "0-15" {
		t.Fatalf("counts: %d processes, %d threads, %d stacks, ranks %q", m.Processes, m.Threads, m.Stacks, m.Ranks)
	}
	want := []struct {
		role, where string
		outlier     bool
		count       int
		head        string
	}{
		{RoleMain, "rank 9", true, 1, "wait"},
		{"thread ⟦loop⟧ (⟦heartbeat.py⟧)", "rank 3", true, 1, "send"},
		{RoleMain, "ranks 0-8,10-15", false, 15, "all_reduce"},
		{"thread ⟦loop⟧ (⟦heartbeat.py⟧)", "ranks 0-2,4-15", false, 15, "loop"},
	}
	if len(m.Groups) != len(want) {
		t.Fatalf("%d groups: %+v", len(m.Groups), m.Groups)
	}
	for i, w := range want {
		g := m.Groups[i]
		if g.Role != w.role || g.Where != w.where || g.Outlier != w.outlier || g.Count != w.count || g.Frames[0].Function != w.head {
			t.Errorf("group %d: %s %q outlier=%v count=%d head=%s; want %+v", i, g.Role, g.Where, g.Outlier, g.Count, g.Frames[0].Function, w)
		}
	}
	if m.IdleGroups != 2 || m.IdleThreads != 48 || m.Truncated {
		t.Errorf("idle %d groups %d threads, truncated %v", m.IdleGroups, m.IdleThreads, m.Truncated)
	}
	const summary = "main thread: ranks 0-8,10-15 in ⟦all_reduce⟧ (⟦distributed_c10d.py⟧:2050); rank 9 in ⟦_get_data⟧ (⟦dataloader.py⟧:1133) ← odd one out" +
		" | thread ⟦loop⟧ (⟦heartbeat.py⟧): rank 3 in ⟦send⟧ (⟦heartbeat.py⟧:30) ← odd one out"
	if m.Summary != summary {
		t.Errorf("summary:\n got %s\nwant %s", m.Summary, summary)
	}
	if g := m.Groups[2]; len(g.Members) != 15 || g.MembersOmitted != 0 || g.Members[9].Rank != 10 {
		t.Errorf("members %d + %d omitted", len(g.Members), g.MembersOmitted)
	}
	m = Merge(job(), MergeOptions{MaxMembers: 4})
	if g := m.Groups[2]; len(g.Members) != 4 || g.MembersOmitted != 11 || g.Members[3].Rank != 3 || !m.Truncated {
		t.Errorf("MaxMembers 4: %d + %d omitted", len(g.Members), g.MembersOmitted)
	}
}

func TestMergeIdleAndNames(t *testing.T) {
	m := Merge(job(), MergeOptions{IncludeIdle: true})
	if len(m.Groups) != 6 || m.IdleGroups != 0 {
		t.Fatalf("%d groups, %d collapsed", len(m.Groups), m.IdleGroups)
	}
	pool, pin := m.Groups[4], m.Groups[5] // the larger idle group first
	if pool.Count != 32 || pool.Processes != 16 || !pin.Idle || pin.Count != 16 || pin.Role != "thread ⟦_pin_memory_loop⟧ (⟦pin_memory.py⟧)" || pin.Where != "ranks 0-15" {
		t.Errorf("pin memory group: %+v", pin)
	}
	// Thread-3 … Thread-6 are one name, and one group.
	if strings.Join(pin.Names, "|") != "Thread-N (_pin_memory_loop)" || strings.Join(pool.Names, "|") != "ThreadPoolExecutor-N_N" {
		t.Errorf("names %q %q", pin.Names, pool.Names)
	}
	if !IsIdle(poolIdle) || !IsIdle(pinIdle) || IsIdle(beatSleep) || IsIdle(inAllReduce) || IsIdle(nil) {
		t.Error("IsIdle")
	}
	// A main thread in queue.get is never collapsed, whatever IsIdle says.
	ps := job()
	for i := range ps {
		ps[i].Threads[0].Frames = fr("wait@" + lib + "threading.py:320 get@" + lib + "queue.py:180" + mainTail)
	}
	m = Merge(ps, MergeOptions{})
	if len(m.Groups) != 3 || m.Groups[1].Role != RoleMain || m.Groups[1].Idle || m.Groups[1].Count != 16 {
		t.Errorf("main threads in queue.get: %+v", m.Groups)
	}
	if !strings.HasPrefix(m.Summary, "main thread: ranks 0-15 in ⟦train_step⟧ (⟦train.py⟧:120) | ") {
		t.Errorf("summary %s", m.Summary)
	}
}

func TestMergeDeterministic(t *testing.T) {
	ref, _ := json.Marshal(Merge(job(), MergeOptions{IncludeIdle: true}))
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		ps := job()
		rng.Shuffle(len(ps), func(a, b int) { ps[a], ps[b] = ps[b], ps[a] })
		for j := range ps {
			th := ps[j].Threads
			rng.Shuffle(len(th), func(a, b int) { th[a], th[b] = th[b], th[a] })
		}
		got, _ := json.Marshal(Merge(ps, MergeOptions{IncludeIdle: true}))
		if !bytes.Equal(got, ref) {
			t.Fatalf("order %d differs:\n%s\n%s", i, got, ref)
		}
	}
}

func TestMergeTruncation(t *testing.T) {
	m := Merge(job(), MergeOptions{MaxGroups: 1, MaxMembers: 4})
	if len(m.Groups) != 1 || m.OmittedGroups != 3 || m.OmittedThreads != 31 || !m.Truncated || m.IdleThreads != 48 {
		t.Errorf("MaxGroups 1: %d groups, %d omitted (%d threads), truncated %v", len(m.Groups), m.OmittedGroups, m.OmittedThreads, m.Truncated)
	}
	if !strings.Contains(m.Summary, "rank 9") || !strings.Contains(m.Summary, "ranks 0-8,10-15") {
		t.Errorf("the summary covers omitted groups too: %s", m.Summary)
	}

	deep := make([]Frame, 50)
	for i := range deep {
		deep[i] = Frame{File: "/job/r.py", Line: i + 1, Function: fmt.Sprintf("f%d", i)}
	}
	ps := []Process{{PID: 7, Rank: -1, Threads: []Thread{{IsMain: true, Frames: deep}}}}
	m = Merge(ps, MergeOptions{MaxFrames: 10})
	g := m.Groups[0]
	if g.FramesOmitted != 40 || len(g.Frames) != 11 || !m.Truncated {
		t.Fatalf("%d frames, %d omitted", len(g.Frames), g.FramesOmitted)
	}
	// 8 innermost, the marker, 2 outermost.
	if g.Frames[7].Function != "f7" || g.Frames[8].File != "" || g.Frames[8].Function != "... 40 frames omitted ..." || g.Frames[9].Function != "f48" || g.Frames[10].Function != "f49" {
		t.Errorf("elision: %v", funcs(g.Frames))
	}
	if deep[8].Function != "f8" {
		t.Error("the input was modified")
	}
	if g.Where != "pid 7" || g.PIDs != "7" || g.Ranks != "" {
		t.Errorf("unranked: %q %q %q", g.Where, g.PIDs, g.Ranks)
	}
	// The text shows 8 frame lines and counts the rest; the merge's
	// marker shows where it falls within them.
	if text := m.Text(TextOptions{}); !strings.Contains(text, "⟦f7⟧ ⟦/job/r.py⟧:8\n    … 3 more outer frame(s)") {
		t.Errorf("%s", text)
	}
	if text := Merge(ps, MergeOptions{MaxFrames: 6}).Text(TextOptions{}); !strings.Contains(text, "... 44 frames omitted ... (max_frames raises the limit)") {
		t.Errorf("%s", text)
	}
}

func TestMergeEvenSplitLinesHostsFailures(t *testing.T) {
	a := fr("step@/job/train.py:10 <module>@/job/train.py:1")
	b := fr("step@/job/train.py:11 <module>@/job/train.py:1")
	var ps []Process
	for r := 0; r < 8; r++ {
		f := a
		if r >= 4 {
			f = b
		}
		ps = append(ps, Process{PID: 100 + r, Rank: r, Host: fmt.Sprintf("node-%d", r/4), Threads: []Thread{{IsMain: true, Frames: f}}})
	}
	m := Merge(ps, MergeOptions{})
	if len(m.Groups) != 2 || m.Groups[0].Outlier || m.Groups[1].Outlier || m.Groups[0].Where != "ranks 0-3" {
		t.Errorf("4/4 split: %+v", m.Groups)
	}
	m = Merge(ps, MergeOptions{IgnoreLines: true})
	if len(m.Groups) != 1 || m.Groups[0].Frames[0].Line != 0 || m.Groups[0].Frames[1].Line != 1 {
		t.Errorf("IgnoreLines: %+v", m.Groups)
	}
	// Unknown ranks on two hosts: host:pid, kept apart from the ranks; a
	// failed capture is reported.
	ps = append(ps[:2:2], Process{PID: 55, Rank: -1, Host: "node-1", Threads: []Thread{{IsMain: true, Frames: a}}},
		Process{PID: 56, Rank: 5, Host: "node-1", Source: SourceAgent, Err: "timeout: the agent did not answer"})
	m = Merge(ps, MergeOptions{})
	if g := m.Groups[0]; g.Where != "ranks 0-1" || g.Processes != 2 {
		t.Errorf("where %q", g.Where)
	}
	if g := m.Groups[1]; g.Where != "pid ⟦node-1⟧:55" || g.Role != RoleMain+Rankless || g.Outlier {
		t.Errorf("the process without a rank: %+v", g)
	}
	if len(m.Failed) != 1 || !strings.HasSuffix(m.Summary, " | without a rank: pid ⟦node-1⟧:55 in ⟦step⟧ (⟦train.py⟧:10); 1 capture(s) failed or partial (rank 5)") {
		t.Errorf("failures %+v, summary %s", m.Failed, m.Summary)
	}
}

// Threads from /proc have no frames: they group by name, state and wait
// channel, and a D-state thread is not idle.
func TestMergeProcThreads(t *testing.T) {
	var ps []Process
	for r := 0; r < 4; r++ {
		st, wc := "S", "futex_do_wait"
		if r == 2 {
			st, wc = "D", "nfs_wait_bit_killable"
		}
		ps = append(ps, Process{PID: 10 + r, Rank: r, Source: SourceProc, Threads: []Thread{
			{NativeID: 10 + r, Name: "python", IsMain: true, State: st, WChan: wc},
			{NativeID: 20 + r, Name: fmt.Sprintf("pt_autograd_%d", r), State: "S", WChan: "futex_do_wait"},
		}})
	}
	m := Merge(ps, MergeOptions{})
	if len(m.Groups) != 2 || !m.Groups[0].Outlier || m.Groups[0].Where != "rank 2" || m.Groups[0].States["D"] != 1 {
		t.Fatalf("%+v", m.Groups)
	}
	if m.IdleGroups != 1 || m.IdleThreads != 4 {
		t.Errorf("autograd threads asleep: %d/%d", m.IdleGroups, m.IdleThreads)
	}
	if !strings.Contains(m.Summary, "rank 2 with no Python frame (state D×1, wchan ⟦nfs_wait_bit_killable⟧) ← odd one out") {
		t.Errorf("summary %s", m.Summary)
	}
}

func TestMergeEmpty(t *testing.T) {
	m := Merge(nil, MergeOptions{})
	if m.Summary != "no threads captured from 0 process(es)" || m.Groups == nil || len(m.Groups) != 0 {
		t.Errorf("%+v", m)
	}
	if text := m.Text(TextOptions{}); !strings.HasPrefix(text, "no threads captured from 0 process(es)\n0 process(es), 0 thread(s)") {
		t.Errorf("%q", text)
	}
}

func TestNormalizeName(t *testing.T) {
	for in, want := range map[string]string{"Thread-3 (worker)": "Thread-N (worker)", "pt_autograd_12": "pt_autograd_N", "MainThread": "MainThread", "": ""} {
		if got := NormalizeName(in); got != want {
			t.Errorf("%q: %q", in, got)
		}
	}
}

// TestText: the one rendering (get_stacks' text, the demo's): the counts,
// the odd one out first with its innermost frame, the majority's ranks,
// the idle threads counted and a partial capture said.
func TestText(t *testing.T) {
	ps := job()
	ps[5].Err = "partial: 1 thread unreadable"
	out := Merge(ps, MergeOptions{}).Text(TextOptions{})
	for _, want := range []string{
		"\n16 process(es) (ranks 0-15), 80 thread(s), 6 distinct stack(s).\n",
		"\n[1] ODD ONE OUT main thread, rank 9: 1 thread(s)\n    ⟦wait⟧ ⟦threading.py⟧:320\n",
		"[3] main thread, ranks 0-8,10-15: 15 thread(s)",
		"Idle: 48 thread(s) in 2 stack(s)",
		"rank 5 (pid 1005) on ⟦node-a⟧, agent: ⟦partial: 1 thread unreadable⟧",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// TestMergeLauncherIsNotARank: a process without a rank (torchrun's
// launcher, activated with PROBING=2) is listed with roles of its own, so
// it is never an odd one out among the ranks, and the summary is about the
// ranks alone.
func TestMergeLauncherIsNotARank(t *testing.T) {
	ps := job()
	launcherWait := fr("sleep@" + lib + "time.py:1 _poll@" + torch + "distributed/elastic/agent/server/api.py:900 run@" + torch + "distributed/run.py:800 <module>@/usr/bin/torchrun:8")
	ps = append(ps, Process{PID: 999, Rank: -1, Host: "node-a", Source: SourceAgent, CapturedAt: time.Unix(1760000000, 0),
		Threads: []Thread{{ID: 1, NativeID: 999, Name: "MainThread", IsMain: true, Frames: launcherWait}}})
	m := Merge(ps, MergeOptions{})
	const summary = "main thread: ranks 0-8,10-15 in ⟦all_reduce⟧ (⟦distributed_c10d.py⟧:2050); rank 9 in ⟦_get_data⟧ (⟦dataloader.py⟧:1133) ← odd one out" +
		" | thread ⟦loop⟧ (⟦heartbeat.py⟧): rank 3 in ⟦send⟧ (⟦heartbeat.py⟧:30) ← odd one out | without a rank: pid 999 in ⟦_poll⟧ (⟦api.py⟧:900)"
	if m.Summary != summary {
		t.Errorf("summary:\n got %s\nwant %s", m.Summary, summary)
	}
	var found bool
	for _, g := range m.Groups {
		if g.Role == RoleMain+Rankless {
			found = true
			if g.Outlier || g.Where != "pid 999" {
				t.Errorf("launcher group: %+v", g)
			}
		}
		if g.Outlier && strings.Contains(g.Where, "pid 999") {
			t.Errorf("the launcher is an odd one out: %+v", g)
		}
	}
	if !found {
		t.Errorf("launcher not listed: %+v", m.Groups)
	}
	// Without any rank at all, processes compare among themselves as before.
	for i := range ps {
		ps[i].Rank = -1
	}
	if m := Merge(ps, MergeOptions{}); !strings.HasPrefix(m.Summary, RoleMain+": ") {
		t.Errorf("no ranks: %s", m.Summary)
	}
}

// TestMergeBoundsJobText: issue 23. A job names its threads, files and
// functions anything: 20 KB names with control characters and a fake end
// of quote (an attempt at writing into the reader's context) come out
// clipped in the structured merge, and quoted (jobtext) in the summary and
// the text.
func TestMergeBoundsJobText(t *testing.T) {
	long := func(c string) string { return strings.Repeat(c, 20000) }
	hostile := jobtexttest.Hostile()
	var ps []Process
	for r := 0; r < 8; r++ {
		fr := []Frame{{File: "/" + long("d") + "/train.py", Line: 7, Function: hostile}, {File: "/job/main.py", Line: 1, Function: "<module>"}}
		if r == 3 {
			fr[0].Line = 8 // an outlier, named in the summary
		}
		ps = append(ps, Process{PID: 100 + r, Rank: r, Host: hostile, Threads: []Thread{{ID: 1, IsMain: true, Name: hostile, Frames: fr, State: "S", WChan: hostile}}})
	}
	ps = append(ps, Process{PID: 200, Rank: 9, Host: hostile, Source: SourceAgent, Err: hostile},
		Process{PID: 201, Rank: -1, Host: "other", Threads: []Thread{{ID: 1, IsMain: true, Name: hostile, Frames: []Frame{{File: hostile, Function: hostile, Line: 1}}}}})
	m := Merge(ps, MergeOptions{})
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 16<<10 {
		t.Fatalf("%d bytes", len(b))
	}
	text := m.Text(TextOptions{Processes: ps})
	jobtexttest.Check(t, "summary", m.Summary, 4<<10)
	jobtexttest.Check(t, "text", text, 16<<10)
	if !strings.Contains(text, "train.py⟧") {
		t.Errorf("the path's tail is not kept: %.500s", text)
	}
}

// TestTextKeepsOwnFramesPastTheCut: a rank waiting deep in DataLoader
// internals still shows the job's own line (the one a verdict names)
// after the frame limit; a stack of library frames only is just counted.
func TestTextKeepsOwnFramesPastTheCut(t *testing.T) {
	lib := "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py"
	var frames []Frame
	for i := 0; i < 12; i++ {
		frames = append(frames, Frame{File: lib, Line: 100 + i, Function: fmt.Sprintf("_next_data_%d", i)})
	}
	frames = append(frames, Frame{File: "/job/train.py", Line: 185, Function: "train_epoch"}, Frame{File: "/job/train.py", Line: 220, Function: "main"})
	p := Process{PID: 7, Rank: 2, Source: SourceAgent, Threads: []Thread{{Name: "MainThread", IsMain: true, Frames: frames}}}
	text := Merge([]Process{p}, MergeOptions{MaxFrames: 50}).Text(TextOptions{})
	if !strings.Contains(text, "the job's own among them:") || !strings.Contains(text, "⟦train_epoch⟧ ⟦/job/train.py⟧:185") {
		t.Fatalf("the job's frame past the cut is not shown:\n%s", text)
	}
	p.Threads[0].Frames = frames[:12]
	text = Merge([]Process{p}, MergeOptions{MaxFrames: 50}).Text(TextOptions{})
	if strings.Contains(text, "own among them") || !strings.Contains(text, "more outer frame(s)") {
		t.Fatalf("library frames only:\n%s", text)
	}
}
