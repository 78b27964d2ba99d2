package memt

import "github.com/probing-mcp/probing-mcp/internal/procfacts"

// ProcessStartTime is a process's start time as MEMT records it: on Linux,
// field 22 of /proc/<pid>/stat, in clock ticks since boot. Together with
// the PID it tells a live writer from a dead one whose PID was reused.
func ProcessStartTime(pid int) (uint64, error) { return procfacts.StartTime(pid) }

// ProcessAlive reports whether pid runs and, when startTime is not 0, is
// the same process that recorded it.
func ProcessAlive(pid int, startTime uint64) bool { return procfacts.Alive(pid, startTime) }
