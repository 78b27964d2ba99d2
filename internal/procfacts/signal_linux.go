package procfacts

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// pidHandle is a pidfd when the kernel has them (5.3+), else the bare pid.
type pidHandle struct {
	pid, fd int
}

func openPid(pid int) (pidHandle, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, syscall.ENOSYS) {
		return pidHandle{pid: pid, fd: -1}, nil
	}
	if err != nil {
		return pidHandle{}, err
	}
	return pidHandle{pid: pid, fd: fd}, nil
}

func (h pidHandle) signal(sig syscall.Signal) error {
	if h.fd < 0 {
		return syscall.Kill(h.pid, sig)
	}
	return unix.PidfdSendSignal(h.fd, sig, nil, 0)
}

func (h pidHandle) close() {
	if h.fd >= 0 {
		syscall.Close(h.fd)
	}
}
