package watch_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/diagnosis"
	"github.com/probing-mcp/probing-mcp/diagnosis/evidence"
	"github.com/probing-mcp/probing-mcp/internal/demojob"
	"github.com/probing-mcp/probing-mcp/storage/history"
	"github.com/probing-mcp/probing-mcp/storage/sqlengine"
	"github.com/probing-mcp/probing-mcp/watch"
)

// TestWatchNoticesLiveHang watches the demo's torch-free job (4 Python
// ranks over sockets; rank 2 stuck in its data loader at step 5) from its
// start: while it moves the watcher says nothing; once it hangs the first
// event is the capture (stacks kept in the history), then the confirmed
// verdict naming rank 2 at its line. Nothing here waits a fixed time: the
// watcher's events are awaited under the test's deadline.
func TestWatchNoticesLiveHang(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3: the demo job needs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	job, err := demojob.Start(ctx, demojob.Options{Torch: "no", Python: "python3"})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Stop()
	e, err := sqlengine.New(sqlengine.Options{DataDir: job.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	h, err := history.Open(filepath.Join(t.TempDir(), "history.db"), history.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	events := make(chan watch.Event, 64)
	w, err := watch.New(watch.Options{
		Scope:    &evidence.Node{Agents: agent.Options{DataDir: job.DataDir, CtrlRoot: job.CtrlRoot}, SQL: e, Host: "test"},
		State:    diagnosis.StateOptions{MinStall: 2 * time.Second},
		Interval: 200 * time.Millisecond, History: h, Host: "test",
		Notify: func(e watch.Event) { events <- e },
	})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(wctx) }()
	defer func() { stop(); <-done }()

	next := func() watch.Event {
		t.Helper()
		select {
		case e := <-events:
			t.Logf("event: %s", e.Line())
			return e
		case <-ctx.Done():
			t.Fatalf("no event before the deadline\n%s", job.Tail(5))
		}
		return watch.Event{}
	}
	first := next()
	if first.Kind == watch.KindBlind {
		// The agents came up after the watcher's blind limit (a very
		// loaded machine): it must see the job again.
		if e := next(); e.Kind != watch.KindSeeing {
			t.Fatalf("after blind: %s", e.Line())
		}
		first = next()
	}
	if first.Kind != watch.KindCaptured || first.Incident == 0 || first.HistoryID == 0 {
		t.Fatalf("first event %s, incident %d, history %d; want a capture", first.Kind, first.Incident, first.HistoryID)
	}
	if !job.Hung() {
		t.Fatalf("a capture while the job still moves: %s\n%s", first.Line(), job.Tail(5))
	}
	e2 := first
	for e2.Kind == watch.KindCaptured || e2.Kind == watch.KindPaused {
		e2 = next()
	}
	hl := e2.Headline()
	if e2.Kind != watch.KindStalled || hl.Culprits != "2" || hl.Category != diagnosis.CatCPUStall || e2.Incident != first.Incident {
		t.Fatalf("confirmed event: %s", e2.Line())
	}
	if hl.Threshold == "" || hl.Step == "" {
		t.Errorf("the learned threshold is not said: %+v", hl)
	}
	// The pulse asks no rank anything: no stacks, no Flight Recorder.
	node := &evidence.Node{Agents: agent.Options{DataDir: job.DataDir, CtrlRoot: job.CtrlRoot}, SQL: e}
	pb, _, err := node.Pulse(ctx)
	if err != nil || len(pb.Ranks) != 4 {
		t.Fatalf("pulse: %v, %d ranks", err, len(pb.Ranks))
	}
	for r, re := range pb.Ranks {
		if len(re.Threads) > 0 || re.Main != nil || re.Activity == nil || !re.Alive {
			t.Errorf("pulse rank %d: %d threads, main %v, activity %v, alive %v", r, len(re.Threads), re.Main != nil, re.Activity != nil, re.Alive)
		}
	}
	if len(pb.FRDumps) > 0 {
		t.Errorf("pulse read the Flight Recorder (%d dumps)", len(pb.FRDumps))
	}
	caps, err := h.StackCaptures(history.ListOptions{})
	if err != nil || len(caps) < 4 {
		t.Fatalf("stack captures kept: %d (%v); want every rank's", len(caps), err)
	}
	as, err := h.Alerts(history.ListOptions{}, time.Time{})
	if err != nil || len(as) < 2 || as[0].Kind != "stalled" || as[0].CulpritRanks != "2" || as[0].DiagnosisID == 0 || as[len(as)-1].Kind != "captured" {
		t.Fatalf("alerts kept: %+v (%v)", as, err)
	}
	ds, err := h.Diagnoses(history.ListOptions{})
	if err != nil || len(ds) == 0 || ds[0].Kind != "watch" {
		t.Fatalf("verdicts kept: %+v (%v)", ds, err)
	}
}
