//go:build !linux

package procfacts

import "syscall"

type pidHandle struct{ pid int }

func openPid(pid int) (pidHandle, error) { return pidHandle{pid: pid}, nil }

func (h pidHandle) signal(sig syscall.Signal) error { return syscall.Kill(h.pid, sig) }

func (h pidHandle) close() {}
