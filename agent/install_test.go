package agent_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/probing-mcp/probing-mcp/agent"
)

// TestInstallIntoAVirtualenv installs the embedded agent into a fresh
// virtualenv, checks that PROBING=1 activates it in a plain `python`
// (through the .pth, as in a real job) and that uninstall removes exactly
// what install wrote.
func TestInstallIntoAVirtualenv(t *testing.T) {
	py := python(t)
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(py, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Skipf("cannot create a virtualenv with %s: %v: %s", py, err, out)
	}
	vpy := filepath.Join(venv, "bin", "python")
	did, err := agent.Install(vpy, false, "test")
	if err != nil {
		t.Fatalf("install: %v (%v)", err, did)
	}
	if b, err := os.ReadFile(filepath.Join(venv, "bin", "probing-mcp")); err != nil {
		t.Errorf("install did not place the binary in the venv's bin: %v (%v)", err, did)
	} else if self, _ := os.Executable(); self != "" {
		if want, _ := os.ReadFile(self); string(b) != string(want) {
			t.Error("the placed binary is not a copy of the running executable")
		}
	}
	if !strings.Contains(strings.Join(did, "\n"), "imports probing_mcp_agent") {
		t.Errorf("install did not report its check: %v", did)
	}
	// Precompiled: an activated start must not compile the agent again
	// where site-packages is read-only for the job's user.
	if pyc, _ := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(vpy)), "lib", "python*", "site-packages",
		"probing_mcp_agent", "__pycache__", "activation.*.pyc")); len(pyc) != 1 {
		t.Errorf("install did not compile the agent: %v (%v)", pyc, did)
	}
	// --user inside a virtualenv is refused with the reason.
	if _, err := agent.Install(vpy, true, "test"); err == nil || !strings.Contains(err.Error(), "user site-packages disabled") {
		t.Errorf("--user in a venv: %v", err)
	}
	opt := newDirs(t)
	cmd := exec.Command(vpy, "-c", "import time; time.sleep(20)")
	// PROBING_MCP_NODE=0: the binary placed beside it is this test binary,
	// which must not be started as a node daemon.
	cmd.Env = append(os.Environ(), "PROBING=1", "PROBING_MCP_NODE=0", "PROBING_DATA_DIR="+opt.DataDir, "PROBING_CTRL_ROOT="+opt.CtrlRoot)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var found *agent.Agent
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && found == nil; time.Sleep(100 * time.Millisecond) {
		all, _ := agent.Discover(opt)
		for _, a := range all {
			if a.PID == cmd.Process.Pid && a.Alive && a.Identity != nil {
				found = a
			}
		}
	}
	if found == nil {
		t.Fatal("PROBING=1 did not activate the installed agent")
	}
	// Without PROBING nothing activates.
	out, err := exec.Command(vpy, "-c", "import sys; print('probing_mcp_agent.runtime' in sys.modules)").Output()
	if err != nil || strings.TrimSpace(string(out)) != "False" {
		t.Errorf("without PROBING: %s %v", out, err)
	}
	did, err = agent.Uninstall(vpy)
	if err != nil {
		t.Fatal(err)
	}
	if len(did) != 3 || !strings.Contains(did[0], filepath.Join(venv, "bin", "probing-mcp")) {
		t.Errorf("uninstall (binary, package, hook): %v", did)
	}
	if _, err := os.Stat(filepath.Join(venv, "bin", "probing-mcp")); err == nil {
		t.Error("the placed binary is still there after uninstall")
	}
	if err := exec.Command(vpy, "-c", "import probing_mcp_agent").Run(); err == nil {
		t.Error("the agent is still importable after uninstall")
	}
	did, _ = agent.Uninstall(vpy)
	if len(did) != 1 || !strings.Contains(did[0], "nothing to remove") {
		t.Errorf("second uninstall: %v", did)
	}
}
