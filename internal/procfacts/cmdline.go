package procfacts

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Cmdline is the process's argv as the kernel shows it in
// /proc/<pid>/cmdline: the arguments split at NUL, the last one's
// terminator dropped (so "a\x00\x00" is ["a" ""], an empty last
// argument); nil for an empty file (a kernel thread, a zombie). An
// unreadable file gives the read's error as it came: the caller names it.
// The one reader of the file; each caller shapes the list for its view.
func Cmdline(pid int) ([]string, error) { return CmdlineAt(Proc, pid) }

// CmdlineAt is Cmdline under another /proc root.
func CmdlineAt(root string, pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, nil
	}
	return strings.Split(string(bytes.TrimSuffix(b, []byte{0})), "\x00"), nil
}
