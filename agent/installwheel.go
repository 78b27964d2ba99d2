package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Beside a pip install: the wheel (pypi/) ships the agent package and the
// binary (in site-packages/probing_mcp/bin), both owned by pip. Install
// then adds only the .pth hook, and Uninstall removes only that: pip
// removes the rest, and a file written into pip's dirs would outlive
// `pip uninstall`.

// wheelOwner names the probing-mcp distribution whose RECORD lists the
// agent package in site ("probing_mcp-0.2.0.dist-info"), or "".
func wheelOwner(site string) string {
	infos, _ := filepath.Glob(filepath.Join(site, "probing_mcp-*.dist-info"))
	for _, di := range infos {
		f, err := os.Open(filepath.Join(di, "RECORD"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		owned := false
		for sc.Scan() && !owned {
			owned = strings.HasPrefix(sc.Text(), pkgName+"/__init__.py,")
		}
		f.Close()
		if owned {
			return filepath.Base(di)
		}
	}
	return ""
}

// wheelBinary is the binary the wheel installed beside the agent, where
// the agent's node-daemon start looks for it (nodestart.py).
func wheelBinary(site string) string {
	return filepath.Join(site, "probing_mcp", "bin", binName)
}

// installHook writes the .pth into site unless one not ours is there.
func installHook(site string) (string, error) {
	pth := filepath.Join(site, pthName)
	if b, err := os.ReadFile(pth); err == nil && !ourHook(b) {
		return "", fmt.Errorf("%s exists and was not written by probing-mcp: remove it first", pth)
	}
	if err := os.WriteFile(pth, []byte(pthLine), 0o644); err != nil {
		return "", writeErr(site, err)
	}
	return fmt.Sprintf("wrote the start-up hook %s (it imports probing_mcp_agent._hook, which does nothing without PROBING)", pth), nil
}

// ourHook: a .pth this or an earlier probing-mcp wrote.
func ourHook(b []byte) bool {
	return string(b) == pthLine || string(b) == legacyPthLine
}

// checkWritable fails early, before anything is written, where site is
// not the caller's to write: a system interpreter's site-packages, a
// read-only image or mount.
func checkWritable(site string) error {
	if err := os.MkdirAll(site, 0o755); err != nil {
		return writeErr(site, err)
	}
	f, err := os.CreateTemp(site, ".probing-mcp-write-check-*")
	if err != nil {
		return writeErr(site, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// writeErr names the fix for a site-packages this user cannot write.
func writeErr(site string, err error) error {
	switch {
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("%s is on a read-only filesystem (%v): install with --user, or into a virtualenv on a writable filesystem (python3 -m venv ~/venv && probing-mcp agent install --python ~/venv/bin/python)", site, err)
	case errors.Is(err, fs.ErrPermission):
		owner := ""
		if st, e := os.Stat(site); e == nil {
			if sys, ok := st.Sys().(*syscall.Stat_t); ok {
				owner = fmt.Sprintf(" (it belongs to uid %d; you are uid %d)", sys.Uid, os.Getuid())
			}
		}
		return fmt.Errorf("cannot write to %s%s: this interpreter is not yours to change; install with --user, into a virtualenv you own (python3 -m venv ~/venv && probing-mcp agent install --python ~/venv/bin/python), or as the interpreter's owner", site, owner)
	}
	return fmt.Errorf("writing into %s: %w", site, err)
}

// installBesideWheel is Install where pip owns the agent package.
func installBesideWheel(info *pythonInfo, site, owner string) ([]string, error) {
	did := []string{fmt.Sprintf("the agent package %s is the one pip installed (%s): left as it is (Python %s, %s)",
		filepath.Join(site, pkgName), owner, info.Version, info.Exe)}
	line, err := installHook(site)
	if err != nil {
		return did, err
	}
	did = append(did, line)
	if bin := wheelBinary(site); isExecutable(bin) {
		did = append(did, "the node daemon's binary is the wheel's, "+bin+" (the agent of each node's local rank 0 starts `probing-mcp node` from it)")
	} else {
		did = append(did, "warning: the wheel's binary "+bin+" is missing: the node daemon will not start by itself; reinstall probing-mcp with pip, or set PROBING_MCP_BIN in the job's environment")
	}
	return did, nil
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
