#!/usr/bin/env python3
"""Measure torch.distributed.debug's stack fetch against probing-mcp's
whole-job get_stacks, on the same hung gloo job, in the same run.

For each job size N: N gloo ranks on this machine, split over --nodes
simulated nodes (own PROBING_DATA_DIR / PROBING_CTRL_ROOT / node host),
each rank with torch's debug worker server (start_debug_server) and the
probing-mcp agent (PROBING=1). One rank hangs in a fake data loader; the
others wait in all_reduce. Then, --reps times each:

  (a) torch debug server: what its frontend's /stacks does (StacksHandler:
      fetch_all("dump_traceback") = TCPStore multi_get of debug_server/rank<R>,
      concurrent POST /handler/dump_traceback to every rank, joined as
      StacksHandler.dump() joins them);
  (b) probing-mcp: one `probing-mcp node` daemon per node on 127.0.0.<2+i>,
      one `probing-mcp serve --peers ...` coordinator over stdio JSON-RPC,
      tools/call get_stacks; bytes = the result's text content.

Stdlib + torch only. Needs the agent installed into the Python:
  go build -o /tmp/pm ./cmd/probing-mcp && /tmp/pm agent install --python PY
Usage:
  PY evals/bench/debugserver_bench.py --pm /tmp/pm --sizes 4,8 --reps 5
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

RANK_SCRIPT = r'''
import os, sys, time
import torch
import torch.distributed as dist

HANG_STEP = int(os.environ["BENCH_HANG_STEP"])
CULPRIT = int(os.environ["BENCH_CULPRIT"])


def fake_loader(step, rank):
    # The bug under study: one rank's data loader never yields.
    if step == HANG_STEP and rank == CULPRIT:
        print("rank %d stuck in loader" % rank, flush=True)
        if os.environ.get("BENCH_WEDGE") == "1":
            # Wedged: a regex that backtracks for hours, all the while
            # holding the GIL (the sre engine never releases it).
            import re
            re.match(r"(a+)+$", "a" * 64 + "b")
        while True:
            time.sleep(1)
    return torch.randn(16, 32)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    import torch.distributed.debug as dbg
    try:
        dbg.start_debug_server(port=0)
    except ImportError as e:
        # Rank 0's frontend needs jinja2 (absent here); the worker server
        # and its TCPStore registration happen before that import.
        print("rank %d: frontend not started: %s" % (rank, e), flush=True)
    print("rank %d debug worker up" % rank, flush=True)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1000000):
        x = fake_loader(step, rank)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        print("rank %d step %d" % (rank, step), flush=True)
        time.sleep(0.05)


sys.exit(main())
'''

TOKEN = "bench-token-0123456789abcdef"


def free_port(host="127.0.0.1"):
    s = socket.socket()
    s.bind((host, 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Procs:
    """Every process started here, each in its own process group."""

    def __init__(self):
        self.procs = []

    def start(self, argv, env, log):
        p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(p)
        return p

    def start_pipe(self, argv, env, log):
        p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=log, start_new_session=True)
        self.procs.append(p)
        return p

    def kill_all(self):
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []


def debugserver_fetch(master_port, world, timeout):
    """The debug frontend's fetch_all("dump_traceback") + StacksHandler.dump()."""
    import torch.distributed as dist
    store = dist.PrefixStore("debug_server", dist.TCPStore(
        host_name="127.0.0.1", port=master_port, is_master=False))
    addrs = [a.decode() for a in store.multi_get(["rank%d" % r for r in range(world)])]
    urls = ["%s/handler/dump_traceback?" % a for a in addrs]

    def get(url):
        try:
            req = urllib.request.Request(url, data=b"", method="POST")
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode("utf-8", "replace")
        except Exception as e:  # the frontend reports, not raises
            return 502, "%s: %s" % (type(e).__name__, e)

    with ThreadPoolExecutor(max_workers=20) as ex:  # the frontend's pool size
        resps = list(ex.map(get, urls))
    parts = []
    failed = [(i, r) for i, r in enumerate(resps) if r[0] != 200]
    if failed:
        parts.append("PARTIAL DATA: %d/%d workers responded" % (world - len(failed), world))
        parts.extend("  Rank %d: %s" % (i, r[1]) for i, r in failed)
        parts.append("")
    for i, (u, r) in enumerate(zip(addrs, resps)):
        parts.append("=== Rank %d: %s ===" % (i, u))
        parts.append(r[1] if r[0] == 200 else "Error: %d" % r[0])
    return "\n".join(parts), len(failed)


