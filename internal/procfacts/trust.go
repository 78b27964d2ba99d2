package procfacts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/probing-mcp/probing-mcp/internal/safefile"
)

// On a shared node the data dir and the control root are world-writable
// (1777, like /tmp), so anyone can leave a file there that names any pid.
// Such a file may speak for the process it names only when it belongs to
// that process's owner and nobody else can have changed it: CheckFile.

// Owner is the user whose files may speak for a process.
type Owner struct {
	UID, GID int
	// Live: read from the running process (its effective ids). Otherwise
	// the process is gone and the owner is its pid directory's, the only
	// witness left.
	Live bool
}

// ProcessOwner is the effective user and group of a running process: the
// owner of the files it creates.
func ProcessOwner(pid int) (Owner, error) {
	st, err := ReadStatus(pid)
	if err != nil {
		return Owner{UID: -1, GID: -1}, err
	}
	if st.EUID() < 0 {
		return Owner{UID: -1, GID: -1}, fmt.Errorf("pid %d: /proc/%d/status has no Uid line", pid, pid)
	}
	return Owner{UID: st.EUID(), GID: st.EGID(), Live: true}, nil
}

// FileIDs is the owner and group of a file.
func FileIDs(fi fs.FileInfo) (uid, gid int) { return safefile.IDs(fi) }

// CheckFile says why the file described by fi may not speak for a
// process owned by o, or returns nil: safefile.Check, the one rule for
// files in shared directories, said in terms of the process.
func CheckFile(fi fs.FileInfo, o Owner) error {
	err := safefile.Check(fi, o.UID, o.GID)
	var oe *safefile.OwnerError
	if errors.As(err, &oe) {
		if o.Live {
			return fmt.Errorf("it belongs to %s, but the process runs as %s", UserName(oe.Have), UserName(o.UID))
		}
		return fmt.Errorf("it belongs to %s, but its pid directory to %s", UserName(oe.Have), UserName(o.UID))
	}
	return err
}

// UserName is "uid 1000 (alice)", or "uid 1000" when the name is unknown.
func UserName(uid int) string { return safefile.UserName(uid) }

// Scope is whose processes a server serves. A server that is not root
// serves its own user: it could not reach another user's agents anyway
// (their sockets check the peer), and their files in a shared directory
// are not its. A root server serves every user, but the processes of one
// job at a time: the users named in PROBING_MCP_JOB_USER, else the only
// user who has processes in the data dir. When several users do and none
// is named, it cannot tell whose job the question is about, and says so
// (Resolve) rather than merge two users' ranks.
type Scope struct {
	Self int   // this server's effective uid
	UIDs []int // PROBING_MCP_JOB_USER, when set
}

// ScopeFromEnv reads PROBING_MCP_JOB_USER: user names or uids, comma
// separated. An unknown name is an error, so a typo is caught at start.
func ScopeFromEnv(getenv func(string) string) (Scope, error) {
	s := Scope{Self: syscall.Geteuid()}
	v := strings.TrimSpace(getenv("PROBING_MCP_JOB_USER"))
	if v == "" {
		return s, nil
	}
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if n, err := strconv.Atoi(item); err == nil && n >= 0 {
			s.UIDs = append(s.UIDs, n)
			continue
		}
		u, err := user.Lookup(item)
		if err != nil {
			return s, fmt.Errorf("PROBING_MCP_JOB_USER=%q: no user %q on this node; give user names or uids, comma separated", v, item)
		}
		n, _ := strconv.Atoi(u.Uid)
		s.UIDs = append(s.UIDs, n)
	}
	if len(s.UIDs) == 0 {
		return s, fmt.Errorf("PROBING_MCP_JOB_USER=%q names no user; give user names or uids, comma separated", v)
	}
	return s, nil
}

// Served is the outcome of Resolve.
type Served struct {
	UIDs map[int]bool
	// All: a root server with nothing in the data dir yet serves anyone.
	All bool
	// Ambiguous is set, with the users present, when a root server found
	// several users' processes and was told none.
	Ambiguous string
}

// Has reports whether uid's processes are served.
func (s Served) Has(uid int) bool { return s.All || s.UIDs[uid] }

// Why is the reason a process of uid is not served, "" when it is.
func (s Served) Why(uid int, self int) string {
	switch {
	case s.Has(uid):
		return ""
	case s.Ambiguous != "":
		return s.Ambiguous
	case self != 0 && len(s.UIDs) == 1 && s.UIDs[self]:
		return fmt.Sprintf("another user's: it belongs to %s, and this server runs as %s and serves that user's processes only", UserName(uid), UserName(self))
	}
	var names []string
	for u := range s.UIDs {
		names = append(names, UserName(u))
	}
	sort.Strings(names)
	return fmt.Sprintf("another user's: it belongs to %s, and this server serves %s (PROBING_MCP_JOB_USER)", UserName(uid), strings.Join(names, ", "))
}

// Resolve decides whose processes are served, given how many trusted
// entries each user has in the data dir.
func (s Scope) Resolve(present map[int]int) Served {
	out := Served{UIDs: map[int]bool{}}
	switch {
	case len(s.UIDs) > 0:
		for _, u := range s.UIDs {
			out.UIDs[u] = true
		}
	case s.Self != 0:
		out.UIDs[s.Self] = true
	case len(present) == 0:
		out.All = true
	case len(present) == 1:
		for u := range present {
			out.UIDs[u] = true
		}
	default:
		uids := make([]int, 0, len(present))
		for u := range present {
			uids = append(uids, u)
		}
		sort.Ints(uids)
		var parts []string
		for _, u := range uids {
			parts = append(parts, fmt.Sprintf("%s: %d", UserName(u), present[u]))
		}
		name := UserName(uids[0])
		if i := strings.IndexByte(name, '('); i >= 0 {
			name = strings.TrimSuffix(name[i+1:], ")")
		} else {
			name = strconv.Itoa(uids[0])
		}
		out.Ambiguous = fmt.Sprintf("processes of %d users share the data dir (%s) and this root server cannot tell whose job to serve: set PROBING_MCP_JOB_USER (e.g. PROBING_MCP_JOB_USER=%s) or run the server as the job's user",
			len(uids), strings.Join(parts, ", "), name)
	}
	return out
}

var defaultScope struct {
	once  sync.Once
	scope Scope
	err   error
}

// DefaultScope is this process's scope, from its environment, read once.
func DefaultScope() (Scope, error) {
	defaultScope.once.Do(func() {
		defaultScope.scope, defaultScope.err = ScopeFromEnv(os.Getenv)
	})
	return defaultScope.scope, defaultScope.err
}
