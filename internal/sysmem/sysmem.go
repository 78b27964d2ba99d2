// Package sysmem tells how much memory this process may use, for the
// runtime's soft limit and the Flight Recorder analysis's memory ceiling.
package sysmem

import (
	"os"
	"path/filepath"
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

// ownCgroupLimit is the lowest memory limit on the way from this process's
// own cgroup up to the root, read from /proc/self/cgroup's text (self)
// under the cgroup mount root: inside a Slurm step or a container's
// sub-cgroup the limit is on the process's cgroup or an ancestor, not on
// the root, which would leave the host's RAM as the ceiling and the OOM
// killer acting first. v2 ("0::/path": memory.max) and v1 (the memory
// controller's line: memory/<path>/memory.limit_in_bytes). 0: none found.
func ownCgroupLimit(self, root string) int64 {
	var best int64
	take := func(n int64) {
		if n > 0 && (best == 0 || n < best) {
			best = n
		}
	}
	for _, line := range strings.Split(self, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, file = root, "memory.max"
		case hasController(parts[1], "memory"):
			dir, file = filepath.Join(root, "memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		// The path is the kernel's, but clean it anyway: never above the
		// mount root.
		p := filepath.Clean("/" + parts[2])
		for depth := 0; depth < 64; depth++ {
			take(cgroupLimit(filepath.Join(dir, p, file)))
			if p == "/" {
				break
			}
			p = filepath.Dir(p)
		}
	}
	return best
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
