package procfacts

import (
	"errors"
	"fmt"
	"syscall"
)

// The signals an agent may register for its stack dump. Each kills by
// default, so Signal also requires the process to be seen catching it;
// the list keeps out the ones a program catches to stop or reload
// (SIGINT, SIGTERM, SIGHUP, ...), whose handlers would end a job as
// surely as the default action.
func dumpSignal(sig syscall.Signal) bool {
	return sig == syscall.SIGUSR1 || sig == syscall.SIGUSR2 || (sig >= sigRTMin && sig <= sigRTMax)
}

// Linux's real-time signal range as glibc leaves it to programs
// (SIGRTMIN is 34 after glibc's two internal ones; SIGRTMAX 64).
const (
	sigRTMin = syscall.Signal(34)
	sigRTMax = syscall.Signal(64)
)

// ErrSignalRefused wraps every reason Signal gives for not sending.
var ErrSignalRefused = errors.New("signal refused")

// Signal sends sig to pid only when that is harmless and meant: the pid is
// still the process that started at start (so a reused pid is never hit),
// it runs as uid (the owner of the files that asked for the signal), sig
// is a stack-dump signal, and the process catches it (SigCgt in
// /proc/<pid>/status), so that the default action, which kills, cannot
// happen. Where the kernel has pidfds the signal goes through one opened
// before the checks, so the process checked is the process signalled.
func Signal(pid int, start uint64, uid int, sig syscall.Signal) error {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: pid %d: %s", ErrSignalRefused, pid, fmt.Sprintf(format, args...))
	}
	if pid <= 0 || start == 0 {
		return refuse("no pid and start time to check it against")
	}
	if !dumpSignal(sig) {
		return refuse("signal %d is not a stack-dump signal (SIGUSR1, SIGUSR2 or SIGRTMIN..SIGRTMAX)", int(sig))
	}
	h, err := openPid(pid)
	if err != nil {
		return refuse("%v", err)
	}
	defer h.close()
	st, err := StatAt(Proc, pid)
	if err != nil {
		return refuse("%v", err)
	}
	if st.Start != start {
		return refuse("it is no longer the process that registered (start time %d, now %d)", start, st.Start)
	}
	status, err := ReadStatus(pid)
	if err != nil {
		return refuse("%v", err)
	}
	if status.EUID() != uid {
		return refuse("it runs as %s, not as %s who asked for the signal", UserName(status.EUID()), UserName(uid))
	}
	if !status.Catches(sig) {
		return refuse("it does not catch signal %d (SigCgt %016x): its default action would kill it", int(sig), status.SigCgt)
	}
	return h.signal(sig)
}
