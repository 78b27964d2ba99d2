package storage

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestDataDir(t *testing.T) {
	env := map[string]string{"PROBING_DATA_DIR": "/data/probing"}
	if got := DataDir(func(k string) string { return env[k] }); got != "/data/probing" {
		t.Errorf("explicit: %s", got)
	}
	env = map[string]string{"TMPDIR": "/scratch"}
	got := DataDir(func(k string) string { return env[k] })
	want := filepath.Join("/scratch", "probing")
	if fi, err := os.Stat("/dev/shm"); runtime.GOOS == "linux" && err == nil && fi.IsDir() {
		want = "/dev/shm/probing"
	}
	if got != want {
		t.Errorf("default: %s, want %s", got, want)
	}
}
