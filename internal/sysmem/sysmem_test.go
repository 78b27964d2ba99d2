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
