//go:build linux && (amd64 || arm64)

package procfacts

import "syscall"

// syscallNames: the system calls a stuck thread is usually found in.
var syscallNames = map[int]string{
	syscall.SYS_READ:            "read",
	syscall.SYS_WRITE:           "write",
	syscall.SYS_PREAD64:         "pread64",
	syscall.SYS_IOCTL:           "ioctl",
	syscall.SYS_OPENAT:          "openat",
	syscall.SYS_FSYNC:           "fsync",
	syscall.SYS_FDATASYNC:       "fdatasync",
	syscall.SYS_FUTEX:           "futex",
	syscall.SYS_PPOLL:           "ppoll",
	syscall.SYS_PSELECT6:        "pselect6",
	syscall.SYS_EPOLL_PWAIT:     "epoll_pwait",
	syscall.SYS_NANOSLEEP:       "nanosleep",
	syscall.SYS_CLOCK_NANOSLEEP: "clock_nanosleep",
	syscall.SYS_ACCEPT:          "accept",
	syscall.SYS_ACCEPT4:         "accept4",
	syscall.SYS_RECVFROM:        "recvfrom",
	syscall.SYS_RECVMSG:         "recvmsg",
	syscall.SYS_SENDTO:          "sendto",
	syscall.SYS_SENDMSG:         "sendmsg",
	syscall.SYS_CONNECT:         "connect",
	syscall.SYS_WAIT4:           "wait4",
	syscall.SYS_SCHED_YIELD:     "sched_yield",
	syscall.SYS_RT_SIGSUSPEND:   "rt_sigsuspend",
}
