package evidence

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/stacks"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
)

// TestLocksRoundTrip: a thread's lock facts, out of stacks.Thread's JSON,
// survive the bundle's JSON through ThreadLocks and come back on their
// threads.
func TestLocksRoundTrip(t *testing.T) {
	ts := []stacks.Thread{
		{ID: 1, IsMain: true, LockWait: &stacks.LockWait{Lock: "a", Kind: "lock", LockID: 10, Locked: true}, LocksHeld: []stacks.HeldLock{{Lock: "b", Kind: "lock", LockID: 11}}},
		{ID: 2},
	}
	e := RankEvidence{Threads: ts, Locks: LocksOf(ts)}
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var back RankEvidence
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Threads[0].LockWait != nil {
		t.Fatalf("lock facts in the thread's own JSON: %s", data)
	}
	got := WithLocks(back.Threads, back.Locks)
	if w := got[0].LockWait; w == nil || *w != *ts[0].LockWait || len(got[0].LocksHeld) != 1 || got[0].LocksHeld[0].LockID != 11 || got[1].LockWait != nil {
		t.Errorf("%+v", got)
	}
	if back.Threads[0].LockWait != nil {
		t.Error("WithLocks changed the bundle's threads")
	}
}

// TestEndedNS: the main thread's exception first (the failure itself),
// else the exit, else the main thread's end; another thread's exception
// does not end a process.
func TestEndedNS(t *testing.T) {
	main := &procfacts.ExitThread{IsMain: true}
	other := &procfacts.ExitThread{Name: "w"}
	for _, c := range []struct {
		e    *procfacts.Ending
		want int64
	}{
		{nil, 0},
		{&procfacts.Ending{}, 0},
		{&procfacts.Ending{Exception: &procfacts.ExitRecord{TimeNS: 5, Thread: main}, Exit: &procfacts.ExitRecord{TimeNS: 9}}, 5},
		{&procfacts.Ending{Exception: &procfacts.ExitRecord{TimeNS: 5, Thread: other}, Exit: &procfacts.ExitRecord{TimeNS: 9}}, 9},
		{&procfacts.Ending{Exception: &procfacts.ExitRecord{TimeNS: 5, Thread: other}}, 0},
		{&procfacts.Ending{MainThreadExit: &procfacts.ExitRecord{TimeNS: 7}}, 7},
	} {
		if got := EndedNS(c.e); got != c.want {
			t.Errorf("%+v: %d, want %d", c.e, got, c.want)
		}
	}
}

// TestActivityFromCommMatchesTheRings: each rank's last collective
// activity taken from its last calls is what a scan of the whole comm
// ring says (real rings of an 8-rank gloo job).
func TestActivityFromCommMatchesTheRings(t *testing.T) {
	e, err := sqlengine.New(sqlengine.Options{DataDir: "../../testdata/jobs/real/skip_tp"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	whole, err := ReadActivity(ctx, e, 10)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ReadComm(ctx, e, 64)
	if err != nil {
		t.Fatal(err)
	}
	acts, err := readSteps(ctx, e, 10)
	if err != nil {
		t.Fatal(err)
	}
	activityFromComm(acts, rows)
	if len(whole) != 8 || len(acts) != 8 {
		t.Fatalf("%d and %d ranks", len(whole), len(acts))
	}
	for r, w := range whole {
		a := acts[r]
		if a == nil || a.LastComm != w.LastComm || a.LastCommDone != w.LastCommDone || len(a.Steps) != len(w.Steps) {
			t.Errorf("rank %d: %+v, whole ring %+v", r, a, w)
		}
	}
}
