package sysmem

import (
	"os"
	"syscall"
)

// Available is the memory this process may use, in bytes: the machine's
// RAM, or its cgroup's limit when that is lower (a container, a Slurm job
// step). 0 if unknown.
func Available() int64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	total := int64(si.Totalram) * int64(si.Unit)
	self, _ := os.ReadFile("/proc/self/cgroup")
	if n := ownCgroupLimit(string(self), "/sys/fs/cgroup"); n > 0 && (total == 0 || n < total) {
		total = n
	}
	return total
}
