package memt

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// reserve allocates the file's blocks; a file system without fallocate
// (some network ones) is left to Truncate.
func reserve(f *os.File, size int64) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return nil
	}
	return err
}
