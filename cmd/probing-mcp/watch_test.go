package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/internal/demojob"
	"github.com/probing-mcp/probing-mcp/storage/history"
)

func TestWatchUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"watch", "--interval", "10ms"}, "pass 100ms or more"},
		{[]string{"watch", "--until", "hung"}, "no event kind"},
		{[]string{"watch", "extra"}, "unexpected argument"},
	} {
		if code, _, errOut := runCLI(c.args...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// TestWatchCLIOnDemoJob: `probing-mcp watch --json --until stalled` on the
// demo's torch-free hung job prints the capture, then the confirmed stall
// naming rank 2, one JSON object per line, and exits 0.
func TestWatchCLIOnDemoJob(t *testing.T) {
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
	t.Setenv("PROBING_DATA_DIR", job.DataDir)
	t.Setenv("PROBING_CTRL_ROOT", job.CtrlRoot)
	histPath := filepath.Join(t.TempDir(), "history.db")
	t.Setenv("PROBING_MCP_HISTORY", histPath)
	// The on-call's webhook: a receiver of the generic JSON body.
	var mu sync.Mutex
	var bodies []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
	}))
	defer hook.Close()
	t.Setenv("PROBING_WEBHOOK_URL", hook.URL+"/hook/SECRET-TOKEN")
	code, out, errOut := runCLI("watch", "--json", "--until", "stalled", "--stall-seconds", "2", "--interval", "200ms", "--for", "150s", "--act")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var last struct {
		Kind      string `json:"kind"`
		HistoryID int64  `json:"history_id"`
		Headline  struct {
			Culprits, Category, Threshold string
		} `json:"headline"`
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		if err := json.Unmarshal([]byte(l), &last); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
	}
	if last.Kind != "stalled" || last.Headline.Culprits != "2" || last.Headline.Category != "cpu_stall" || last.Headline.Threshold == "" {
		t.Fatalf("last event: %+v\n%s", last, out)
	}
	// One alert, the confirmed stall (the capture is info, under the
	// default minimum level), delivered before the command returned.
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 || bodies[0]["kind"] != "incident" || bodies[0]["culprits"] != "2" || bodies[0]["category"] != "cpu_stall" ||
		bodies[0]["level"] != "error" || !strings.Contains(fmt.Sprint(bodies[0]["look_closer"]), "history.diagnoses WHERE id =") {
		t.Fatalf("webhook got %d bodies: %v", len(bodies), bodies)
	}
	// --act asked every rank for a dump through torch's pipe (this job has
	// none: said, not hidden) and audited it as a write.
	if !strings.Contains(fmt.Sprint(bodies[0]["text"]), "Acted (--act): no dump from ranks 0-3") {
		t.Errorf("the alert does not say what --act did: %v", bodies[0]["text"])
	}
	h, err := history.Open(histPath, history.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	au, err := h.Audit(history.ListOptions{})
	if err != nil || len(au) != 2 || au[0].Tool != "watch --act" || au[0].Phase != "result" || au[0].Outcome != "error" || au[1].Phase != "call" {
		t.Fatalf("audit: %+v %v", au, err)
	}
	if strings.Contains(errOut, "SECRET-TOKEN") {
		t.Errorf("the webhook's token is in the log:\n%s", errOut)
	}
}
