package mcp

import (
	"fmt"
	"io/fs"
	"os"

	"github.com/probing-mcp/probing-mcp/internal/safefile"
)

// OpenRegular opens path (creating it with perm when flag says so), but
// only as a regular file of this user's that nobody else can write
// (safefile.Open), never through a symlink: one planted in a shared
// directory would have a root server append to any file. A FIFO would
// block the open until some reader came, a device or socket would swallow
// or refuse what is written, and none can be checked or repaired like a
// file. The open never blocks: the kind is checked first (to name it),
// and O_NONBLOCK covers a FIFO swapped in after that check, which the
// final fstat then refuses.
func OpenRegular(path string, flag int, perm os.FileMode) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink == 0 && !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	return safefile.Open(path, flag, perm)
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
