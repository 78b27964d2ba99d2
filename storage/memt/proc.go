package memt

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// ProcessStartTime is a process's start time as MEMT records it: on Linux,
// field 22 of /proc/<pid>/stat, in clock ticks since boot. Together with
// the PID it tells a live writer from a dead one whose PID was reused.
func ProcessStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may contain spaces and parentheses: fields start
	// after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, errors.New("malformed /proc stat")
	}
	fields := strings.Fields(s[i+2:])
	if len(fields) < 20 {
		return 0, errors.New("short /proc stat")
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// ProcessAlive reports whether pid runs and, when startTime is not 0, is
// the same process that recorded it.
func ProcessAlive(pid int, startTime uint64) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if startTime == 0 {
		return true
	}
	st, err := ProcessStartTime(pid)
	return err != nil || st == startTime // unreadable /proc: trust kill
}
