"""The PyPI package's own parts, fast: the launcher, the wheel layout as pip
installs it (a stand-in binary: the real one is built and checked by make
wheel), the single version and the glibc guard."""

import os
import platform
import re
import subprocess
import sys
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "pypi"))
import probing_mcp_build as build  # noqa: E402
from probing_mcp import glibc_problem  # noqa: E402

FAKE = """#!/bin/sh
printf 'argv0=%s\\n' "$0"
for a do printf 'arg=%s\\n' "$a"; done
printf 'python=%s\\n' "$PROBING_MCP_PYTHON"
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    d = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(d)], check=True)
    return d


def install(venv, tmp_path, glibc_min=None):
    fake = tmp_path / "probing-mcp"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    tag = "linux_" + platform.machine()
    wheel = build.write_wheel(str(tmp_path / "dist"), "0.0.1", str(fake), [tag], glibc_min=glibc_min)
    pip = str(venv / "bin" / "pip")
    subprocess.run([pip, "install", "--quiet", "--no-index", "--no-deps", "--force-reinstall", wheel], check=True)
    return wheel


def test_launcher_execs_the_binary_with_its_python(venv, tmp_path):
    install(venv, tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PROBING_MCP_PYTHON"}
    out = subprocess.run([str(venv / "bin" / "probing-mcp"), "a", "b c"], env=env, stdout=subprocess.PIPE,
                         check=True).stdout.decode()
    assert "arg=a\narg=b c\n" in out
    py = re.search(r"python=(.*)", out).group(1)
    assert os.path.dirname(py) == str(venv / "bin"), out
    out = subprocess.run([str(venv / "bin" / "python"), "-m", "probing_mcp", "x"], env=env, stdout=subprocess.PIPE,
                         check=True).stdout.decode()
    assert "arg=x\n" in out and "python=" + str(venv / "bin") in out
    # An interpreter named by the caller is kept.
    env["PROBING_MCP_PYTHON"] = "/opt/mine/python"
    out = subprocess.run([str(venv / "bin" / "probing-mcp")], env=env, stdout=subprocess.PIPE, check=True).stdout
    assert b"python=/opt/mine/python" in out
    # The agent is importable from the same install, without activating.
    code = "import probing_mcp_agent, sys; print(probing_mcp_agent.__version__, 'probing_mcp_agent.runtime' in sys.modules)"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], stdout=subprocess.PIPE, check=True).stdout
    assert out.split()[1] == b"False"


def test_launcher_refuses_an_older_glibc_at_start(venv, tmp_path):
    install(venv, tmp_path, glibc_min=(99, 0))
    p = subprocess.run([str(venv / "bin" / "probing-mcp"), "version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 1 and p.stdout == b""
    err = p.stderr.decode()
    assert "needs glibc 99.0 or newer" in err and "pip install --no-binary probing-mcp" in err, err


def test_launcher_names_a_missing_binary(venv, tmp_path):
    install(venv, tmp_path)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import probing_mcp, os; print(os.path.dirname(probing_mcp.__file__))"],
                          stdout=subprocess.PIPE, check=True).stdout.decode().strip()
    os.remove(os.path.join(site, "bin", "probing-mcp"))
    p = subprocess.run([str(venv / "bin" / "probing-mcp")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 1 and b"pip install --force-reinstall probing-mcp" in p.stderr


def test_glibc_problem():
    assert glibc_problem(have=(2, 36), need=(2, 17)) == ""
    assert glibc_problem(have=(2, 17), need=(2, 17)) == ""
    msg = glibc_problem(have=(2, 12), need=(2, 17))
    assert "needs glibc 2.17 or newer; this system has glibc 2.12" in msg and "--no-binary" in msg
    assert "not glibc (musl?)" in glibc_problem(have=None, need=(2, 17))
    assert glibc_problem(have=(2, 5), need=None) == ""  # built here from the sdist: no bound


def test_wheel_layout(tmp_path):
    fake = tmp_path / "bin"
    fake.write_bytes(b"\x7fELF")
    w = build.write_wheel(str(tmp_path), "1.2.3", str(fake), build.platform_tags("x86_64"))
    assert os.path.basename(w) == "probing_mcp-1.2.3-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    with zipfile.ZipFile(w) as z:
        names = z.namelist()
        assert (z.getinfo("probing_mcp/bin/probing-mcp").external_attr >> 16) & 0o777 == 0o755
        wheel_meta = z.read("probing_mcp-1.2.3.dist-info/WHEEL").decode()
        meta = z.read("probing_mcp-1.2.3.dist-info/METADATA").decode()
        version_py = z.read("probing_mcp/_version.py").decode()
    assert "Tag: py3-none-manylinux_2_17_x86_64\nTag: py3-none-manylinux2014_x86_64\n" in wheel_meta
    assert "Root-Is-Purelib: false" in wheel_meta
    assert "Requires-Python: >=3.9" in meta and "Version: 1.2.3" in meta
    assert "GLIBC_MIN = (2, 17)" in version_py
    agent = sorted(n for n in names if n.startswith("probing_mcp_agent/"))
    want = sorted("probing_mcp_agent/" + n for n in os.listdir(os.path.join(ROOT, "agent", "python", "probing_mcp_agent"))
                  if n.endswith(".py"))
    assert agent == want
    # Reproducible: the same inputs give the same bytes.
    with open(w, "rb") as f:
        first = f.read()
    w2 = build.write_wheel(str(tmp_path / "again"), "1.2.3", str(fake), build.platform_tags("x86_64"))
    with open(w2, "rb") as f:
        assert f.read() == first


def test_one_version():
    v = build.read_version()
    with open(os.path.join(ROOT, "agent", "python", "probing_mcp_agent", "__init__.py")) as f:
        agent = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)
    assert agent == v, "VERSION says %s, the agent's __version__ %s: bump both (docs/RELEASE.md)" % (v, agent)


def test_read_version_refuses_garbage(tmp_path):
    for bad in ("", "v1.0", "1.0", "1.0.0-beta", "1.0.0\n2.0.0"):
        (tmp_path / "VERSION").write_text(bad)
        with pytest.raises(build.BuildError, match="not a release version"):
            build.read_version(str(tmp_path))
    (tmp_path / "VERSION").write_text("1.2.3rc1\n")
    assert build.read_version(str(tmp_path)) == "1.2.3rc1"
