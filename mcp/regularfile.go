package mcp

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// OpenRegular opens path (creating it with perm when flag says so), but
// only as a regular file or a symlink to one. A FIFO would block the open
// until some reader came, a device or socket would swallow or refuse what
// is written, and none can be checked or repaired like a file. The open
// never blocks: the kind is checked first, and O_NONBLOCK covers a FIFO
// swapped in after that check, which the final fstat then refuses.
func OpenRegular(path string, flag int, perm os.FileMode) (*os.File, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	f, err := os.OpenFile(path, flag|syscall.O_NONBLOCK, perm)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, notRegular(path, fi.Mode())
	}
	return f, nil
}

func notRegular(path string, mode fs.FileMode) error {
	kind := "not a regular file (" + mode.Type().String() + ")"
	switch {
	case mode&fs.ModeNamedPipe != 0:
		kind = "a named pipe (FIFO)"
	case mode&fs.ModeCharDevice != 0:
		kind = "a character device"
	case mode&fs.ModeDevice != 0:
		kind = "a block device"
	case mode&fs.ModeSocket != 0:
		kind = "a socket"
	case mode.IsDir():
		kind = "a directory"
	}
	return fmt.Errorf("%s is %s, not a regular file", path, kind)
}
