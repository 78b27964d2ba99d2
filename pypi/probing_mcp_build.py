"""Builds probing-mcp for PyPI; stdlib only.

Two doors, one code path:
- `make wheel` runs this file: the manylinux_2_17 wheels for x86_64 and
  aarch64, cgo included, cross-compiled on one machine with Zig's C
  toolchain (the `ziglang` package from PyPI, which targets an old glibc
  on any host), and the sdist.
- pip runs it as the PEP 517 backend of the sdist (pyproject.toml) where
  no wheel fits: it builds the binary with this machine's Go and C
  compiler and tags the wheel for this machine only.

The version comes from the VERSION file at the repository root, and only
from there.
"""

import argparse
import base64
import gzip
import hashlib
import io
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "probing-mcp"
DIST = "probing_mcp"  # the distribution's name in file names
GLIBC_MIN = (2, 17)
# A wheel's platform tags: the PEP 600 name, and the manylinux2014 alias
# that pip before 20.3 understands.
ARCHES = {
    "x86_64": {"goarch": "amd64", "zig": "x86_64-linux-gnu.2.17"},
    "aarch64": {"goarch": "arm64", "zig": "aarch64-linux-gnu.2.17"},
}
# The GNU ld flag go-nvml's cgo directives carry; lld (inside zig cc)
# rejects it, and gpu/nvmlstub_linux.c defines every NVML symbol, so the
# link needs no unresolved-symbol leniency at all.
_GNU_ONLY_FLAG = "-Wl,--unresolved-symbols=ignore-in-object-files"
# sdist: every tracked file but these (tests, corpus, docs and tooling a
# build does not read); the Go module's dependencies go in vendor/.
_SDIST_SKIP_DIRS = {"testdata", "evals", "redteam", "docs", ".ci", "node_modules"}
_SDIST_SKIP_FILES = {"package.json", "package-lock.json", ".gitignore"}
SUMMARY = "Why is my distributed training job stuck? An MCP server, CLI and in-process agent for PyTorch jobs"


class BuildError(Exception):
    """A build that cannot go on; the message names the fix."""


