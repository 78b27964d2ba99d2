package watch

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/watch/alert"
)

// TestAlertsAnIncidentsLife runs the scripted job through a stall that
// dies, recovers from nothing (a dead job does not move), and a blind
// watcher, with a real dispatcher posting to a local receiver: what the
// on-call gets is one incident, its death as a follow-up, and the dead-man
// alert and its end; no capture or pause reaches them at level warn.
func TestAlertsAnIncidentsLife(t *testing.T) {
	var mu sync.Mutex
	var got []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
	}))
	defer srv.Close()
	d := alert.New(alert.Config{URLs: []string{srv.URL + "/hook"}, MinLevel: alert.Warn}, nil, nil)
	s, w, evs := newScripted(t, 30*time.Second)
	w.opt.Alerts = &Alerts{D: d}
	w.opt.Job = "job-7"
	s.advance(w, 10*time.Second, true)
	s.advance(w, 40*time.Second, false) // captured, then confirmed past MinStall
	s.dead = map[int]bool{1: true}
	s.advance(w, 10*time.Second, false) // rank 1 dies: a follow-up
	s.none = true
	s.advance(w, 90*time.Second, false) // the watcher sees no rank: dead-man
	s.none, s.dead = false, nil
	s.lastStep = s.now
	s.advance(w, 3*time.Second, true) // seeing again, moving
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var seq []string
	for _, b := range got {
		seq = append(seq, b["kind"].(string)+"/"+b["level"].(string))
	}
	want := []string{"incident/error", "follow_up/error", "dead_man/error", "resolved/info", "follow_up/info"}
	if len(seq) != len(want) {
		t.Fatalf("the on-call got %v (watcher events %q); want %v", seq, kinds(*evs), want)
	}
	for i := range want {
		if seq[i] != want[i] {
			t.Fatalf("the on-call got %v (watcher events %q); want %v", seq, kinds(*evs), want)
		}
	}
	if got[0]["incident_key"] != got[1]["incident_key"] || got[0]["job"] != "job-7" {
		t.Errorf("the death is not its incident's follow-up: %v / %v", got[0]["incident_key"], got[1]["incident_key"])
	}
}
