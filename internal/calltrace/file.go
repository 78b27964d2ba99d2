package calltrace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/probing-mcp/probing-mcp/internal/safefile"
)

// The file sinks follow the audit log's rules: the file is this user's,
// mode 0600, never a symlink, in a directory only this user can write
// (created 0700); other servers of the same user may append to the same
// file, so each batch is one write under an flock; a write that fails
// part-way (a full disk) is cut back off, and a file found ending mid-line
// (a crash) is cut back to its last whole line first. A file or directory
// that vanished is made again on the next batch.

// jsonlFile is the jsonl format: one file, appended.
type jsonlFile struct {
	path string
	f    *os.File
}

func openJSONL(path string) (*jsonlFile, error) {
	j := &jsonlFile{path: path}
	if err := j.reopen(); err != nil {
		return nil, err
	}
	return j, nil
}

func (j *jsonlFile) reopen() error {
	if j.f != nil {
		_ = j.f.Close()
		j.f = nil
	}
	f, err := openPrivate(j.path, os.O_RDWR|os.O_APPEND|os.O_CREATE)
	if err != nil {
		return err
	}
	j.f = f
	return nil
}

func (j *jsonlFile) write(lines [][]byte) (int, error) {
	if j.f == nil || !sameFile(j.f, j.path) {
		if err := j.reopen(); err != nil {
			return 0, err
		}
	}
	unlock, err := lockFile(j.f)
	if err != nil {
		return 0, err
	}
	defer unlock()
	size, err := cutTornTail(j.f)
	if err != nil {
		return 0, err
	}
	if err := appendAt(j.f, size, bytes.Join(lines, nil)); err != nil {
		return 0, err
	}
	return len(lines), nil
}

func (j *jsonlFile) close() error {
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

// openPrivate opens path, a file of this user's, in a directory of its own
// (made 0700 when absent).
func openPrivate(path string, flag int) (*os.File, error) {
	if err := safefile.PrivateDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return safefile.Open(path, flag, 0o600)
}

// sameFile: the name still leads to the open file (not removed, with its
// directory or alone, nor replaced).
func sameFile(f *os.File, path string) bool {
	fi, err := os.Lstat(path)
	if err != nil {
		return false
	}
	ofi, err := f.Stat()
	return err == nil && os.SameFile(fi, ofi)
}

// lockFile takes f's flock, which other servers sharing the file honour.
func lockFile(f *os.File) (func(), error) {
	fd := int(f.Fd())
	if err := syscall.Flock(fd, syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { _ = syscall.Flock(fd, syscall.LOCK_UN) }, nil
}

// appendAt writes b as one write to f, whose size is size, or leaves it
// at size.
func appendAt(f *os.File, size int64, b []byte) error {
	n, err := f.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		if terr := f.Truncate(size); terr != nil {
			// The next batch cuts the torn line off first.
			return fmt.Errorf("%w (and the partial record could not be removed: %v)", err, terr)
		}
		return err
	}
	return nil
}

// tailChunk is how much of a file's end is read at once looking for its
// last newline.
const tailChunk = 64 << 10

// cutTornTail cuts f back to its last newline (a record cut short by a
// crash or a failed cut) and returns its size.
func cutTornTail(f *os.File) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	if size == 0 {
		return 0, nil
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], size-1); err != nil {
		return 0, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if last[0] == '\n' {
		return size, nil
	}
	keep := int64(0)
	buf := make([]byte, tailChunk)
	for end := size; end > 0; {
		start := max(0, end-tailChunk)
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("read %s: %w", f.Name(), err)
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			keep = start + int64(i) + 1
			break
		}
		end = start
	}
	if err := f.Truncate(keep); err != nil {
		return 0, fmt.Errorf("cut the torn last record of %s: %w", f.Name(), err)
	}
	return keep, nil
}

// countLines counts the newlines of f in [from, to).
func countLines(f *os.File, from, to int64) (int64, error) {
	buf := make([]byte, tailChunk)
	var n int64
	for off := from; off < to; {
		m, err := f.ReadAt(buf[:min(int64(len(buf)), to-off)], off)
		n += int64(bytes.Count(buf[:m], []byte{'\n'}))
		off += int64(m)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return 0, fmt.Errorf("read %s: %w", f.Name(), err)
		}
	}
	return n, nil
}
