package stacks

import (
	"strings"
	"testing"
	"time"
)

// The example of agent/PROTOCOL.md, with a second thread.
const agentReply = `{"pid": 1234, "captured_at_ns": 1760000000000000000, "gil_holder": null,
 "threads": [{"id": 139912, "native_id": 4321, "name": "MainThread", "daemon": false, "is_main": true,
              "frames": [{"file": "/x/train.py", "line": 12, "function": "step"}],
              "frames_truncated": false, "lock_wait": {"lock": "self.lock", "kind": "rlock", "lock_id": 140000, "locked": true, "owner": 18446744073709551615},
              "locks_held": [{"lock": "stats_lock", "kind": "lock", "lock_id": 140001}]},
             {"id": 18446744073709551615, "native_id": 4322, "name": "Thread-1 (w)", "daemon": true, "is_main": false,
              "frames": [{"file": "/x/w.py", "line": null, "function": "w"}], "frames_truncated": true, "future": 1}]}`

func TestParseAgentJSON(t *testing.T) {
	p, err := ParseAgentJSON([]byte(agentReply))
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != 1234 || p.Rank != -1 || p.Source != SourceAgent || !p.CapturedAt.Equal(time.Unix(1760000000, 0)) || len(p.Threads) != 2 {
		t.Fatalf("%+v", p)
	}
	m := p.Threads[0]
	if m.ID != 139912 || m.NativeID != 4321 || m.Name != "MainThread" || !m.IsMain || m.Daemon || len(m.Frames) != 1 ||
		m.Frames[0] != (Frame{File: "/x/train.py", Line: 12, Function: "step"}) {
		t.Errorf("main: %+v", m)
	}
	if lw := m.LockWait; lw == nil || *lw != (LockWait{Lock: "self.lock", Kind: "rlock", LockID: 140000, Locked: true, Owner: 1<<64 - 1}) ||
		len(m.LocksHeld) != 1 || m.LocksHeld[0] != (HeldLock{Lock: "stats_lock", Kind: "lock", LockID: 140001}) {
		t.Errorf("main's locks: %+v %+v", m.LockWait, m.LocksHeld)
	}
	w := p.Threads[1]
	if w.ID != 1<<64-1 || !w.Daemon || !w.FramesTruncated || w.Frames[0].Line != 0 || w.LockWait != nil || w.LocksHeld != nil {
		t.Errorf("worker: %+v", w)
	}
	for in, want := range map[string]string{
		`{"error":{"code":"NOT_FOUND","message":"no such path"}}`: `agent stacks reply is an error: {"code":"NOT_FOUND"`,
		`{"status":"ok"}`:             `no "pid" or "threads" field`,
		`{"pid": 1, "threa`:           "agent stacks reply (17 bytes)",
		`{"pid": "1", "threads": []}`: "agent stacks reply",
	} {
		if _, err := ParseAgentJSON([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
	if p, err := ParseAgentJSON([]byte(`{"pid": 5, "threads": []}`)); err != nil || len(p.Threads) != 0 || !p.CapturedAt.IsZero() {
		t.Errorf("no threads: %+v %v", p, err)
	}
}

// Each Python version's real dump, one per rank: the main threads (in
// the script) are one group; every other thread waits in its version's
// threading.py, a file of its own, so they are idle groups per version,
// none an odd one out.
func TestMergeFaulthandlerFixtures(t *testing.T) {
	var ps []Process
	for r, v := range versions {
		th, err := ParseFaulthandlerLast(fixture(t, "faulthandler_py"+v+".txt"), 0)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, Process{PID: 100 + r, Rank: r, Source: SourceFaulthandler, Threads: th})
	}
	m := Merge(ps, MergeOptions{})
	if m.Threads != 30 || len(m.Groups) != 1 || m.IdleGroups != 21 || m.IdleThreads != 25 {
		t.Fatalf("%d threads, %d groups, %d idle groups, %d idle threads", m.Threads, len(m.Groups), m.IdleGroups, m.IdleThreads)
	}
	g := m.Groups[0]
	if g.Role != RoleMain || g.Where != "ranks 0-4" || g.Frames[1].Function != "barrier" || g.Frames[1].Line != 92 || g.Outlier {
		t.Errorf("main threads: %+v", g)
	}
	deep := 0
	for _, g := range Merge(ps, MergeOptions{IncludeIdle: true, MaxGroups: 100}).Groups {
		if g.Outlier {
			t.Errorf("outlier %s %s", g.Role, g.Where)
		}
		if g.FramesTruncated {
			deep++
			if g.Role != "thread in ⟦recurse⟧ (⟦gen_faulthandler.py⟧)" || g.Count != 1 || g.FramesOmitted != 70 || !g.Idle {
				t.Errorf("deep thread: %+v", g)
			}
		}
	}
	if deep != 5 {
		t.Errorf("%d deep threads", deep)
	}
	const want = "main thread: ranks 0-4 in ⟦dump⟧ (⟦gen_faulthandler.py⟧:83)"
	if m.Summary != want {
		t.Errorf("summary %q", m.Summary)
	}
	if text := Merge(ps, MergeOptions{IncludeIdle: true, MaxGroups: 100}).Text(TextOptions{}); !strings.Contains(text, "… outermost frames cut by the capture itself") {
		t.Errorf("%s", text)
	}
}
