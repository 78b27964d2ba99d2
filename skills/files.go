package skills

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
)

// ReadFile reads one file of a loaded skill (SKILL.md, steps.yaml) from
// the root it was loaded from, with the same size limit as loading, for
// serving it as a resource or copying it into an agent's skills dir.
func ReadFile(s *Skill, name string) ([]byte, error) {
	fsys := s.Root.FS
	if fsys == nil {
		fsys = os.DirFS(s.Root.Path)
	}
	p := path.Join(s.ID, name)
	st, err := fs.Stat(fsys, p)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d-byte limit", p, st.Size(), MaxFileSize)
	}
	f, err := fsys.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err == nil && len(b) > MaxFileSize {
		err = errors.New(p + ": grew past the size limit while being read")
	}
	return b, err
}
