// Package sysmem tells how much memory this process may use, for the
// runtime's soft limit and the Flight Recorder analysis's memory ceiling.
package sysmem

import (
	"os"
	"strconv"
	"strings"
)

// cgroupLimit reads a cgroup memory limit file: a byte count, or "max"
// (v2) or a huge number (v1) for none.
func cgroupLimit(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0
	}
	return n
}
