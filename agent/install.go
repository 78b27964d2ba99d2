package agent

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// The Python agent, embedded so that one binary can install it into any
// interpreter on the node. The pattern names .py files explicitly: a
// directory embed would skip __init__.py and _hook.py (leading _).
//
//go:embed python/probing_mcp_agent/*.py
var pythonFS embed.FS

const (
	pkgDir     = "python/probing_mcp_agent"
	pkgName    = "probing_mcp_agent"
	pthName    = "probing_mcp_agent.pth"
	markerName = "INSTALLED_BY_PROBING_MCP"
	// pthLine is what Python runs at every start-up: the hook decides,
	// from PROBING, whether to activate (agent/PROTOCOL.md). A hook left
	// behind by `pip uninstall probing-mcp` (pip does not know of it)
	// must not print an import error at every start of that Python: a
	// missing agent package is passed over, any other error is raised.
	pthLine = `import sys; exec("try:\n import probing_mcp_agent._hook\nexcept ModuleNotFoundError as e:\n if e.name != 'probing_mcp_agent': raise\n")` + "\n"
	// legacyPthLine is what installs before 0.2.0's wheel wrote.
	legacyPthLine = "import probing_mcp_agent._hook\n"
)

// ExtractTo writes the agent package (and its .pth) into dir, which then
// works as a site directory: site.addsitedir(dir), or PYTHONPATH=dir with
// an explicit "import probing_mcp_agent._hook".
func ExtractTo(dir, version string) error {
	target := filepath.Join(dir, pkgName)
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	err := fs.WalkDir(pythonFS, pkgDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := pythonFS.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(target, filepath.Base(p)), b, 0o644)
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(target, markerName), []byte("probing-mcp "+version+"\n"), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, pthName), []byte(pthLine), 0o644)
}

// pythonInfo is what an interpreter says about itself.
type pythonInfo struct {
	Exe        string `json:"exe"`
	Version    string `json:"version"`
	Purelib    string `json:"purelib"`
	UserSite   string `json:"user"`
	EnableUser *bool  `json:"enable_user"`
	// Scripts and UserScripts are where console scripts go (pip's bin
	// dirs), for the system and the user install.
	Scripts     string `json:"scripts"`
	UserScripts string `json:"user_scripts"`
}

const infoScript = `import json, os, site, sys, sysconfig
def user_scripts():
    try:
        f = getattr(sysconfig, "get_preferred_scheme", None)  # 3.10+
        return sysconfig.get_path("scripts", f("user") if f else os.name + "_user")
    except Exception:
        return ""
print(json.dumps({"exe": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3],
  "purelib": sysconfig.get_paths()["purelib"], "user": site.getusersitepackages(), "enable_user": site.ENABLE_USER_SITE,
  "scripts": sysconfig.get_paths().get("scripts", ""), "user_scripts": user_scripts()}))`

func inspectPython(ctx context.Context, python string) (*pythonInfo, error) {
	out, err := exec.CommandContext(ctx, python, "-c", infoScript).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("%s failed: %v: %s", python, err, bytes.TrimSpace(ee.Stderr))
		}
		return nil, fmt.Errorf("cannot run %s: %w", python, err)
	}
	var info pythonInfo
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("%s: unexpected answer %q", python, out)
	}
	var major, minor int
	fmt.Sscanf(info.Version, "%d.%d", &major, &minor)
	if major < 3 || (major == 3 && minor < 9) {
		return nil, fmt.Errorf("%s is Python %s; the agent needs 3.9 or newer", python, info.Version)
	}
	return &info, nil
}

