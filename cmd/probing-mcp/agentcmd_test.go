package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// newVenv makes a virtualenv that another user can enter and run: from
// the system's python3 where there is one (a pyenv shim under /root is
// out of the second user's reach).
func newVenv(t *testing.T) (venv, python string) {
	t.Helper()
	base := "python3"
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		base = "/usr/bin/python3"
	}
	dir := t.TempDir()
	venv = filepath.Join(dir, "venv")
	if out, err := exec.Command(base, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Skipf("cannot create a virtualenv with %s: %v: %s", base, err, out)
	}
	for d := venv; d != filepath.Dir(filepath.Dir(dir)); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	return venv, filepath.Join(venv, "bin", "python")
}

// The wheel's launcher names its interpreter in PROBING_MCP_PYTHON: agent
// install with no --python installs there.
func TestAgentInstallDefaultsToTheLaunchersPython(t *testing.T) {
	bin := demoBinary(t)
	venv, py := newVenv(t)
	cmd := exec.Command(bin, "agent", "install")
	cmd.Env = append(os.Environ(), "PROBING_MCP_PYTHON="+py)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), "checked: "+py) && !strings.Contains(string(out), venv) {
		t.Fatalf("installed elsewhere:\n%s", out)
	}
	cmd = exec.Command(bin, "agent", "uninstall")
	cmd.Env = append(os.Environ(), "PROBING_MCP_PYTHON="+py)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "removed") {
		t.Fatalf("uninstall: %v: %s", err, out)
	}
}

// An interpreter the user does not own: refused before anything is
// written, with the fixes named. As root the install runs as uid 65534;
// otherwise site-packages is made read-only.
func TestAgentInstallIntoAnInterpreterNotYours(t *testing.T) {
	bin := demoBinary(t)
	os.Chmod(filepath.Dir(bin), 0o755)
	venv, py := newVenv(t)
	cmd := exec.Command(bin, "agent", "install", "--python", py)
	cmd.Dir = "/"
	if os.Getuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		probe := exec.Command(py, "-c", "pass")
		probe.Dir, probe.SysProcAttr = "/", cmd.SysProcAttr
		if out, err := probe.CombinedOutput(); err != nil {
			t.Skipf("uid 65534 cannot run %s (%v: %s): no second user to test with", py, err, out)
		}
	} else {
		sites, _ := filepath.Glob(filepath.Join(venv, "lib", "python*", "site-packages"))
		if len(sites) != 1 {
			t.Fatalf("site-packages: %v", sites)
		}
		os.Chmod(sites[0], 0o555)
		t.Cleanup(func() { os.Chmod(sites[0], 0o755) })
	}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("want exit 1, got %v: %s", err, out)
	}
	for _, want := range []string{"cannot write to", "not yours to change", "--user", "virtualenv you own"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the message lacks %q:\n%s", want, out)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(venv, "lib", "python*", "site-packages", "probing_mcp_agent*")); len(m) > 0 {
		t.Errorf("a refused install wrote %v", m)
	}
}
