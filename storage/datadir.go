// Package storage owns what the in-process agents leave on disk: the data
// directory, the MEMT ring tables in it, and the server's persisted history.
package storage

import (
	"os"
	"path/filepath"
	"runtime"
)

// DataDir is where agents write their tables, as Probing defines it:
// $PROBING_DATA_DIR, else /dev/shm/probing on Linux when /dev/shm exists,
// else $TMPDIR/probing. getenv is os.Getenv outside tests.
func DataDir(getenv func(string) string) string {
	if d := getenv("PROBING_DATA_DIR"); d != "" {
		return d
	}
	if runtime.GOOS == "linux" {
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			return "/dev/shm/probing"
		}
	}
	tmp := getenv("TMPDIR")
	if tmp == "" {
		tmp = os.TempDir()
	}
	return filepath.Join(tmp, "probing")
}