// Install writes the agent and its start-up hook into the site-packages of
// python (the user site with user), places the running probing-mcp binary
// in the matching scripts dir (installbin.go), checks that the interpreter
// imports the agent, and returns one line per thing it did.
func Install(python string, user bool, version string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	info, err := inspectPython(ctx, python)
	if err != nil {
		return nil, err
	}
	site, scripts := info.Purelib, info.Scripts
	if user {
		if info.EnableUser != nil && !*info.EnableUser {
			return nil, fmt.Errorf("%s has user site-packages disabled (ENABLE_USER_SITE is false, e.g. in a virtualenv): install without --user", info.Exe)
		}
		site, scripts = info.UserSite, info.UserScripts
	}
	var did []string
	if err := checkWritable(site); err != nil {
		return nil, err
	}
	target := filepath.Join(site, pkgName)
	if owner := wheelOwner(site); owner != "" {
		if did, err = installBesideWheel(info, site, owner); err != nil {
			return did, err
		}
		return checkImport(ctx, info, did)
	}
	var prev *binRecord
	if _, err := os.Stat(target); err == nil {
		if _, err := os.Stat(filepath.Join(target, markerName)); err != nil {
			return nil, fmt.Errorf("%s exists and was not installed by probing-mcp: remove it first", target)
		}
		prev = readBinRecord(target)
		if err := os.RemoveAll(target); err != nil {
			return nil, err
		}
		did = append(did, "replaced the previous install in "+target)
	}
	if err := ExtractTo(site, version); err != nil {
		return nil, writeErr(site, err)
	}
	did = append(did, fmt.Sprintf("wrote the agent package %s (Python %s, %s)", target, info.Version, info.Exe))
	// Compiled now, as pip does: the site hook imports the agent at every
	// start of an activated interpreter, and a site-packages its users
	// cannot write (or PYTHONDONTWRITEBYTECODE) would make each start
	// compile it again (about 150 ms).
	comp := exec.CommandContext(ctx, info.Exe, "-m", "compileall", "-q", target)
	if out, err := comp.CombinedOutput(); err != nil {
		did = append(did, fmt.Sprintf("could not precompile %s (each start compiles it then): %v: %s", target, err, bytes.TrimSpace(out)))
	} else {
		did = append(did, "compiled it to bytecode ("+filepath.Join(target, "__pycache__")+")")
	}
	did = append(did, fmt.Sprintf("wrote the start-up hook %s (it imports probing_mcp_agent._hook, which does nothing without PROBING)", filepath.Join(site, pthName)))
	placed, err := placeBinary(scripts, target, version, prev)
	did = append(did, placed...)
	if err != nil {
		return did, err
	}
	return checkImport(ctx, info, did)
}

// checkImport proves the interpreter imports the agent it now has.
func checkImport(ctx context.Context, info *pythonInfo, did []string) ([]string, error) {
	check := exec.CommandContext(ctx, info.Exe, "-c", "import probing_mcp_agent, sys; sys.stdout.write(getattr(probing_mcp_agent, '__version__', '?'))")
	check.Env = append(os.Environ(), "PROBING=0")
	out, err := check.CombinedOutput()
	if err != nil {
		return did, fmt.Errorf("installed, but %s cannot import it: %v: %s", info.Exe, err, bytes.TrimSpace(out))
	}
	did = append(did, fmt.Sprintf("checked: %s imports probing_mcp_agent %s", info.Exe, out),
		"activate it per process with PROBING=1 (this process), PROBING=2 (and children) or PROBING=train.py (by script name)")
	return did, nil
}

// Uninstall removes what Install wrote from both the system and the user
// site of python, and only that: the binary only while it is the file
// Install wrote (its recorded hash).
func Uninstall(python string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	info, err := inspectPython(ctx, python)
	if err != nil {
		return nil, err
	}
	var did []string
	for _, site := range []string{info.Purelib, info.UserSite} {
		if site == "" {
			continue
		}
		target := filepath.Join(site, pkgName)
		if owner := wheelOwner(site); owner != "" {
			did = append(did, "left "+target+": pip installed it ("+owner+"; pip uninstall probing-mcp removes it)")
		} else if _, err := os.Stat(filepath.Join(target, markerName)); err == nil {
			line, err := removeBinary(target)
			if err != nil {
				return did, err
			}
			if line != "" {
				did = append(did, line)
			}
			if err := os.RemoveAll(target); err != nil {
				return did, err
			}
			did = append(did, "removed "+target)
		} else if _, err := os.Stat(target); err == nil {
			did = append(did, "left "+target+": not installed by probing-mcp")
		}
		pth := filepath.Join(site, pthName)
		if b, err := os.ReadFile(pth); err == nil {
			if !ourHook(b) {
				did = append(did, "left "+pth+": not ours")
				continue
			}
			if err := os.Remove(pth); err != nil {
				return did, err
			}
			did = append(did, "removed "+pth)
		}
	}
	if len(did) == 0 {
		did = append(did, "nothing to remove: the agent is not installed for "+info.Exe)
	}
	return did, nil
}