class MCP:
    """A raw JSON-RPC client of `probing-mcp serve` over stdio."""

    def __init__(self, proc):
        self.p, self.id = proc, 0

    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def call(self, method, params):
        self.id += 1
        self.send({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("probing-mcp serve closed stdout")
            m = json.loads(line)
            if m.get("id") == self.id:
                if "error" in m:
                    raise RuntimeError("JSON-RPC error: %s" % m["error"])
                return m["result"]

    def init(self):
        self.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "debugserver_bench", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


def text_of(result):
    return "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")


def wait_hung(logs, world, culprit, hang_step, deadline):
    while time.time() < deadline:
        txt = [open(l).read() for l in logs]
        if "stuck in loader" in txt[culprit] and all(
                ("step %d" % (hang_step - 1)) in t for t in txt):
            return
        time.sleep(0.3)
    raise RuntimeError("job did not reach the hang; rank logs:\n" + "\n".join(
        "--- %s\n%s" % (l, open(l).read()[-1500:]) for l in logs))


def run_size(args, world, procs, rows):
    d = tempfile.mkdtemp(prefix="dbgbench-%d-" % world)
    try:
        script = os.path.join(d, "rank.py")
        open(script, "w").write(RANK_SCRIPT)
        master_port = free_port()
        nodes = min(args.nodes, world)
        per = (world + nodes - 1) // nodes
        nd = []
        for n in range(nodes):
            nd.append({"host": "node%d" % n, "data": os.path.join(d, "node%d" % n, "data"),
                       "ctrl": os.path.join(d, "node%d" % n, "ctrl")})
            os.makedirs(nd[-1]["data"])
            os.makedirs(nd[-1]["ctrl"])
        culprit = world - 1  # on the last node
        logs = []
        for r in range(world):
            n = r // per
            env = dict(os.environ, PROBING="1", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
                       RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r - n * per),
                       LOCAL_WORLD_SIZE=str(min(per, world - n * per)), GROUP_RANK=str(n),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port), GLOO_SOCKET_IFNAME="lo",
                       PROBING_DATA_DIR=nd[n]["data"], PROBING_CTRL_ROOT=nd[n]["ctrl"],
                       PROBING_NODE_HOST=nd[n]["host"], PROBING_MCP_NODE="0",
                       BENCH_HANG_STEP=str(args.hang_step), BENCH_CULPRIT=str(culprit),
                       BENCH_WEDGE="1" if args.wedge else "0")
            logs.append(os.path.join(d, "rank%d.log" % r))
            procs.start([sys.executable, script], env, open(logs[-1], "w"))
        wait_hung(logs, world, culprit, args.hang_step, time.time() + 180)
        time.sleep(2)  # the waiters are inside all_reduce by now

        peers = []
        for n in range(nodes):
            ip = "127.0.0.%d" % (2 + n)
            addr = "%s:%d" % (ip, free_port(ip))
            env = dict(os.environ, PROBING_DATA_DIR=nd[n]["data"], PROBING_CTRL_ROOT=nd[n]["ctrl"],
                       PROBING_AUTH_TOKEN=TOKEN, PROBING_NODE_HOST=nd[n]["host"])
            for k in ("MASTER_ADDR", "MASTER_PORT", "PROBING"):
                env.pop(k, None)
            procs.start([args.pm, "node", "--http", addr, "--idle-exit", "0", "--no-register"],
                        env, open(os.path.join(d, "node%d.log" % n), "w"))
            peers.append(addr)
        senv = dict(os.environ, PROBING_AUTH_TOKEN=TOKEN, PROBING_DATA_DIR=os.path.join(d, "coord"),
                    PROBING_CTRL_ROOT=os.path.join(d, "coord-ctrl"))
        for k in ("MASTER_ADDR", "MASTER_PORT", "PROBING"):
            senv.pop(k, None)
        serve = procs.start_pipe([args.pm, "serve", "--peers", ",".join(peers)], senv,
                                 open(os.path.join(d, "serve.log"), "w"))
        mcp = MCP(serve)
        mcp.init()

        # Warm-up, and proof both tools see every rank before timing.
        deadline = time.time() + 60
        while True:
            res = mcp.call("tools/call", {"name": "get_stacks", "arguments": {}})
            sc = res.get("structuredContent") or {}
            cov = json.dumps(sc.get("coverage", {}))
            srcs = " ".join(sc.get("sources", {}).values())
            if not res.get("isError") and ("0-%d" % (world - 1) in srcs or _all_ranks(sc, world)):
                break
            if time.time() > deadline:
                raise RuntimeError("get_stacks never covered all %d ranks: %s" % (world, text_of(res)[:2000]))
            time.sleep(1)
        out, nfail = debugserver_fetch(master_port, world, args.fetch_timeout)
        if nfail and not args.wedge:
            raise RuntimeError("debug server: %d ranks failed:\n%s" % (nfail, out[:2000]))
        if args.show:
            print("---- debug server output (N=%d, first 3000 bytes)\n%s" % (world, out[:3000]))
            print("---- get_stacks text (N=%d)\n%s" % (world, text_of(res)))
            print("---- coverage %s sources %s" % (cov, sc.get("sources")))

        ds_t, ds_b, ds_ok, pm_t, pm_b, pm_sb = [], [], [], [], [], []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            out, nfail = debugserver_fetch(master_port, world, args.fetch_timeout)
            ds_t.append(time.perf_counter() - t0)
            ds_b.append(len(out.encode()))
            ds_ok.append(world - nfail)
            t0 = time.perf_counter()
            res = mcp.call("tools/call", {"name": "get_stacks", "arguments": {}})
            pm_t.append(time.perf_counter() - t0)
            assert not res.get("isError"), text_of(res)
            pm_b.append(len(text_of(res).encode()))
            pm_sb.append(len(json.dumps(res.get("structuredContent") or {}).encode()))
        ok = "culprit rank %d in loader: ds=%s pm=%s; debug server ranks answered per rep %s" % (
            culprit, "fake_loader" in out, "fake_loader" in text_of(res), ds_ok)
        # Background threads the agent started (not the main thread, whose
        # stack shows the agent's all_reduce wrapper frame).
        agent_b = sum(len(blk.encode()) + 2 for blk in out.split("\n\n")
                      if "probing_mcp_agent/" in blk and "in _bootstrap\n" in blk + "\n")
        print("N=%d: %d of the debug server's %d bytes are the probing-mcp agent's own threads" % (
            world, agent_b, len(out.encode())), flush=True)
        rows.append((world, nodes, "torch debug server (frontend /stacks fetch)", ds_t, ds_b, len(out.encode()) - agent_b))
        rows.append((world, nodes, "probing-mcp get_stacks (%d node daemons + coordinator)" % nodes, pm_t, pm_b, pm_sb))
        print("N=%d done; %s" % (world, ok), flush=True)
    finally:
        procs.kill_all()
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)


