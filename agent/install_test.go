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

// pipInstall lays the agent out in the venv's site-packages as pip does
// with the wheel (pypi/probing_mcp_build.py): the package, the wheel's
// binary in probing_mcp/bin, and a dist-info whose RECORD lists them.
func pipInstall(t *testing.T, vpy string) (site string) {
	t.Helper()
	out, err := exec.Command(vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
	if err != nil {
		t.Fatal(err)
	}
	site = strings.TrimSpace(string(out))
	tmp := t.TempDir()
	if err := agent.ExtractTo(tmp, "wheel"); err != nil {
		t.Fatal(err)
	}
	var record strings.Builder
	entries, _ := os.ReadDir(filepath.Join(tmp, "probing_mcp_agent"))
	os.MkdirAll(filepath.Join(site, "probing_mcp_agent"), 0o755)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".py") {
			continue // the marker is ExtractTo's, not the wheel's
		}
		b, _ := os.ReadFile(filepath.Join(tmp, "probing_mcp_agent", e.Name()))
		os.WriteFile(filepath.Join(site, "probing_mcp_agent", e.Name()), b, 0o644)
		record.WriteString("probing_mcp_agent/" + e.Name() + ",sha256=x,1\n")
	}
	bin := filepath.Join(site, "probing_mcp", "bin", "probing-mcp")
	os.MkdirAll(filepath.Dir(bin), 0o755)
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	di := filepath.Join(site, "probing_mcp-9.9.9.dist-info")
	os.MkdirAll(di, 0o755)
	record.WriteString("probing_mcp/bin/probing-mcp,sha256=x,1\n")
	os.WriteFile(filepath.Join(di, "RECORD"), []byte(record.String()), 0o644)
	return site
}

// Beside a pip install, install adds the start-up hook and nothing else
// (pip owns the package and the binary), and uninstall removes only the
// hook; a hook that outlives `pip uninstall` stays silent.
func TestInstallBesideAWheel(t *testing.T) {
	py := python(t)
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(py, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Skipf("cannot create a virtualenv with %s: %v: %s", py, err, out)
	}
	vpy := filepath.Join(venv, "bin", "python")
	site := pipInstall(t, vpy)
	before, _ := os.ReadDir(filepath.Join(site, "probing_mcp_agent"))
	did, err := agent.Install(vpy, false, "test")
	if err != nil {
		t.Fatalf("install: %v (%v)", err, did)
	}
	text := strings.Join(did, "\n")
	for _, want := range []string{"pip installed (probing_mcp-9.9.9.dist-info)", "probing_mcp.pth", "the wheel's, " + filepath.Join(site, "probing_mcp", "bin", "probing-mcp"), "imports probing_mcp_agent"} {
		if !strings.Contains(text, want) && !(want == "probing_mcp.pth" && strings.Contains(text, "probing_mcp_agent.pth")) {
			t.Errorf("install said no %q:\n%s", want, text)
		}
	}
	after, _ := os.ReadDir(filepath.Join(site, "probing_mcp_agent"))
	if len(after) != len(before) {
		t.Errorf("install wrote into pip's package: %d entries, was %d", len(after), len(before))
	}
	if _, err := os.Stat(filepath.Join(venv, "bin", "probing-mcp")); err == nil {
		t.Error("install copied a binary into the scripts dir: pip's launcher goes there")
	}
	did, err = agent.Uninstall(vpy)
	if err != nil {
		t.Fatal(err)
	}
	if text := strings.Join(did, "\n"); !strings.Contains(text, "pip installed it") || !strings.Contains(text, "removed "+filepath.Join(site, "probing_mcp_agent.pth")) {
		t.Errorf("uninstall: %v", did)
	}
	if _, err := os.Stat(filepath.Join(site, "probing_mcp_agent", "__init__.py")); err != nil {
		t.Errorf("uninstall removed pip's package: %v", err)
	}
	// `pip uninstall probing-mcp` with the hook still there: the package
	// goes, the .pth stays; Python must start without a word.
	if _, err := agent.Install(vpy, false, "test"); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(site, "probing_mcp_agent"))
	os.RemoveAll(filepath.Join(site, "probing_mcp-9.9.9.dist-info"))
	out, err := exec.Command(vpy, "-c", "pass").CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("python with an orphaned hook: %v: %q", err, out)
	}
}
