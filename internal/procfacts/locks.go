package procfacts

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LockWait is a process blocked taking a file lock (flock, POSIX or OFD)
// and who holds it, from /proc/locks: the kernel lists each held lock and,
// right after it under the same number, the requests it blocks ("->").
type LockWait struct {
	Waiter, Holder int    // pids
	Kind           string // FLOCK, POSIX, OFDLCK
	File           string // major:minor:inode of the locked file
}

// maxLocksBytes bounds what is read of /proc/locks (a node with a huge
// lock table is cut; the waits past it are not seen).
const maxLocksBytes = 4 << 20

// LockWaits reads the lock waits of the node (at root, normally /proc).
func LockWaits(root string) ([]LockWait, error) {
	f, err := os.Open(filepath.Join(root, "locks"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseLocks(io.LimitReader(f, maxLocksBytes)), nil
}

// ParseLocks parses /proc/locks text; lines it does not understand are
// skipped.
func ParseLocks(r io.Reader) []LockWait {
	var out []LockWait
	holder := map[string]int{} // the lock's number → its holder's pid
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasSuffix(fields[0], ":") {
			continue
		}
		id := strings.TrimSuffix(fields[0], ":")
		blocked := fields[1] == "->"
		if blocked {
			fields = fields[1:]
		}
		// fields: N: KIND ADVISORY|MANDATORY READ|WRITE PID DEV:INODE START END
		if len(fields) < 6 {
			continue
		}
		pid, err := strconv.Atoi(fields[4])
		if err != nil || pid <= 0 {
			continue
		}
		if !blocked {
			holder[id] = pid
			continue
		}
		if h, ok := holder[id]; ok && h != pid {
			out = append(out, LockWait{Waiter: pid, Holder: h, Kind: fields[1], File: fields[5]})
		}
	}
	return out
}
