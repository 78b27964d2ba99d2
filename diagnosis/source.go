package diagnosis

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/probing-mcp/probing-mcp/internal/procfacts"
)

// Source-line bounds: a frame's file is named by the job (untrusted), so
// reading it is bounded in bytes, lines and the length of what is shown.
const (
	maxSourceBytes = 8 << 20
	maxSourceLine  = 200_000
	maxSourceShown = 160
)

// sourceLine reads line n of file for display, but only when the job's
// user could read that file itself: a server running as root must not
// show a line of a file (say /etc/shadow) that a job merely named in a
// frame. The check is on the opened file (no race with a rename): owner
// read bit for the job's uid, group bit for its effective gid, or
// world-readable; supplementary groups are not known, so they do not
// count (the line is then left out, never guessed).
func sourceLine(file string, n int, owner procfacts.Owner) (string, error) {
	if n <= 0 || n > maxSourceLine {
		return "", fmt.Errorf("line %d out of range", n)
	}
	if !filepath.IsAbs(file) {
		return "", errors.New("not an absolute path")
	}
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", errors.New("not a regular file")
	}
	if !readableBy(fi, owner) {
		return "", fmt.Errorf("not readable by the job's user (uid %d)", owner.UID)
	}
	r := bufio.NewReader(io.LimitReader(f, maxSourceBytes))
	for i := 1; ; i++ {
		line, err := r.ReadString('\n')
		if i == n {
			line = strings.TrimSpace(line)
			if len(line) > maxSourceShown {
				line = line[:maxSourceShown] + "…"
			}
			return strings.ToValidUTF8(line, "?"), nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return "", fmt.Errorf("%s has fewer than %d lines (read up to %d bytes)", file, n, maxSourceBytes)
			}
			return "", err
		}
	}
}

func readableBy(fi os.FileInfo, o procfacts.Owner) bool {
	switch {
	case o.UID < 0:
		return false
	case o.UID == 0:
		return true // a root job reads anything
	}
	uid, gid := procfacts.FileIDs(fi)
	m := fi.Mode().Perm()
	switch {
	case uid == o.UID:
		return m&0o400 != 0
	case o.GID >= 0 && gid == o.GID:
		return m&0o040 != 0
	}
	return m&0o004 != 0
}
