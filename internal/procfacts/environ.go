package procfacts

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// MaxEnvBytes bounds what Env reads.
const MaxEnvBytes = 4 << 20

// ErrTruncated: Env stopped at its limit.
var ErrTruncated = errors.New("truncated")

// Env reads the process's environment as it was at exec (later setenv
// calls in the process do not show), at most MaxEnvBytes: past that, the
// entries read are returned with an error wrapping ErrTruncated. Reading
// another user's process needs root.
func Env(pid int) (map[string]string, error) { return EnvAt(Proc, pid, MaxEnvBytes) }

// EnvAt is Env under another /proc root, with another limit.
func EnvAt(root string, pid, limit int) (map[string]string, error) {
	f, err := os.Open(filepath.Join(root, strconv.Itoa(pid), "environ"))
	if err != nil {
		return nil, Err(pid, "environ", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, Err(pid, "environ", err)
	}
	var tail error
	if len(b) > limit {
		// Drop the entry the limit cut.
		b = b[:limit]
		if i := bytes.LastIndexByte(b, 0); i >= 0 {
			b = b[:i]
		} else {
			b = nil
		}
		tail = fmt.Errorf("pid %d: environ over %d bytes: %w", pid, limit, ErrTruncated)
	}
	return ParseEnv(b), tail
}

// ParseEnv splits NUL-separated KEY=value entries. A key given twice
// counts as its first value, as getenv and Python's os.environ read it.
func ParseEnv(b []byte) map[string]string {
	env := map[string]string{}
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte("="))
		if !ok || len(k) == 0 {
			continue
		}
		if _, dup := env[string(k)]; !dup {
			env[string(k)] = string(v)
		}
	}
	return env
}
