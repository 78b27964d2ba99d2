package sysmem

import "syscall"

// Available is the memory this process may use, in bytes: the machine's
// RAM, or its cgroup's limit when that is lower (a container, a Slurm job
// step). 0 if unknown.
func Available() int64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	total := int64(si.Totalram) * int64(si.Unit)
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if n := cgroupLimit(f); n > 0 && (total == 0 || n < total) {
			total = n
		}
	}
	return total
}
