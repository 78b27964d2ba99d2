package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDeadRankSaysWhy: a rank that dies of an uncaught exception is
// listed, after it is gone, with its exit code, the exception and the
// line that raised it, from what its agent recorded; a rank whose main
// thread died while a non-daemon thread keeps it alive says that instead
// of showing only threading._shutdown.
func TestDeadRankSaysWhy(t *testing.T) {
	trigger := filepath.Join(t.TempDir(), "go")
	p := startAgent(t, `
import os, time
print("READY", flush=True)
while not os.path.exists(os.environ["GO_FILE"]):
    time.sleep(0.01)
def load_batch(step):
    return 1 / (step - step)
load_batch(3)
`, "RANK=2", "WORLD_SIZE=4", "GO_FILE="+trigger)
	if err := os.WriteFile(trigger, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the rank did not die")
	}
	a := p.agent(t)
	if a == nil || a.Alive || a.Ending == nil {
		t.Fatalf("dead rank: %+v", a)
	}
	got := a.Ending.Summary(false)
	for _, want := range []string{"exited with code 1", "after ⟦ZeroDivisionError: division by zero⟧", "(⟦load_batch⟧)"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}

	trigger2 := filepath.Join(t.TempDir(), "go")
	q := startAgent(t, `
import os, threading, time
def keep():
    while True:
        time.sleep(1)
threading.Thread(target=keep, name="keeper").start()
print("READY", flush=True)
while not os.path.exists(os.environ["GO_FILE"]):
    time.sleep(0.01)
raise RuntimeError("lost the data loader")
`, "RANK=1", "WORLD_SIZE=4", "GO_FILE="+trigger2)
	if err := os.WriteFile(trigger2, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		a := q.agent(t)
		if a != nil && a.Ending != nil && a.Ending.MainThreadExit != nil {
			got := a.Ending.Summary(a.Alive)
			if !a.Alive || !strings.Contains(got, "its main thread died of ⟦RuntimeError: lost the data loader⟧ while 1 non-daemon thread(s) kept the process alive (⟦keeper⟧)") {
				t.Errorf("alive %v, summary %q", a.Alive, got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record of the main thread's end: %+v", a)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
