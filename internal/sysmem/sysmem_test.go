package sysmem

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestAvailable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Available is 0 off Linux")
	}
	if n := Available(); n < 64<<20 {
		t.Errorf("Available() = %d, want at least the 64 MiB any test machine has", n)
	}
}

func TestCgroupLimit(t *testing.T) {
	dir := t.TempDir()
	for text, want := range map[string]int64{"max\n": 0, "8589934592\n": 8 << 30, "9223372036854771712\n": 0, "junk": 0} {
		p := filepath.Join(dir, "memory.max")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := cgroupLimit(p); got != want {
			t.Errorf("cgroupLimit(%q) = %d, want %d", text, got, want)
		}
	}
	if got := cgroupLimit(filepath.Join(dir, "absent")); got != 0 {
		t.Errorf("absent file: %d", got)
	}
}

// TestOwnCgroupLimit: the limit of the process's own cgroup or of an
// ancestor counts, whichever is lowest, in v2 and v1 layouts; a path that
// tries to climb above the mount root stays under it.
func TestOwnCgroupLimit(t *testing.T) {
	root := t.TempDir()
	write := func(rel, text string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("memory.max", "max\n")
	write("slurm/job_7/memory.max", "4294967296\n")
	write("slurm/job_7/step_0/memory.max", "max\n")
	if got := ownCgroupLimit("0::/slurm/job_7/step_0\n", root); got != 4<<30 {
		t.Errorf("v2, the job's limit above the step: %d", got)
	}
	write("slurm/job_7/step_0/memory.max", "1073741824\n")
	if got := ownCgroupLimit("0::/slurm/job_7/step_0\n", root); got != 1<<30 {
		t.Errorf("v2, the step's own: %d", got)
	}
	write("memory/docker/abc/memory.limit_in_bytes", "2147483648\n")
	write("memory/memory.limit_in_bytes", "9223372036854771712\n")
	if got := ownCgroupLimit("12:cpu,cpuacct:/docker/abc\n7:memory:/docker/abc\n", root); got != 2<<30 {
		t.Errorf("v1: %d", got)
	}
	if got := ownCgroupLimit("0::/../../etc\n", root); got != 0 {
		t.Errorf("climbing: %d", got)
	}
	if got := ownCgroupLimit("garbage", root); got != 0 {
		t.Errorf("garbage: %d", got)
	}
}
