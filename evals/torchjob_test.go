package evals

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// jobTruth is the truth a launcher writes in its ready file.
type jobTruth struct {
	State    string `json:"state"`
	Category string `json:"category"`
	Culprits string `json:"culprits"`
	File     string `json:"file"`
	Function string `json:"function"`
}

// TestTorchJobProtocol runs the real torch job (evals/jobs/tp_gloo_job.py)
// through the launcher protocol of the evals corpus: --list, the ready
// file, live and post-mortem endings, SIGTERM leaving no rank behind. It
// needs a Python with torch and the probing-mcp agent installed
// (`probing-mcp agent install --python P`), named by
// PROBING_EVAL_TORCH_PYTHON; without it the test is skipped.
func TestTorchJobProtocol(t *testing.T) {
	py := os.Getenv("PROBING_EVAL_TORCH_PYTHON")
	if py == "" {
		t.Skip("PROBING_EVAL_TORCH_PYTHON (a Python with torch and the agent) is not set")
	}
	job, err := filepath.Abs(filepath.Join("jobs", "tp_gloo_job.py"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, job, "--list").Output()
	if err != nil {
		t.Fatalf("--list: %v", err)
	}
	listed := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			t.Fatalf("--list line %q: want NAME WORLDS [post-mortem]", l)
		}
		listed[f[0]] = l
	}
	for _, c := range []struct {
		scenario string
		pm       bool
		want     jobTruth
	}{
		{"cpu_stall", false, jobTruth{"stalled", "cpu_stall", "2", "tp_gloo_job.py", "fake_data_loader"}},
		{"dead_rank", true, jobTruth{"dead", "dead_rank", "2", "tp_gloo_job.py", "fake_data_loader"}},
		{"all_in_collective", true, jobTruth{"dead", "all_in_collective", "0-3", "", ""}},
	} {
		name := c.scenario
		if c.pm {
			name += "_pm"
		}
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(listed[c.scenario], "4") {
				t.Fatalf("--list does not offer %s with world 4: %q", c.scenario, listed[c.scenario])
			}
			dir := t.TempDir()
			ready := filepath.Join(dir, "ready.json")
			args := []string{job, "--scenario", c.scenario, "--world", "4", "--data-dir", filepath.Join(dir, "data"),
				"--ctrl-root", filepath.Join(dir, "ctrl"), "--ready-file", ready}
			if c.pm {
				args = append(args, "--post-mortem")
			}
			cmd := exec.Command(py, args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			var pids []int
			t.Cleanup(func() {
				if cmd.ProcessState == nil {
					_ = cmd.Process.Kill()
					<-exited
				}
				for _, p := range pids { // the job's own ranks, if the launcher left any
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			})
			// The launcher has its own 240 s timeout; a loaded machine
			// takes ~10-40 s for 4 ranks.
			deadline := time.Now().Add(6 * time.Minute)
			var rf struct {
				PIDs  []int    `json:"pids"`
				Truth jobTruth `json:"truth"`
			}
			for {
				b, err := os.ReadFile(ready)
				if err == nil {
					if err := json.Unmarshal(b, &rf); err != nil {
						t.Fatalf("ready file %s: %v (%q)", ready, err, b)
					}
					break
				}
				select {
				case err := <-exited:
					t.Fatalf("launcher exited (%v) before the ready file:\n%s", err, tail(stderr.String()))
				case <-time.After(200 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatalf("no ready file after 6 min:\n%s", tail(stderr.String()))
				}
			}
			pids = rf.PIDs
			if len(rf.PIDs) != 4 {
				t.Errorf("pids %v: want 4", rf.PIDs)
			}
			if rf.Truth != c.want {
				t.Errorf("truth %+v, want %+v", rf.Truth, c.want)
			}
			for r, p := range rf.PIDs {
				alive := syscall.Kill(p, 0) == nil
				if c.pm && alive {
					t.Errorf("post-mortem: rank %d (pid %d) is still alive", r, p)
				}
				if !c.pm && !alive {
					t.Errorf("live: rank %d (pid %d) is gone", r, p)
				}
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("launcher after SIGTERM: %v, want exit 0\n%s", err, tail(stderr.String()))
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("launcher did not exit within 2 min of SIGTERM")
			}
			for r, p := range rf.PIDs {
				if err := syscall.Kill(p, 0); !errors.Is(err, syscall.ESRCH) {
					t.Errorf("rank %d (pid %d) outlived its launcher: %v", r, p, err)
				}
			}
		})
	}
}

func tail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}
