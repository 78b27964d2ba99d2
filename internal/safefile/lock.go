package safefile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrHeld: another process of this user (or root) holds the lock.
var ErrHeld = errors.New("the lock is held by another process")

// Lock takes an exclusive, non-blocking flock on path, a file of this
// process's user in a PrivateDir, created 0600 when absent; the file then
// holds this process's pid. The lock lasts while the process lives (a
// kill -9 releases it with the process).
//
// A lock held by a process of another user is an error, never ErrHeld:
// a lock file anyone could open (an older, 0644 one) would otherwise let
// any user make a daemon believe another runs and exit with nothing
// running.
func Lock(path string) (*os.File, error) {
	if err := PrivateDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f, err := Open(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %w", err)
	}
	// Nobody else may open it from now on (an fd opened before stays,
	// which the holder check below catches).
	_ = f.Chmod(0o600)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		return nil, heldError(f, path)
	}
	_ = f.Truncate(0)
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return f, nil
}

// heldError names who holds the lock on f: a process of this user or
// root is ErrHeld; anyone else's is an error with the fix.
func heldError(f *os.File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%w (%s)", ErrHeld, path)
	}
	owner, _ := IDs(fi)
	pid, uid := flockHolder(fi)
	me := os.Geteuid()
	if pid > 0 && uid >= 0 && uid != me && uid != 0 {
		return fmt.Errorf("lock %s (owned by %s) is held by pid %d of %s, another user: remove the file (rm %s; it is recreated 0600) and start again, or set PROBING_DATA_DIR to a directory of your own",
			path, UserName(owner), pid, UserName(uid), path)
	}
	who := "another process"
	if pid > 0 {
		who = fmt.Sprintf("pid %d", pid)
		if uid >= 0 {
			who += " of " + UserName(uid)
		}
	}
	return fmt.Errorf("%w: %s (owned by %s) is held by %s", ErrHeld, path, UserName(owner), who)
}

// maxLocksBytes bounds what is read of /proc/locks.
const maxLocksBytes = 4 << 20

// flockHolder finds the process holding a lock on the file fi in
// /proc/locks, and its owner (the owner of its /proc directory); -1 for
// what cannot be found (another pid namespace, say).
func flockHolder(fi os.FileInfo) (pid, uid int) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, -1
	}
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^uint64(0xfff)
	minor := dev&0xff | (dev>>12)&^uint64(0xff)
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, st.Ino)
	lf, err := os.Open("/proc/locks")
	if err != nil {
		return -1, -1
	}
	defer lf.Close()
	sc := bufio.NewScanner(io.LimitReader(lf, maxLocksBytes))
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF"; blocked
		// requests carry "->" and are not holders.
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] == "->" || fs[1] != "FLOCK" || fs[5] != want {
			continue
		}
		p, err := strconv.Atoi(fs[4])
		if err != nil || p <= 0 {
			return -1, -1
		}
		pfi, err := os.Stat("/proc/" + fs[4])
		if err != nil {
			return p, -1
		}
		u, _ := IDs(pfi)
		return p, u
	}
	return -1, -1
}
