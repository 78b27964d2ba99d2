#!/usr/bin/env python3
"""What the agent adds to every interpreter start.

    python3 agent/python/bench/startup.py [--n 40] [--binary PATH] [--compare PATH]
        [--python python3] [--node] [--importtime] [--json]

Builds probing-mcp (`go build ./cmd/probing-mcp` from the repository root,
unless --binary names one), makes two venvs of --python in a temp dir and
installs the agent into one of them the real way (`probing-mcp agent install
--python <venv>/bin/python`: the package and its .pth in site-packages).
Then it runs `python -c pass` --n times per mode, the modes interleaved in a
shuffled order each round so that load on the machine hits them alike:

  bare        the venv without the agent
  unset       the venv with the agent, PROBING unset (the .pth hook only)
  PROBING=1   activated in this process
  PROBING=2   activated, and re-exported to children
  cmp ...     with --compare BINARY: the same three with that binary's agent
              (e.g. `git stash; go build -o /tmp/old ./cmd/probing-mcp`), so
              that before and after come from one run

The environment is passed on as it is: with PYTHONDONTWRITEBYTECODE=1 (set
in some sandboxes and images) an agent that was not compiled at install is
compiled again at every start; `env -u PYTHONDONTWRITEBYTECODE` lets the
warm-up run write its .pyc files.

For each: median and p90 of the wall time (spawn to exit) and of the
child's CPU time (user + sys, from wait4), and the medians' difference
from bare. CPU time counts what the agent's background thread did before
the process exited, which the wall time of a short process can hide.

It also measures, for PROBING=1, how long after the spawn the agent is
usable (the median of --n/4 runs of a process that sleeps): the identity
file written and the control socket answering GET /health.

PROBING_DATA_DIR (a temp dir in /dev/shm, where the agent's default data
dir is) and PROBING_CTRL_ROOT (in the temp dir) are the bench's own, so
nothing of a real job is touched. The node daemon is switched off
(PROBING_MCP_NODE=off) unless --node: a single process is its node's
leader and would start `probing-mcp node` from a background thread.

--importtime prints what `python -X importtime -c pass` shows under
PROBING=1: the agent's modules and the largest imports, cumulative.
The last line is a JSON summary (--json: only that).
"""

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def build_binary(out):
    subprocess.run(["go", "build", "-o", out, "./cmd/probing-mcp"], cwd=REPO, check=True)
    return out


