package procfacts

import (
	"bufio"

	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockWait is a process blocked taking a file lock (flock, POSIX or OFD)
// and who holds it, from /proc/locks: the kernel lists each held lock and,
// right after it under the same number, the requests it blocks ("->").
type LockWait struct {
	Waiter, Holder int    // pids
	Kind           string // FLOCK, POSIX, OFDLCK
	File           string // major:minor:inode of the locked file
	// Path is the locked file's path as one of the two processes has it
	// open (LockPath); "" when neither could be read.
	Path string `json:",omitempty"`
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

// maxFDs bounds the descriptors LockPath looks through per process.
const maxFDs = 4096

// LockPath finds the path of the file /proc/locks names as
// major:minor:inode (hex device numbers, decimal inode) among the open
// descriptors of pid: the process that waits for a lock has the file open,
// and so does its holder. "" when it is not found or cannot be read (a
// process of another user, gone, or over maxFDs descriptors).
func LockPath(root string, pid int, file string) string {
	parts := strings.Split(file, ":")
	if len(parts) != 3 {
		return ""
	}
	major, err1 := strconv.ParseUint(parts[0], 16, 32)
	minor, err2 := strconv.ParseUint(parts[1], 16, 32)
	ino, err3 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return ""
	}
	dir := filepath.Join(root, strconv.Itoa(pid), "fd")
	d, err := os.Open(dir)
	if err != nil {
		return ""
	}
	defer d.Close()
	names, _ := d.Readdirnames(maxFDs)
	for _, n := range names {
		var st unix.Stat_t
		fd := filepath.Join(dir, n)
		if unix.Stat(fd, &st) != nil || st.Ino != ino || uint64(unix.Major(st.Dev)) != major || uint64(unix.Minor(st.Dev)) != minor {
			continue
		}
		if target, err := os.Readlink(fd); err == nil {
			return target
		}
	}
	return ""
}
