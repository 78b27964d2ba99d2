package storage

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/storage/memt"
)

const otherUser = 65534

func ring(t *testing.T, path string) {
	t.Helper()
	w, err := memt.Create(path, []memt.Column{{Name: "timestamp", Type: memt.I64}}, memt.Options{ChunkSize: 256, NumChunks: 2})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
}

// deadPID is the pid of a process that ran and exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true(1)")
	}
	return cmd.Process.Pid
}

func untrusted(inv *Inventory, pid int) string {
	for _, d := range inv.Dirs {
		if d.PID == pid {
			return d.Untrusted
		}
	}
	return "not listed"
}

// TestDiscoverTrust: on a shared data dir, a pid directory counts only
// when it and its files belong to the process's owner and nobody else can
// write them; the rest is listed as untrusted and never read as rings.
func TestDiscoverTrust(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make another user's files (chown)")
	}
	base := t.TempDir()
	os.Chmod(base, 0o1777)
	me := os.Getpid()
	mine := filepath.Join(base, strconv.Itoa(me))
	ring(t, filepath.Join(mine, "python.ok"))

	// A live process's directory with a ring another user left in it.
	victim := exec.Command("sleep", "60")
	if err := victim.Start(); err != nil {
		t.Skip("no sleep(1)")
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	vpid := victim.Process.Pid
	start, err := procfacts.StartTime(vpid)
	if err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(base, strconv.Itoa(vpid))
	ring(t, filepath.Join(planted, "python.fake"))
	os.WriteFile(filepath.Join(planted, IdentityFile), []byte(`{"agent":"probing-mcp","pid":`+strconv.Itoa(vpid)+`,"start_time":`+strconv.FormatUint(start, 10)+`,"rank":2}`), 0o644)
	os.Chown(filepath.Join(planted, "python.fake"), otherUser, otherUser)

	// A dead process's directory that everyone may write to.
	dead := deadPID(t)
	open := filepath.Join(base, strconv.Itoa(dead))
	ring(t, filepath.Join(open, "python.open"))
	os.Chmod(filepath.Join(open, "python.open"), 0o666)

	inv, err := DiscoverScope(base, procfacts.Scope{Self: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Processes) != 1 || inv.Processes[0].PID != me || inv.Processes[0].UID != 0 {
		t.Fatalf("trusted processes: %+v", inv.Processes)
	}
	// The victim runs as root; the ring in its directory is nobody's.
	if why := untrusted(inv, vpid); !strings.Contains(why, "ring python.fake: it belongs to uid 65534") || !strings.Contains(why, "runs as uid 0") {
		t.Errorf("planted ring: %q", why)
	}
	if why := untrusted(inv, dead); !strings.Contains(why, "writable by every user (mode 0666)") {
		t.Errorf("world-writable ring: %q", why)
	}
	var problems []string
	for _, p := range inv.Problems {
		problems = append(problems, p.Path+": "+p.Problem)
	}
	if got := strings.Join(problems, "\n"); strings.Count(got, "untrusted, not read") != 2 {
		t.Errorf("problems:\n%s", got)
	}
	for _, r := range inv.Rings() {
		if r.Table != "ok" {
			t.Errorf("untrusted ring read: %s", r.Path)
		}
	}
}

// TestDiscoverScope: whose directories count. A server that is not root
// serves its own user; a root server the one user present, or the users
// named by PROBING_MCP_JOB_USER, and refuses to guess between several.
func TestDiscoverScope(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make another user's files (chown)")
	}
	base := t.TempDir()
	os.Chmod(base, 0o1777)
	rootsDir, theirs := deadPID(t), deadPID(t)
	ring(t, filepath.Join(base, strconv.Itoa(rootsDir), "python.a"))
	d := filepath.Join(base, strconv.Itoa(theirs))
	ring(t, filepath.Join(d, "python.a"))
	for _, p := range []string{d, filepath.Join(d, "python.a")} {
		os.Chown(p, otherUser, otherUser)
	}

	inv, err := DiscoverScope(base, procfacts.Scope{Self: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Processes) != 0 || inv.Served.Ambiguous == "" || !strings.Contains(untrusted(inv, theirs), "PROBING_MCP_JOB_USER") {
		t.Errorf("two users, none named: processes %+v, why %q", inv.Processes, untrusted(inv, theirs))
	}
	inv, _ = DiscoverScope(base, procfacts.Scope{Self: 0, UIDs: []int{otherUser}})
	if len(inv.Processes) != 1 || inv.Processes[0].PID != theirs || !strings.Contains(untrusted(inv, rootsDir), "another user's") {
		t.Errorf("named user: %+v, root's dir %q", inv.Processes, untrusted(inv, rootsDir))
	}
	inv, _ = DiscoverScope(base, procfacts.Scope{Self: otherUser})
	if len(inv.Processes) != 1 || inv.Processes[0].PID != theirs || !strings.Contains(untrusted(inv, rootsDir), "this server runs as uid 65534") {
		t.Errorf("a user's server: %+v, root's dir %q", inv.Processes, untrusted(inv, rootsDir))
	}
}