def read_version(root=ROOT):
    path = os.path.join(root, "VERSION")
    try:
        with open(path) as f:
            v = f.read().strip()
    except OSError as e:
        raise BuildError("cannot read the version from %s: %s" % (path, e))
    if not re.fullmatch(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?", v):
        raise BuildError("%s holds %r, which is not a release version (want e.g. 0.3.0 or 0.3.0rc1)" % (path, v))
    return v


def platform_tags(arch):
    return ["manylinux_2_17_" + arch, "manylinux2014_" + arch]


def wheel_filename(version, plat_tags):
    return "%s-%s-py3-none-%s.whl" % (DIST, version, ".".join(plat_tags))


# --- the binary -------------------------------------------------------------


def _wrapper_dir():
    """Where the cc wrappers live: a fixed path in this user's cache, since
    Go's build cache keys cgo objects on CC's path (a temp dir would make
    every build cold), and not a shared /tmp another user could fill."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = os.path.join(base, "probing-mcp-build")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def _zig_wrapper(zig_target):
    """A cc for cgo: zig cc for the target, minus the GNU-only flag."""
    try:
        import ziglang  # noqa: F401
    except ImportError:
        raise BuildError(
            "cross-compiling needs Zig's C toolchain from PyPI: "
            "%s -m pip install -r pypi/requirements.txt (make wheel does it in .venv-wheel)" % sys.executable
        )
    path = os.path.join(_wrapper_dir(), "zcc-" + zig_target)
    with open(path + ".part", "w") as f:
        f.write(
            "#!/bin/sh\n"
            'for a do shift; case "$a" in %s) ;; *) set -- "$@" "$a";; esac; done\n'
            'exec "%s" -m ziglang cc -target %s "$@"\n' % (_GNU_ONLY_FLAG, sys.executable, zig_target)
        )
    os.chmod(path + ".part", 0o755)
    os.replace(path + ".part", path)
    return path


def _go():
    go = shutil.which("go")
    if not go:
        raise BuildError(
            "building probing-mcp from source needs Go 1.26 or newer on PATH (https://go.dev/dl/) "
            "and a C compiler (SQLite is cgo); or install a wheel: they exist for manylinux_2_17 x86_64 and aarch64"
        )
    return go


def cgo_env(arch=None, zig=True):
    """(environment, description) for a cgo build: for arch with zig cc (a
    wheel), or for this machine with its own C compiler (zig=False)."""
    env = dict(os.environ, CGO_ENABLED="1", GOOS="linux", GOFLAGS="")
    # No -g: the wheel carries no C debug info (Go's own is cut by -s -w).
    env["CGO_CFLAGS"] = "-O2 -Wno-deprecated-declarations"
    env["CGO_LDFLAGS"] = "-Wl,--strip-all"
    if zig:
        spec = ARCHES.get(arch)
        if spec is None:
            raise BuildError("unknown arch %r: want one of %s" % (arch, ", ".join(sorted(ARCHES))))
        env["GOARCH"] = spec["goarch"]
        env["CC"] = _zig_wrapper(spec["zig"])
        return env, "%s with zig cc (%s)" % (arch, spec["zig"])
    cc = env.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise BuildError("building probing-mcp from source needs a C compiler (SQLite is cgo): install gcc")
    env["CC"] = cc
    return env, "this machine (%s)" % platform.machine()


def build_binary(out, arch=None, zig=True, version=None, root=ROOT, log=sys.stderr):
    """Builds cmd/probing-mcp into out (see cgo_env)."""
    version = version or read_version(root)
    env, how = cgo_env(arch, zig)
    cmd = [_go(), "build", "-trimpath", "-ldflags", "-s -w -X main.version=" + version]
    if os.path.isdir(os.path.join(root, "vendor")):
        cmd.append("-mod=vendor")
    cmd += ["-o", os.path.abspath(out), "./cmd/probing-mcp"]
    log.write("building probing-mcp %s for %s (a cold build compiles SQLite: 2-4 minutes)\n" % (version, how))
    log.flush()
    t0 = time.monotonic()
    # The C warnings SQLite's amalgamation prints under clang are noise:
    # the output is shown only when the build fails.
    p = subprocess.run(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        tail = p.stdout.decode("utf-8", "replace").splitlines()[-60:]
        raise BuildError("go build for %s failed (exit %d):\n%s" % (how, p.returncode, "\n".join(tail)))
    log.write("built %s in %.0f s (%.1f MB)\n" % (out, time.monotonic() - t0, os.path.getsize(out) / 1e6))
    return out


# --- the wheel --------------------------------------------------------------


def _hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _date_time():
    """Reproducible file times: SOURCE_DATE_EPOCH, else the zip epoch."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.isdigit():
        return max(time.gmtime(int(epoch))[:6], (1980, 1, 1, 0, 0, 0))
    return (1980, 1, 1, 0, 0, 0)


def metadata(version, root=ROOT):
    with open(os.path.join(root, "pypi", "README.md")) as f:
        description = f.read()
    return (
        "Metadata-Version: 2.1\n"
        "Name: %s\n"
        "Version: %s\n"
        "Summary: %s\n"
        "Home-page: https://github.com/probing-mcp/probing-mcp\n"
        "License: Apache-2.0\n"
        "Requires-Python: >=3.9\n"
        "Classifier: License :: OSI Approved :: Apache Software License\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Classifier: Programming Language :: Python :: 3\n"
        "Classifier: Programming Language :: Go\n"
        "Classifier: Topic :: System :: Monitoring\n"
        "Description-Content-Type: text/markdown\n"
        "\n%s" % (NAME, version, SUMMARY, description)
    )


def wheel_files(version, binary, plat_tags, glibc_min, root=ROOT):
    """[(path in the wheel, bytes, mode)], RECORD last."""
    files = []

    def add(name, data, mode=0o644):
        files.append((name, data if isinstance(data, bytes) else data.encode(), mode))

    pkg = os.path.join(root, "pypi", "probing_mcp")
    for name in ("__init__.py", "__main__.py"):
        with open(os.path.join(pkg, name), "rb") as f:
            add("probing_mcp/" + name, f.read())
    add(
        "probing_mcp/_version.py",
        "# Written by pypi/probing_mcp_build.py from VERSION.\n"
        "__version__ = %r\n"
        "# The oldest glibc the binary runs on; None for a binary built on this machine.\n"
        "GLIBC_MIN = %r\n" % (version, tuple(glibc_min) if glibc_min else None),
    )
    with open(binary, "rb") as f:
        add("probing_mcp/bin/probing-mcp", f.read(), 0o755)
    agent = os.path.join(root, "agent", "python", "probing_mcp_agent")
    for name in sorted(os.listdir(agent)):
        if name.endswith(".py"):
            with open(os.path.join(agent, name), "rb") as f:
                add("probing_mcp_agent/" + name, f.read())
    di = "%s-%s.dist-info/" % (DIST, version)
    add(di + "METADATA", metadata(version, root))
    add(
        di + "WHEEL",
        "Wheel-Version: 1.0\nGenerator: probing_mcp_build\nRoot-Is-Purelib: false\n"
        + "".join("Tag: py3-none-%s\n" % t for t in plat_tags),
    )
    add(di + "entry_points.txt", "[console_scripts]\nprobing-mcp = probing_mcp.__main__:main\n")
    add(di + "top_level.txt", "probing_mcp\nprobing_mcp_agent\n")
    with open(os.path.join(root, "LICENSE"), "rb") as f:
        add(di + "LICENSE", f.read())
    record = "".join("%s,%s,%d\n" % (n, _hash(d), len(d)) for n, d, _ in files) + di + "RECORD,,\n"
    add(di + "RECORD", record)
    return files


def write_wheel(out_dir, version, binary, plat_tags, glibc_min=GLIBC_MIN, root=ROOT):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, wheel_filename(version, plat_tags))
    tmp = path + ".part"
    dt = _date_time()
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name, data, mode in wheel_files(version, binary, plat_tags, glibc_min, root):
            info = zipfile.ZipInfo(name, dt)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, path)
    return path


