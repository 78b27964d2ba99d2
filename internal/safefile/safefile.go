// Package safefile is the one rule for files in shared directories (the
// data dir, the control root, /tmp): anyone may leave a file, a symlink or
// a FIFO there under any name, so a file is opened without following a
// final symlink and without blocking, and counts only when it belongs to
// the right user and nobody else can write it (Check). The server's own
// state lives in a directory it owns (PrivateDir).
package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// IDs is the owner and group of a file; -1, -1 when unknown.
func IDs(fi fs.FileInfo) (uid, gid int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return -1, -1
}

// OwnerError: the file belongs to another user than the one it must.
type OwnerError struct{ Have, Want int }

func (e *OwnerError) Error() string {
	return fmt.Sprintf("it belongs to %s, not %s", UserName(e.Have), UserName(e.Want))
}

// Check says why the file described by fi may not count as uid's (group
// gid), or returns nil. It must belong to uid (or to root, which could do
// anything anyway) and must not be writable by others: not by every user,
// and by a group only when that group is the owner's own (the user
// private groups of umask 002 systems).
func Check(fi fs.FileInfo, uid, gid int) error {
	have, hgid := IDs(fi)
	if have < 0 {
		return errors.New("its owner cannot be read")
	}
	if have != uid && have != 0 {
		return &OwnerError{Have: have, Want: uid}
	}
	perm := fi.Mode().Perm()
	if perm&0o002 != 0 {
		return fmt.Errorf("it is writable by every user (mode %04o)", perm)
	}
	if perm&0o020 != 0 && hgid != gid {
		return fmt.Errorf("it is writable by group %d, not the owner's own (mode %04o)", hgid, perm)
	}
	return nil
}

// OpenRegular opens path without following a final symlink and without
// blocking on a FIFO, and refuses anything but a regular file. The
// FileInfo is the open file's, so it cannot be swapped between the check
// and the read. Nothing is created unless flag says so.
func OpenRegular(path string, flag int, perm os.FileMode) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, perm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, nil, fmt.Errorf("%s is a symbolic link; refusing to follow it (a file in a shared directory is never followed elsewhere): remove it", path)
		}
		if errors.Is(err, fs.ErrPermission) {
			return nil, nil, fmt.Errorf("%w: it or its directory is another user's; run as that user, or use a directory of your own (PROBING_DATA_DIR)", err)
		}
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is not a regular file (%s); remove it", path, kind(fi.Mode()))
	}
	return f, fi, nil
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return m.Type().String()
}

// Open opens (or, with os.O_CREATE in flag, creates with perm) a file of
// this process's own user: OpenRegular, then Check against the effective
// user. A file that fails is closed and refused with the path, the reason
// and the fix.
func Open(path string, flag int, perm os.FileMode) (*os.File, error) {
	return OpenOwned(path, flag, perm, os.Geteuid(), os.Getegid())
}

// OpenOwned is Open for a file that must be uid's (group gid): a job's
// file read by a server running as another user, root say.
func OpenOwned(path string, flag int, perm os.FileMode, uid, gid int) (*os.File, error) {
	f, fi, err := OpenRegular(path, flag, perm)
	if err != nil {
		return nil, err
	}
	if err := Check(fi, uid, gid); err != nil {
		f.Close()
		return nil, Refused(path, err)
	}
	return f, nil
}

// Refused is the error for a file that failed Check.
func Refused(path string, why error) error {
	return fmt.Errorf("%s is refused: %w; anyone can leave a file in a shared directory, so only one its user made and nobody else can write counts: remove it (rm %s) and start again", path, why, path)
}

// PrivateDir makes sure dir is a directory this process's user owns
// (root's counts too) that nobody else can write, creating it and its
// missing parents 0700 when absent. Its parent must not let others
// rename it away: not writable by others, or sticky (like /tmp and the
// data dir, 1777). Files in it are then safe from other users, sidecar
// files SQLite opens by name included.
func PrivateDir(dir string) error { return OwnDir(dir, 0o700) }

// OwnDir is PrivateDir for a directory others may read: created with
// perm (a node sampler's pid directory, 0755, which servers read), and
// refused, never reused, when someone else made it first.
func OwnDir(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return fmt.Errorf("directory %s: %w", filepath.Dir(dir), err)
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	return CheckDir(dir)
}

// CheckDir says why dir may not hold this process's own files, or nil.
func CheckDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	fix := fmt.Sprintf("remove it (another user's: ask root to) or set PROBING_DATA_DIR to a directory of your own; this program recreates it 0700")
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("directory %s is a symbolic link; refusing to follow it: %s", dir, fix)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is %s, not a directory: %s", dir, kind(fi.Mode()), fix)
	}
	uid, _ := IDs(fi)
	if me := os.Geteuid(); uid != me && uid != 0 {
		return fmt.Errorf("directory %s belongs to %s, and this process runs as %s: %s", dir, UserName(uid), UserName(me), fix)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("directory %s is writable by other users (mode %04o), so anyone could plant files in it: use a directory of your own (chmod 700 it if it is yours)", dir, perm)
	}
	parent := filepath.Dir(dir)
	pfi, err := os.Stat(parent)
	if err != nil {
		return fmt.Errorf("directory %s: %w", parent, err)
	}
	if pfi.Mode().Perm()&0o022 != 0 && pfi.Mode()&fs.ModeSticky == 0 {
		return fmt.Errorf("directory %s is writable by other users and not sticky (mode %04o), so anyone could swap %s: chmod 1777 %s, or set PROBING_DATA_DIR to a directory of your own",
			parent, pfi.Mode().Perm(), filepath.Base(dir), parent)
	}
	return nil
}

var userNames sync.Map // uid → name

// UserName is "uid 1000 (alice)", or "uid 1000" when the name is unknown.
func UserName(uid int) string {
	if v, ok := userNames.Load(uid); ok {
		return v.(string)
	}
	s := "uid " + strconv.Itoa(uid)
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil && u.Username != "" {
		s += " (" + u.Username + ")"
	}
	userNames.Store(uid, s)
	return s
}
