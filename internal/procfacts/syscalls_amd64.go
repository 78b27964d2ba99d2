//go:build linux && amd64

package procfacts

import "syscall"

// x86-64 keeps the old calls that arm64 never had.
func init() {
	syscallNames[syscall.SYS_POLL] = "poll"
	syscallNames[syscall.SYS_SELECT] = "select"
	syscallNames[syscall.SYS_EPOLL_WAIT] = "epoll_wait"
	syscallNames[syscall.SYS_OPEN] = "open"
	syscallNames[syscall.SYS_PAUSE] = "pause"
	syscallNames[441] = "epoll_pwait2"
}