# --- the sdist --------------------------------------------------------------


def _tracked(root):
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise BuildError("the sdist is made from a git checkout (git ls-files failed: %s)" % e)
    return sorted(p for p in out.decode().split("\0") if p)


def sdist_members(root=ROOT):
    keep = []
    for p in _tracked(root):
        parts = p.split("/")
        if _SDIST_SKIP_DIRS.intersection(parts[:-1]) or parts[-1] in _SDIST_SKIP_FILES:
            continue
        if p.endswith("_test.go") or p.endswith("_test.py") or "/tests/" in "/" + p:
            continue
        if os.path.isfile(os.path.join(root, p)):
            keep.append(p)
    return keep


def write_sdist(out_dir, version=None, root=ROOT, log=sys.stderr):
    """probing_mcp-VERSION.tar.gz: the sources the binary builds from, the
    Go dependencies vendored (a source build needs Go, not the network)."""
    version = version or read_version(root)
    base = "%s-%s" % (DIST, version)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, base + ".tar.gz")
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800") or 315532800)
    with tempfile.TemporaryDirectory(prefix="probing-mcp-sdist-") as tmp:
        vendor = os.path.join(tmp, "vendor")
        log.write("vendoring the Go dependencies for the sdist (go mod vendor)\n")
        p = subprocess.run(
            [_go(), "mod", "vendor", "-o", vendor], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        if p.returncode != 0:
            raise BuildError("go mod vendor failed: %s" % p.stdout.decode("utf-8", "replace")[-2000:])

        def add(tar, arcname, data, mode=0o644):
            info = tarfile.TarInfo(base + "/" + arcname)
            info.size, info.mtime, info.mode = len(data), mtime, mode
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))

        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
            add(tar, "PKG-INFO", metadata(version, root).encode())
            for rel in sdist_members(root):
                full = os.path.join(root, rel)
                with open(full, "rb") as f:
                    add(tar, rel, f.read(), 0o755 if os.access(full, os.X_OK) else 0o644)
            for dirpath, dirs, names in os.walk(vendor):
                dirs.sort()
                for n in sorted(names):
                    full = os.path.join(dirpath, n)
                    with open(full, "rb") as f:
                        add(tar, "vendor/" + os.path.relpath(full, vendor), f.read())
        with open(path + ".part", "wb") as out:
            with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=mtime, compresslevel=9) as gz:
                gz.write(raw.getvalue())
        os.replace(path + ".part", path)
    return path


# --- PEP 517: the sdist's backend --------------------------------------------


def _native_tag():
    """This machine's own platform tag: a wheel built here is for here."""
    if not sys.platform.startswith("linux"):
        raise BuildError(
            "probing-mcp runs on Linux only (it reads /proc and Linux sockets); this is %s" % sys.platform
        )
    return "linux_" + platform.machine()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    try:
        version = read_version()
        with tempfile.TemporaryDirectory(prefix="probing-mcp-wheel-") as tmp:
            binary = build_binary(os.path.join(tmp, "probing-mcp"), zig=False, version=version)
            path = write_wheel(wheel_directory, version, binary, [_native_tag()], glibc_min=None)
    except BuildError as e:
        # pip prints the backend's traceback; the last line is what counts.
        raise SystemExit("probing-mcp: %s" % e)
    return os.path.basename(path)


def build_sdist(sdist_directory, config_settings=None):
    try:
        return os.path.basename(write_sdist(sdist_directory))
    except BuildError as e:
        raise SystemExit("probing-mcp: %s" % e)


# --- make wheel ---------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description="Build probing-mcp's wheels (zig cc) and sdist.")
    ap.add_argument("--arch", action="append", choices=sorted(ARCHES), help="a wheel for this arch (repeatable)")
    ap.add_argument("--sdist", action="store_true", help="also write the sdist")
    ap.add_argument("--out", default=os.path.join(ROOT, "dist"), help="output directory (default dist/)")
    args = ap.parse_args(argv)
    if not args.arch and not args.sdist:
        ap.error("nothing to build: give --arch and/or --sdist")
    try:
        version = read_version()
        with tempfile.TemporaryDirectory(prefix="probing-mcp-wheel-") as tmp:
            for arch in args.arch or []:
                binary = build_binary(os.path.join(tmp, "probing-mcp-" + arch), arch=arch, version=version)
                path = write_wheel(args.out, version, binary, platform_tags(arch))
                print("%s (%.1f MB)" % (path, os.path.getsize(path) / 1e6))
        if args.sdist:
            path = write_sdist(args.out, version)
            print("%s (%.1f MB)" % (path, os.path.getsize(path) / 1e6))
    except BuildError as e:
        sys.stderr.write("probing_mcp_build: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
