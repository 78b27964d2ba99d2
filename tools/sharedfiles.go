package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/probing-mcp/probing-mcp/internal/procfacts"
	"github.com/probing-mcp/probing-mcp/internal/safefile"
)

// A dump named like torch's in a shared temp directory (/tmp/
// nccl_trace_rank_N) may have been left there by any user, so it counts
// only as the rule of safefile says: not a symlink, and the file of a user
// this server reads dumps for (its own, the job's users named in
// PROBING_MCP_JOB_USER, or root), which nobody else can write. Anything
// else is a "not read" line of the answer, with the reason.

// dumpOwner is a user whose dumps in a shared directory count.
type dumpOwner struct{ uid, gid int }

// sharedOwners: this server's user, and the job's users it is told of.
func sharedOwners(getenv func(string) string) []dumpOwner {
	out := []dumpOwner{{os.Geteuid(), os.Getegid()}}
	scope, err := procfacts.ScopeFromEnv(getenv)
	if err != nil {
		return out // a bad value is refused at start (ConfigFromEnv)
	}
	for _, uid := range scope.UIDs {
		gid := -1 // unknown: group-writable files are refused
		if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
			if g, err := strconv.Atoi(u.Gid); err == nil {
				gid = g
			}
		}
		out = append(out, dumpOwner{uid, gid})
	}
	return out
}

// inShared reports whether abs lies in a root in a shared temp directory
// and in no other root.
func (p FilePolicy) inShared(abs string) bool {
	shared := false
	for _, r := range p.Roots {
		if r.contains(abs) {
			if !r.Shared {
				return false
			}
			shared = true
		}
	}
	return shared
}

// checkShared vets a file (as named, abs, and as resolved, real) that lies
// in a shared root; nil for any other file.
func (p FilePolicy) checkShared(abs, real string) error {
	if !p.inShared(abs) && !p.inShared(real) {
		return nil
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symbolic link in a directory every user can write; only a dump its user wrote there is read", abs)
	}
	if !fi.Mode().IsRegular() {
		return nil // a directory's files are each checked as they are found
	}
	var why error
	for _, o := range p.Owners {
		if why = safefile.Check(fi, o.uid, o.gid); why == nil {
			return nil
		}
	}
	var oe *safefile.OwnerError
	if errors.As(why, &oe) {
		names := make([]string, len(p.Owners))
		for i, o := range p.Owners {
			names[i] = safefile.UserName(o.uid)
		}
		why = fmt.Errorf("it belongs to %s, and this server reads dumps in shared directories of %s only (set PROBING_MCP_JOB_USER to the job's user, or point TORCH_FR_DUMP_TEMP_FILE at a directory of the job's own)",
			safefile.UserName(oe.Have), strings.Join(names, ", "))
	}
	return fmt.Errorf("%s is in a directory every user can write, and %w", abs, why)
}
