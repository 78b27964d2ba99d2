//go:build linux

package fsinfo

import (
	"errors"
	"syscall"
)

// statfsMagic returns the f_type of the file system holding p.
func statfsMagic(p string) (magic uint32, ok bool, err error) {
	var st syscall.Statfs_t
	for {
		err = syscall.Statfs(p, &st)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return 0, false, err
	}
	// f_type is int64, int32 or uint32 depending on the architecture; the
	// magics are 32-bit, so the low 32 bits are the whole value.
	return uint32(st.Type), true, nil
}

// isNotDir reports ENOTDIR: a parent component of the path is a file.
func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }
