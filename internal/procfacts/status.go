package procfacts

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Status is what /proc/<pid>/status says about who a process is and
// which signals it handles.
type Status struct {
	// UID and GID are the real, effective, saved and file-system ids, as
	// the Uid: and Gid: lines list them; -1 when absent.
	UID, GID [4]int
	// SigCgt, SigIgn and SigBlk are the process's caught, ignored and
	// blocked signal masks (bit n-1 is signal n).
	SigCgt, SigIgn, SigBlk uint64
	VmRSS                  int64 // bytes; 0 for kernel threads
}

// EUID is the effective user id: the owner of the files the process
// creates, and the one a peer credential shows.
func (s Status) EUID() int { return s.UID[1] }

// EGID is the effective group id.
func (s Status) EGID() int { return s.GID[1] }

// Catches reports whether the process has a handler installed for sig,
// so that receiving it runs that handler instead of the default action
// (which, for most signals, kills).
func (s Status) Catches(sig syscall.Signal) bool {
	return sig > 0 && sig <= 64 && s.SigCgt&(1<<(uint(sig)-1)) != 0
}

// ParseStatus reads the lines of /proc/<pid>/status this package uses.
func ParseStatus(text string) Status {
	st := Status{UID: [4]int{-1, -1, -1, -1}, GID: [4]int{-1, -1, -1, -1}}
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		switch k {
		case "VmRSS":
			if len(f) >= 1 {
				if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					st.VmRSS = n << 10 // the unit is always kB
				}
			}
		case "Uid", "Gid":
			ids := &st.UID
			if k == "Gid" {
				ids = &st.GID
			}
			for i := 0; i < len(f) && i < 4; i++ {
				if n, err := strconv.Atoi(f[i]); err == nil {
					ids[i] = n
				}
			}
		case "SigCgt", "SigIgn", "SigBlk":
			if len(f) >= 1 {
				if n, err := strconv.ParseUint(f[0], 16, 64); err == nil {
					switch k {
					case "SigCgt":
						st.SigCgt = n
					case "SigIgn":
						st.SigIgn = n
					default:
						st.SigBlk = n
					}
				}
			}
		}
	}
	return st
}

// StatusAt reads <root>/<pid>/status.
func StatusAt(root string, pid int) (Status, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "status"))
	if err != nil {
		return Status{}, Err(pid, "status", err)
	}
	return ParseStatus(string(b)), nil
}

// ReadStatus reads /proc/<pid>/status.
func ReadStatus(pid int) (Status, error) { return StatusAt(Proc, pid) }