def _all_ranks(sc, world):
    # Sources map source -> "ranks 0-1,3"; accept any exact cover of 0..world-1.
    seen = set()
    for v in (sc.get("sources") or {}).values():
        for part in v.replace("ranks", "").split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                a, b = part.split("-")
                seen.update(range(int(a), int(b) + 1))
            elif part.isdigit():
                seen.add(int(part))
    return seen == set(range(world))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pm", default="/tmp/pm", help="the probing-mcp binary")
    ap.add_argument("--sizes", default="4,8")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--hang-step", type=int, default=3)
    ap.add_argument("--show", action="store_true", help="print one output of each tool")
    ap.add_argument("--wedge", action="store_true",
                    help="the culprit holds the GIL (a backtracking regex) instead of sleeping")
    ap.add_argument("--fetch-timeout", type=float, default=60.0,
                    help="the debug server's per-rank fetch timeout (its frontend's default: 60)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs")
    args = ap.parse_args()
    procs, rows = Procs(), []
    try:
        for n in [int(s) for s in args.sizes.split(",")]:
            run_size(args, n, procs, rows)
    finally:
        procs.kill_all()
    ms = lambda xs: "%.1f" % (1000 * xs)
    print()
    print("| ranks | nodes | tool | median ms | max ms | output bytes (median) | naive: all tracebacks concatenated, bytes (without the agent's own threads) |")
    print("|---|---|---|---|---|---|---|")
    naive = {}
    for w, n, tool, ts, bs, extra in rows:
        if tool.startswith("torch"):
            naive[w] = "%d (%d)" % (statistics.median(bs), extra)
    for w, n, tool, ts, bs, extra in rows:
        b = "%d" % statistics.median(bs)
        if not tool.startswith("torch"):
            b += " text (+%d structuredContent JSON)" % statistics.median(extra)
        print("| %d | %d | %s | %s | %s | %s | %s |" % (w, n, tool, ms(statistics.median(ts)), ms(max(ts)), b, naive[w]))
    print()
    print("raw seconds:", json.dumps([(w, tool, [round(t, 4) for t in ts]) for w, n, tool, ts, bs, _ in rows]))


if __name__ == "__main__":
    main()
