package storage

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/storage/memt"
)

func TestSplitName(t *testing.T) {
	for name, want := range map[string]string{
		"python.torch_trace": "python|torch_trace",
		"foo.bar.baz":        "foo|bar.baz",
		"plain":              "memtable|plain",
		"nccl.proxy_ops":     "nccl|proxy_ops",
		"bad-schema.x":       "error",
		"python.x/y":         "error",
		"python.":            "error",
		".hidden":            "error",
		"python.tab le":      "error",
	} {
		s, tb, err := SplitName(name)
		got := s + "|" + tb
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("SplitName(%q) = %s, want %s", name, got, want)
		}
	}
}

func TestDiscover(t *testing.T) {
	base := t.TempDir()
	cols := []memt.Column{{Name: "timestamp", Type: memt.I64}, {Name: "v", Type: memt.F64}}
	for _, p := range []string{"100/python.a", "100/nccl.b", "200/python.a", "200/plain"} {
		w, err := memt.Create(filepath.Join(base, p), cols, memt.Options{ChunkSize: 256, NumChunks: 2})
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	os.WriteFile(filepath.Join(base, "100", "python.hash"), []byte("MEMH not a table"), 0o644)
	os.WriteFile(filepath.Join(base, "100", "bad name"), []byte{0x54, 0x4d, 0x45, 0x4d, 0, 0}, 0o644)
	os.MkdirAll(filepath.Join(base, "crash", "100"), 0o755)
	os.MkdirAll(filepath.Join(base, "probing-mcp"), 0o755)
	os.MkdirAll(filepath.Join(base, "300"), 0o755) // no tables: not listed
	os.WriteFile(filepath.Join(base, "200", IdentityFile), []byte(`{"rank":7,"local_rank":3,"node_rank":1,"role":"trainer"}`), 0o644)

	inv, err := Discover(base)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range inv.Rings() {
		got = append(got, fmt.Sprintf("%s.%s@%d alive=%v", r.Schema, r.Table, r.PID, r.WriterAlive))
	}
	want := "memtable.plain@200 alive=true,nccl.b@100 alive=true,python.a@100 alive=true,python.a@200 alive=true"
	if strings.Join(got, ",") != want {
		t.Fatalf("rings %v\nwant %s", got, want)
	}
	if len(inv.Processes) != 2 || inv.Processes[1].Identity != (Identity{Rank: 7, LocalRank: 3, NodeRank: 1, Role: "trainer"}) {
		t.Fatalf("processes %+v", inv.Processes)
	}
	if len(inv.Problems) != 1 || !strings.Contains(inv.Problems[0].Problem, `"bad name"`) {
		t.Fatalf("problems %+v", inv.Problems)
	}
	if inv.FS == "" {
		t.Fatal("file system not identified")
	}

	// An unreadable pid directory is a problem; the rest is still listed.
	readDir = func(dir string) ([]os.DirEntry, error) {
		if filepath.Base(dir) == "100" {
			return nil, &fs.PathError{Op: "open", Path: dir, Err: os.ErrPermission}
		}
		return os.ReadDir(dir)
	}
	defer func() { readDir = os.ReadDir }()
	inv, err = Discover(base)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Rings()) != 2 || len(inv.Problems) != 1 || !strings.Contains(inv.Problems[0].Problem, "permission denied") {
		t.Fatalf("unreadable dir: rings %d, problems %+v", len(inv.Rings()), inv.Problems)
	}

	inv, err = Discover(filepath.Join(base, "missing"))
	if err != nil || !inv.Missing {
		t.Fatalf("missing data dir: %+v %v", inv, err)
	}
}

// TestIdentityFromEnviron: with no identity file, the launcher's
// variables in /proc/<pid>/environ name the rank. A variable given twice
// counts as its first value, as getenv and Python's os.environ read it.
func TestIdentityFromEnviron(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1) on PATH")
	}
	// os.StartProcess passes the environment as given; exec.Cmd would
	// drop the duplicate.
	p, err := os.StartProcess(sleep, []string{"sleep", "60"}, &os.ProcAttr{
		Env: []string{"RANK=3", "LOCAL_RANK=1", "GROUP_RANK=2", "ROLE_NAME=trainer", "RANK=9"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill(); p.Wait() })
	// The kernel fills in the new image's environment a moment after the
	// exec that StartProcess waited for: wait until it reads.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.Pid)); len(b) > 0 {
			break
		}
	}
	want := Identity{Rank: 3, LocalRank: 1, NodeRank: 2, Role: "trainer"}
	if got := tags(nil, p.Pid, true); got != want {
		t.Errorf("identity from environ: %+v, want %+v", got, want)
	}
	// Neither file nor environ: unknown, not rank 0.
	if got := tags(nil, 1<<30, true); got != (Identity{Rank: -1, LocalRank: -1, NodeRank: -1}) {
		t.Errorf("identity of a missing pid: %+v", got)
	}
}