def make_venv(python, root, name, binary=None):
    d = os.path.join(root, name)
    subprocess.run([python, "-m", "venv", "--without-pip", d], check=True)
    py = os.path.join(d, "bin", "python")
    if binary:
        r = subprocess.run([binary, "agent", "install", "--python", py], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("agent install failed: %s%s" % (r.stdout, r.stderr))
    return py


def base_env(root, data, node):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("PROBING") or k in ("PYTHONPATH", "PYTHONSTARTUP", "RANK", "LOCAL_RANK", "WORLD_SIZE"):
            del env[k]
    env["PROBING_DATA_DIR"] = data
    env["PROBING_CTRL_ROOT"] = os.path.join(root, "ctrl")
    if not node:
        env["PROBING_MCP_NODE"] = "off"
    return env


def run_once(argv, env):
    """(wall ms, child CPU ms) of one run."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
    if p.returncode != 0:
        sys.exit("%s exited %s" % (argv, p.returncode))
    return wall * 1000, (ru.ru_utime + ru.ru_stime) * 1000


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def health(path, timeout=0.5):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while True:  # to the end: a client that hangs up early makes the agent log a warning
            b = s.recv(4096)
            if not b:
                break
            data += b
        return data.startswith(b"HTTP/1.1 200")
    except OSError:
        return False
    finally:
        s.close()


def ready_once(py, env):
    """ms from spawn until the identity file exists and /health answers."""
    t0 = time.perf_counter()
    p = subprocess.Popen([py, "-c", "import time; time.sleep(30)"], env=env, stdin=subprocess.DEVNULL)
    ident = os.path.join(env["PROBING_DATA_DIR"], str(p.pid), ".identity.json")
    sock = os.path.join(env["PROBING_CTRL_ROOT"], "%d.sock" % p.pid)
    t_ident = t_health = None
    try:
        while time.perf_counter() - t0 < 20 and (t_ident is None or t_health is None):
            now = (time.perf_counter() - t0) * 1000
            if t_ident is None and os.path.exists(ident):
                t_ident = now
            if t_ident is not None and t_health is None and os.path.exists(sock) and health(sock):
                t_health = (time.perf_counter() - t0) * 1000
            time.sleep(0.001)
    finally:
        p.kill()
        p.wait()
    if t_ident is None or t_health is None:
        sys.exit("the agent did not become ready within 20 s (identity %s, health %s)" % (t_ident, t_health))
    return t_ident, t_health


def importtime(py, env):
    e = dict(env, PROBING="1")
    r = subprocess.run([py, "-X", "importtime", "-c", "pass"], env=e, capture_output=True, text=True)
    rows = []
    for line in r.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        parts = line[len("import time:"):].split("|")
        rows.append((int(parts[1]), int(parts[0]), parts[2].rstrip()))
    mods = subprocess.run([py, "-c", "import sys; print(len(sys.modules))"], env=e, capture_output=True,
                          text=True).stdout.strip()
    return rows, mods


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=40, help="runs per mode (default 40)")
    ap.add_argument("--binary", help="a built probing-mcp (default: go build one)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter to make the venvs of")
    ap.add_argument("--compare", metavar="BINARY", help="another probing-mcp (e.g. built from main): its agent "
                    "in a third venv, measured in the same rounds (modes 'cmp ...')")
    ap.add_argument("--node", action="store_true", help="leave the node daemon start on")
    ap.add_argument("--importtime", action="store_true", help="show -X importtime under PROBING=1")
    ap.add_argument("--json", action="store_true", help="print only the JSON summary")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="probing-startup-")
    data = None
    try:
        binary = a.binary or build_binary(os.path.join(root, "probing-mcp"))
        bare = make_venv(a.python, root, "bare")
        agent = make_venv(a.python, root, "agent", binary)
        # The data dir where the agent's default is: tmpfs (/dev/shm).
        data = tempfile.mkdtemp(prefix="probing-startup-", dir="/dev/shm" if os.path.isdir("/dev/shm") else root)
        env = base_env(root, data, a.node)
        modes = [("bare", bare, None), ("unset", agent, None), ("PROBING=1", agent, "1"), ("PROBING=2", agent, "2")]
        if a.compare:
            old = make_venv(a.python, root, "compare", a.compare)
            modes += [("cmp unset", old, None), ("cmp PROB=1", old, "1"), ("cmp PROB=2", old, "2")]
        wall = dict((m[0], []) for m in modes)
        cpu = dict((m[0], []) for m in modes)
        for m in modes:  # warm the page cache and the .pyc files
            e = dict(env, PROBING=m[2]) if m[2] else env
            run_once([m[1], "-c", "pass"], e)
        for _ in range(a.n):
            order = list(modes)
            random.shuffle(order)
            for name, py, val in order:
                e = dict(env, PROBING=val) if val else env
                w, c = run_once([py, "-c", "pass"], e)
                wall[name].append(w)
                cpu[name].append(c)
        ready = [ready_once(agent, dict(env, PROBING="1")) for _ in range(max(5, a.n // 4))]
        base_w, base_c = statistics.median(wall["bare"]), statistics.median(cpu["bare"])
        summary = {"n": a.n, "python": a.python, "cpus": os.cpu_count(), "node_daemon": a.node,
                   "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "modes": {},
                   "ready_ms": {"identity_median": round(statistics.median([r[0] for r in ready]), 1),
                                "health_median": round(statistics.median([r[1] for r in ready]), 1),
                                "health_p90": round(pct([r[1] for r in ready], 0.9), 1)}}
        if not a.json:
            print("python -c pass, %d runs per mode, interleaved; %d CPUs; %s" % (a.n, os.cpu_count(), a.python))
            print("%-10s %9s %9s %9s   %9s %9s %9s" % ("mode", "wall med", "wall p90", "+wall", "cpu med",
                                                      "cpu p90", "+cpu"))
        for name, _, _ in modes:
            w, c = wall[name], cpu[name]
            row = {"wall_median": round(statistics.median(w), 1), "wall_p90": round(pct(w, 0.9), 1),
                   "wall_added": round(statistics.median(w) - base_w, 1),
                   "cpu_median": round(statistics.median(c), 1), "cpu_p90": round(pct(c, 0.9), 1),
                   "cpu_added": round(statistics.median(c) - base_c, 1)}
            summary["modes"][name] = row
            if not a.json:
                print("%-10s %9.1f %9.1f %+9.1f   %9.1f %9.1f %+9.1f" % (
                    name, row["wall_median"], row["wall_p90"], row["wall_added"], row["cpu_median"],
                    row["cpu_p90"], row["cpu_added"]))
        if not a.json:
            r = summary["ready_ms"]
            print("PROBING=1 ready after spawn (%d runs): identity file %.1f ms, /health answers %.1f ms (p90 %.1f)"
                  % (len(ready), r["identity_median"], r["health_median"], r["health_p90"]))
        if a.importtime and not a.json:
            rows, nmods = importtime(agent, env)
            print("\n-X importtime under PROBING=1 (%s modules in sys.modules at exit); cumulative us:" % nmods)
            ours = [r for r in rows if "probing_mcp_agent" in r[2]]
            for cum, self_us, name in sorted(ours, reverse=True):
                print("  %8d %8d %s" % (cum, self_us, name))
            print("largest imports:")
            for cum, self_us, name in sorted(rows, reverse=True)[:25]:
                print("  %8d %8d %s" % (cum, self_us, name))
        print(json.dumps(summary, sort_keys=True))
    finally:
        if data:
            shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
