package evidence

import (
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/probing-mcp/probing-mcp/agent"
	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/stacks"
)

// maxCrashBytes bounds a crash file: faulthandler writes at most 100
// frames per thread.
const maxCrashBytes = 1 << 20

// Crash is what a dead rank's interpreter wrote as a fatal signal killed
// it: faulthandler's "Fatal Python error: <what>" and the threads' stacks.
type Crash struct {
	What string // "Segmentation fault", "Aborted", …
	Main *stacks.Thread
}

// readCrash reads a dead rank's crash file (its identity's crash_file),
// trusted like its other files: a regular file of the process's owner
// that nobody else can write. nil, nil when there is none or it is empty.
func readCrash(a *agent.Agent) (*Crash, error) {
	id := a.Identity
	if id == nil || id.CrashFile == "" || !filepath.IsAbs(id.CrashFile) {
		return nil, nil
	}
	f, fi, err := procfacts.OpenRegular(id.CrashFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	if err := procfacts.CheckFile(fi, procfacts.Owner{UID: a.UID, GID: -1}); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCrashBytes))
	if err != nil || len(b) == 0 {
		return nil, err
	}
	c := &Crash{}
	for _, line := range strings.SplitN(string(b), "\n", 20) {
		if w, ok := strings.CutPrefix(strings.TrimSpace(line), "Fatal Python error: "); ok {
			c.What = procfacts.Trunc(w)
			break
		}
	}
	if threads, err := stacks.ParseFaulthandler(b); err == nil {
		for i := range threads {
			if threads[i].IsMain {
				t := threads[i]
				c.Main = &t
			}
		}
	}
	if c.What == "" && c.Main == nil {
		return nil, nil
	}
	return c, nil
}
