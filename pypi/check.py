"""Checks built wheels and the sdist as a user meets them; stdlib only.

    python3 pypi/check.py [--smoke] [--sdist FILE] WHEEL...

- every wheel: `go run ./pypi/wheelcheck` (the tag against the binary's
  machine, glibc symbol versions and libraries, RECORD, size), `auditwheel
  show` and, with the sdist, `twine check --strict` (where they are
  importable: make wheel installs them);
- an aarch64 wheel on another machine: its binary runs `version` and
  `analyze` on committed real dumps under qemu-user (skipped, with the
  install command, where qemu-aarch64 or the arm64 libc is missing);
- --smoke: the wheel for this machine is installed by pip into a fresh
  venv with no network, and run there: the launcher, `python -m`, the demo,
  analyze, agent install/uninstall into that venv, pip's refusals (Python
  3.8, an older glibc) and a clean `pip uninstall`;
- --sdist: the sdist builds a wheel with this machine's Go and C compiler
  (offline: its Go dependencies are vendored), which installs and runs.
"""

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "pypi"))
import probing_mcp_build as build  # noqa: E402

DUMPS = os.path.join(ROOT, "testdata", "fr", "real", "missing_rank_pgfix")
CULPRIT = "Culprit rank(s): 2"
QEMU_FIX = "apt-get install qemu-user libc6-arm64-cross"


class Failed(Exception):
    pass


def run(cmd, want_rc=0, env=None, timeout=600, cwd=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=timeout, cwd=cwd)
    out = p.stdout.decode("utf-8", "replace")
    if want_rc is not None and p.returncode != want_rc:
        raise Failed("%s exited %d (want %d):\n%s" % (" ".join(cmd), p.returncode, want_rc, out[-3000:]))
    return out


def expect(out, needle, what):
    if needle not in out:
        raise Failed("%s: no %r in:\n%s" % (what, needle, out[-3000:]))


def wheel_arch(path):
    m = re.search(r"_(x86_64|aarch64)\.whl$", path)
    return m.group(1) if m else None


def check_static(wheels, version):
    print(run(["go", "run", "./pypi/wheelcheck", "--version", version, "--max-mb", "15"] + wheels, cwd=ROOT), end="")
    try:
        import auditwheel  # noqa: F401
    except ImportError:
        print("auditwheel show: skipped (pip install -r pypi/requirements.txt; make wheel does)")
        return
    for w in wheels:
        arch = wheel_arch(w)
        out = run([sys.executable, "-m", "auditwheel", "show", w])
        expect(" ".join(out.split()), '"manylinux_2_17_%s"' % arch, "auditwheel show " + os.path.basename(w))
        print("auditwheel show %s: consistent with manylinux_2_17_%s" % (os.path.basename(w), arch))


def check_twine(files):
    """The metadata PyPI will take and render (the README as markdown)."""
    try:
        import twine  # noqa: F401
    except ImportError:
        print("twine check: skipped (pip install -r pypi/requirements.txt; make wheel does)")
        return
    out = run([sys.executable, "-m", "twine", "--no-color", "check", "--strict"] + files)
    print("twine check --strict: %d file(s) PASSED" % out.count("PASSED"))


def check_emulated(wheel, version):
    qemu, sysroot = shutil.which("qemu-aarch64"), "/usr/aarch64-linux-gnu"
    if not qemu or not os.path.isdir(sysroot):
        print("aarch64 under qemu: skipped (no qemu-aarch64 or %s: %s)" % (sysroot, QEMU_FIX))
        return False
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as z:
        binary = z.extract("probing_mcp/bin/probing-mcp", tmp)
        os.chmod(binary, 0o755)
        base = [qemu, "-L", sysroot, binary]
        expect(run(base + ["version"]), "probing-mcp " + version, "aarch64 version")
        expect(run(base + ["analyze", DUMPS]), CULPRIT, "aarch64 analyze")
        # The arm64 NVML stubs (gpu/nvmlstub_linux.c) under LD_BIND_NOW=1:
        # without a library, and forwarding to a fake one built by zig cc.
        env, _ = build.cgo_env("aarch64")
        test = os.path.join(tmp, "gpu.test")
        run(["go", "test", "-c", "-o", test, "./gpu"], env=env, cwd=ROOT)
        env = dict(env, GPU_TEST_EMULATOR="%s -L %s" % (qemu, sysroot))
        out = run([qemu, "-L", sysroot, test, "-test.run", "TestBindNow|TestNoUndefinedNVMLSymbols", "-test.v"],
                  env=env, cwd=os.path.join(ROOT, "gpu"))
        if out.count("--- PASS") != 3:
            raise Failed("the arm64 NVML stub tests did not all pass:\n" + out[-3000:])
    print("aarch64 under qemu: version %s, analyze names rank 2 on %s, the NVML stub tests pass (3)"
          % (version, os.path.relpath(DUMPS, ROOT)))
    return True


