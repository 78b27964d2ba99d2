package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDemoCommand runs the README's main command (without torch, as on a
// fresh machine): real ranks, a real hang, the diagnosis naming rank 2,
// and nothing left behind.
func TestDemoCommand(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3: the demo's ranks are Python processes")
	}
	var out, errb bytes.Buffer
	if code := run([]string{"demo", "--exit", "--torch", "no", "--python", "python3"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	s := out.String()
	for _, want := range []string{
		"ranks 0-1,3 in all_reduce", "rank 2 in fake_data_loader", "odd one out",
		"rank 2 is the culprit (cpu_stall, high confidence) at socket_rank.py:67 (fake_data_loader); ranks 0-1,3 wait for it",
		"claude mcp add probing-demo", `"mcpServers"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	// The job's directory is gone, and so are its processes.
	dir := regexp.MustCompile(`PROBING_DATA_DIR=(\S+)/data`).FindStringSubmatch(s)
	if dir == nil {
		t.Fatalf("no data dir in the output")
	}
	if _, err := os.Stat(dir[1]); !os.IsNotExist(err) {
		t.Errorf("%s still exists after the demo", dir[1])
	}
	if m, _ := filepath.Glob(filepath.Join(dir[1], "*")); len(m) > 0 {
		t.Errorf("left behind: %v", m)
	}
	pids := regexp.MustCompile(`pids \[([0-9 ]+)\]`).FindStringSubmatch(s)
	if pids == nil {
		t.Fatal("no pids in the output")
	}
	for _, p := range strings.Fields(pids[1]) {
		if _, err := os.Stat("/proc/" + p); err == nil {
			if b, _ := os.ReadFile("/proc/" + p + "/cmdline"); bytes.Contains(b, []byte("socket_rank.py")) {
				t.Errorf("rank pid %s still runs", p)
			}
		}
	}
}
