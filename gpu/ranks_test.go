package gpu

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/internal/procfacts"
)

// Real processes: a rank, a process without rank variables, one gone.
func TestAttachRanks(t *testing.T) {
	start := func(env ...string) *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	rank := start("RANK=5", "LOCAL_RANK=1", "WORLD_SIZE=16", "PROBING_TP_RANK=1")
	plain := start()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	snaps := []Snapshot{
		{Index: 0, Processes: []Process{{PID: uint32(rank.Process.Pid)}, {PID: uint32(plain.Process.Pid)}}},
		{Index: 1, Processes: []Process{{PID: uint32(gone.Process.Pid)}, {PID: uint32(rank.Process.Pid)}}},
	}
	AttachRanks(snaps, "")
	p := snaps[0].Processes[0]
	if p.Rank != 5 || p.LocalRank != 1 || p.Role != "tp=1" || p.RankWhy != "" {
		t.Fatalf("rank: %+v", p)
	}
	if q := snaps[1].Processes[1]; q.Rank != 5 || q.LocalRank != 1 {
		t.Fatalf("the same pid on another GPU: %+v", q)
	}
	if p := snaps[0].Processes[1]; p.Rank != -1 || !strings.Contains(p.RankWhy, "no launcher rank variable") {
		t.Fatalf("plain: %+v", p)
	}
	if p := snaps[1].Processes[0]; p.Rank != -1 || !strings.Contains(p.RankWhy, "not in this PID namespace") {
		t.Fatalf("gone: %+v", p)
	}
}

// An environ that cannot be read says why (a /proc root with a
// directory where the file should be).
func TestAttachRanksUnreadable(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "77", "environ"), 0o755); err != nil {
		t.Fatal(err)
	}
	snaps := []Snapshot{{Processes: []Process{{PID: 77}}}}
	AttachRanks(snaps, root)
	if p := snaps[0].Processes[0]; p.Rank != -1 || !strings.Contains(p.RankWhy, "pid 77") || !strings.Contains(p.RankWhy, "environ") {
		t.Fatalf("%+v", p)
	}
	_ = strconv.Itoa
}

// An agent's identity file places a process whose environment names no
// rank; a stale one (another start time: the pid was reused) does not.
func TestAttachRanksFromIdentity(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	var st uint64
	var err error
	waitFor(t, "the child's stat", func() bool { st, err = procfacts.StartTime(pid); return err == nil })
	dir := t.TempDir()
	write := func(start uint64) {
		os.MkdirAll(filepath.Join(dir, strconv.Itoa(pid)), 0o755)
		b, _ := json.Marshal(procfacts.Identity{Agent: "probing-mcp", PID: pid, StartTime: start, Rank: 12, LocalRank: 4, Role: "worker"})
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(pid), procfacts.IdentityFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(st)
	snaps := []Snapshot{{Processes: []Process{{PID: uint32(pid)}}}}
	AttachRanksFrom(snaps, "", dir)
	if p := snaps[0].Processes[0]; p.Rank != 12 || p.LocalRank != 4 || p.Role != "worker" {
		t.Fatalf("from the identity: %+v", p)
	}
	write(st + 1)
	snaps = []Snapshot{{Processes: []Process{{PID: uint32(pid)}}}}
	AttachRanksFrom(snaps, "", dir)
	if p := snaps[0].Processes[0]; p.Rank != -1 || !strings.Contains(p.RankWhy, "no launcher rank variable") {
		t.Fatalf("a stale identity must not be believed: %+v", p)
	}
}