def venv(tmp, name, python=None):
    d = os.path.join(tmp, name)
    run([python or os.environ.get("PYTHON") or sys.executable, "-m", "venv", d])
    return d, os.path.join(d, "bin")


def older_python():
    """A Python older than the wheel's 3.9, where the machine has one."""
    import glob

    cands = [shutil.which(n) for n in ("python3.8", "python3.7")]
    cands += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.[78].*/bin/python")))
    for c in cands:
        if not c:
            continue
        try:  # a pyenv shim is on PATH even where that version is not active
            out = subprocess.run([c, "-c", "import sys; print(sys.version_info < (3, 9))"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, timeout=60).stdout
        except OSError:
            continue
        if out.strip() == b"True":
            return c
    return None


def smoke(wheel, version, tmp):
    t0 = time.monotonic()
    d, bindir = venv(tmp, "smoke")
    py, pip, pm = (os.path.join(bindir, n) for n in ("python", "pip", "probing-mcp"))
    # No network and no other package: what the wheel brings must do.
    t1 = time.monotonic()
    run([pip, "install", "--quiet", "--no-index", "--no-deps", wheel])
    installed = time.monotonic() - t1
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    env.pop("PROBING_MCP_PYTHON", None)
    expect(run([pm, "version"], env=env), "probing-mcp " + version, "probing-mcp version")
    expect(run([py, "-m", "probing_mcp", "version"], env=env), "probing-mcp " + version, "python -m probing_mcp")
    expect(run([pm, "analyze", DUMPS], env=env), CULPRIT, "analyze")
    t1 = time.monotonic()
    demo = run([pm, "demo", "--exit"], env=env, timeout=900)
    demo_s = time.monotonic() - t1
    expect(demo, "rank 2", "demo --exit")
    site = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    # agent install with no --python: the launcher's interpreter, this venv.
    out = run([pm, "agent", "install"], env=env)
    expect(out, "pip installed", "agent install")
    pth = os.path.join(site, "probing_mcp_agent.pth")
    if not os.path.isfile(pth):
        raise Failed("agent install wrote no %s:\n%s" % (pth, out))
    probe = (
        "import sys, os, probing_mcp_agent.nodestart as n\n"
        "print('active', 'probing_mcp_agent.runtime' in sys.modules)\n"
        "print('bin', n.find_binary({}, sys.executable, os.path.dirname(n.__file__))[0])\n"
    )
    with tempfile.TemporaryDirectory() as data:
        penv = dict(env, PROBING="1", PROBING_MCP_NODE="0", PROBING_DATA_DIR=data, PROBING_CTRL_ROOT=data)
        out = run([py, "-c", probe], env=penv)
    expect(out, "active True", "PROBING=1 activates the agent")
    expect(out, "bin " + os.path.join(site, "probing_mcp", "bin", "probing-mcp"), "the node daemon's binary")
    expect(run([pm, "agent", "uninstall"], env=env), "removed " + pth, "agent uninstall")
    # pip refuses what the wheel cannot serve, before installing anything:
    # an older glibc (the platform tag), an older Python (Requires-Python).
    out = run(
        [pip, "install", "--dry-run", "--no-index", "--no-deps", "--only-binary=:all:", "--target",
         os.path.join(tmp, "t"), "--platform", "manylinux_2_12_" + platform.machine(),
         "--find-links", os.path.dirname(os.path.abspath(wheel)), "probing-mcp"], want_rc=None)
    expect(out, "No matching distribution found for probing-mcp", "pip install for glibc 2.12")
    old = older_python()
    if old:
        od, obin = venv(tmp, "old", python=old)
        out = run([os.path.join(obin, "pip"), "install", "--no-index", "--no-deps", wheel], want_rc=None)
        expect(out, "requires a different Python", "pip install under " + old)
        refusals = "Python %s, glibc 2.12" % run([old, "-c", "import platform; print(platform.python_version())"]).strip()
    else:
        refusals = "glibc 2.12; no Python older than 3.9 here to try"
    run([pip, "uninstall", "--quiet", "--yes", "probing-mcp"])
    left = [n for n in os.listdir(site) if n.startswith("probing_mcp")]
    if left:
        raise Failed("pip uninstall left %s in %s" % (left, site))
    print(
        "smoke (%s): pip install %.1f s; version, python -m, analyze, demo --exit (%.0f s), agent install/"
        "uninstall, pip's refusals (%s) and uninstall: OK in %.0f s"
        % (os.path.basename(wheel), installed, demo_s, refusals, time.monotonic() - t0)
    )


def from_sdist(sdist, version, tmp):
    d, bindir = venv(tmp, "sdist")
    pip = os.path.join(bindir, "pip")
    out_dir = os.path.join(tmp, "sdist-wheel")
    t0 = time.monotonic()
    # --no-index: the build needs no package and no network (vendored Go
    # modules; GOFLAGS=-mod=vendor is the backend's).
    env = dict(os.environ, GOPROXY="off", GOFLAGS="")
    run([pip, "wheel", "--quiet", "--no-index", "--no-deps", "-w", out_dir, sdist], env=env, timeout=1800)
    built = time.monotonic() - t0
    wheels = os.listdir(out_dir)
    tag = "linux_" + platform.machine()
    if len(wheels) != 1 or not wheels[0].endswith(tag + ".whl"):
        raise Failed("the sdist built %s, want one %s wheel" % (wheels, tag))
    w = os.path.join(out_dir, wheels[0])
    print(run(["go", "run", "./pypi/wheelcheck", "--version", version, "--max-mb", "0", w], cwd=ROOT), end="")
    run([pip, "install", "--quiet", "--no-index", "--no-deps", w])
    pm = os.path.join(bindir, "probing-mcp")
    expect(run([pm, "version"]), "probing-mcp " + version, "the sdist's probing-mcp version")
    expect(run([pm, "analyze", DUMPS]), CULPRIT, "the sdist's analyze")
    print("sdist %s: built offline into %s in %.0f s; version and analyze OK" % (os.path.basename(sdist), wheels[0], built))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheels", nargs="*")
    ap.add_argument("--smoke", action="store_true", help="install this machine's wheel in a fresh venv and run it")
    ap.add_argument("--sdist", help="build, install and run the sdist")
    ap.add_argument("--require-qemu", action="store_true", help="fail where the aarch64 wheel cannot be run")
    args = ap.parse_args(argv)
    version = build.read_version()
    try:
        if args.wheels:
            check_static(args.wheels, version)
        if args.wheels or args.sdist:
            check_twine(args.wheels + ([args.sdist] if args.sdist else []))
        host = platform.machine()
        for w in args.wheels:
            if wheel_arch(w) == "aarch64" and host != "aarch64":
                if not check_emulated(w, version) and args.require_qemu:
                    raise Failed("the aarch64 wheel was not run (%s)" % QEMU_FIX)
        with tempfile.TemporaryDirectory(prefix="probing-mcp-check-") as tmp:
            if args.smoke:
                mine = [w for w in args.wheels if wheel_arch(w) == host]
                if not mine:
                    raise Failed("--smoke: no %s wheel among %s" % (host, args.wheels))
                smoke(mine[0], version, tmp)
            if args.sdist:
                from_sdist(args.sdist, version, tmp)
    except (Failed, build.BuildError, subprocess.TimeoutExpired) as e:
        sys.stderr.write("pypi/check.py: FAILED: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
