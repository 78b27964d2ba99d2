#!/usr/bin/env python3
"""Record what the ORIGINAL Probing agent writes, for storage/memt's interop tests.

Run it with the interpreter that has the original agent (`pip install probing`):

    /root/devenv/bin/python testdata/memt/gen_probing_rings.py [--rows N] [--out DIR] [--force]

It starts a real Python process with the agent active (`PROBING=1`, the site hook of
the `probing` wheel), writing into a fresh `PROBING_DATA_DIR`. That process defines two
`@table` dataclass tables, appends rows to them and waits. Meanwhile this script asks
the agent's own SQL endpoint (HTTP `POST /query` on its Unix socket `@probing-<pid>`,
contract §2.1/§2.4) for every table, looks for MEMT files under `<data_dir>/<pid>/`
(and the agent's fallback directories), stops the process, copies the MEMT files it
found (after the writer stopped) and writes `expected.json` next to them:

    DIR/expected.json
    DIR/<pid>/python.interop_mixed     (only if the agent wrote MEMT files)

DIR defaults to testdata/memt/probing-<version>/. See testdata/memt/README.md.

`--child` is the agent-side half (the Go live test runs it directly): it prints one JSON
line (pid, versions, tables and row counts) once its rows are appended, then blocks until
its stdin is closed.

Standard library only (plus the `probing` package in the child).
"""

import argparse
import dataclasses
import datetime
import http.client
import inspect
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time

MEMT_MAGIC = b"TMEM"  # u32 0x4D454D54, little-endian on disk
MIXED = "interop_mixed"
SMALL = "interop_small"  # derived by the agent from the class name InteropSmall

# Strings repeat (a deduplicating writer would emit back-references), and
# cover the empty string, non-ASCII UTF-8, control characters, a NUL byte,
# JSON escapes and a long value.
NAMES = [
    "forward",
    "",
    "backward",
    "ñandú-Straße",
    "日本語テキスト",
    "emoji 🚀✓",
    "tab\tnew\nline",
    'quote"back\\slash',
    "nul\x00byte",
    "x" * 300,
]


def mixed_row(k):
    """Row k of python.interop_mixed: (seq, step, rank, loss, name, note).

    Ints stay inside int32: probing 0.2.4 types a Python int column as Int32
    and rejects later values that do not fit ("column type mismatch").
    NaN and infinities are left out: the agent's JSON turns them into null.
    """
    special = {5: -0.0, 6: 1e300, 7: 5e-324, 8: -1.2345e-10, 9: 2.0**53 + 1.0}
    loss = special.get(k % 101, k * 0.37 - 100.0 + k / 7.0)
    return (k, k // 7, (k % 4) - 1, loss, NAMES[k % len(NAMES)], "row-%d" % k)


def small_row(k):
    """Row k of python.interop_small: (rank, msg, value)."""
    return (k % 8, ["ok", "warn", "", "ошибка"][k % 4], -k / 3.0)


# --------------------------------------------------------------------------
# Agent side
# --------------------------------------------------------------------------


def child(rows, small_rows):
    import importlib.metadata

    import probing
    from probing.core.table import table

    if not probing.is_enabled():
        print(json.dumps({"error": "probing is imported but not enabled"}), flush=True)
        sys.exit(3)

    # Newer agents size each ring with capacity_bytes (contract §4.9); a tiny
    # ring makes python.interop_mixed wrap. probing 0.2.4 has no such option.
    has_capacity = "capacity_bytes" in inspect.signature(table).parameters
    kw_mixed = {"capacity_bytes": 32 << 10} if has_capacity else {}
    kw_small = {"capacity_bytes": 64 << 10} if has_capacity else {}

    @table(MIXED, **kw_mixed)
    @dataclasses.dataclass
    class Mixed:
        seq: int
        step: int
        rank: int
        loss: float
        name: str
        note: str

    @table(**kw_small)
    @dataclasses.dataclass
    class InteropSmall:
        rank: int
        msg: str
        value: float

    for k in range(rows):
        Mixed(*mixed_row(k)).save()
    # append_many in batches of 50. probing 0.2.4's @table.append_many calls
    # ExternalTable.append_many, which that version lacks (AttributeError
    # before anything is written): fall back to one append per row there.
    quirks = []
    batches = [[InteropSmall(*small_row(k)) for k in range(i, min(i + 50, small_rows))]
               for i in range(0, small_rows, 50)]
    for batch in batches:
        try:
            InteropSmall.append_many(batch)
        except AttributeError as e:
            if "append_many" not in quirks:
                quirks.append("append_many")
                print("append_many unavailable (%s); appending one row at a time" % e, file=sys.stderr)
            for r in batch:
                InteropSmall.append(r)

    try:
        import torch  # noqa: F401  (only to report its version)

        torch_version = torch.__version__
    except Exception:
        torch_version = None
    ready = {
        "pid": os.getpid(),
        "probing_version": importlib.metadata.version("probing"),
        "probing_module_version": getattr(probing, "VERSION", None),
        "python": sys.version.split()[0],
        "torch": torch_version,
        "capacity_bytes_supported": has_capacity,
        "append_many_broken": bool(quirks),
        "tables": [
            {"schema": "python", "table": MIXED, "rows_appended": rows, "order_column": "seq"},
            {"schema": "python", "table": SMALL, "rows_appended": small_rows, "order_column": None},
        ],
    }
    print(json.dumps(ready), flush=True)
    sys.stdin.read()  # hold the process (and the writer) until the parent lets go


# --------------------------------------------------------------------------
# Client side
# --------------------------------------------------------------------------


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, pid, timeout=30):
        super().__init__("localhost", timeout=timeout)
        self.pid = pid

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect("\0probing-%d" % self.pid)  # Linux abstract socket (contract §2.1)
        self.sock = s


def query(pid, sql):
    """POST /query with the Message<Query> envelope; return the DataFrame payload."""
    body = {
        "version": {"major": 0, "minor": 1, "patch": 0},
        "message_id": None,
        "timestamp": int(time.time() * 1e6),
        "payload": {"expr": sql, "opts": None},
    }
    c = UnixHTTP(pid)
    try:
        c.request("POST", "/query", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read().decode("utf-8")
    finally:
        c.close()
    try:
        msg = json.loads(text)
    except ValueError:
        raise RuntimeError("%s: HTTP %d, not JSON: %r" % (sql, r.status, text[:300]))
    payload = msg.get("payload")
    if isinstance(payload, dict) and "DataFrame" in payload:
        return payload["DataFrame"]
    raise RuntimeError("%s: HTTP %d, payload %r" % (sql, r.status, payload))


def column(df, i):
    c = df["cols"][i]
    return [] if c == "Nil" else next(iter(c.values()))


def qident(name):
    return '"' + name.replace('"', '""') + '"'


# Columns the DataFrame encoding cannot carry (they come back as "Nil",
# contract §2.4) are cast to a type that keeps every value exactly.
CASTS = {
    "UInt8": "BIGINT",
    "UInt16": "BIGINT",
    "UInt32": "BIGINT",
    "UInt64": "VARCHAR",
    "Binary": "HEX",
}


def describe(pid, schema, tbl):
    df = query(
        pid,
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = '%s' AND table_name = '%s' ORDER BY ordinal_position" % (schema, tbl),
    )
    return list(zip(column(df, 0), column(df, 1)))


def select_sql(schema, tbl, cols):
    parts, casts = [], {}
    for name, arrow in cols:
        cast = CASTS.get(arrow)
        if cast is None:
            parts.append(qident(name))
            continue
        casts[name] = cast
        if cast == "HEX":
            parts.append("encode(%s, 'hex') AS %s" % (qident(name), qident(name)))
        else:
            parts.append("CAST(%s AS %s) AS %s" % (qident(name), cast, qident(name)))
    return "SELECT %s FROM %s.%s" % (", ".join(parts), schema, qident(tbl)), casts


def memt_files(dirs):
    """MEMT files (by magic) in dirs, as {file name: path}; other files listed apart."""
    found, other = {}, []
    for d in dirs:
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            p = os.path.join(d, name)
            if name.startswith(".") or not os.path.isfile(p):
                other.append(p)
                continue
            with open(p, "rb") as f:
                head = f.read(4)
            if head == MEMT_MAGIC:
                found.setdefault(name, p)
            else:
                other.append(p)
    return found, other


def split_name(fname):
    """File name -> (schema, table), contract §4.1."""
    if "." in fname:
        s, t = fname.split(".", 1)
        return s, t
    return "memtable", fname


def read_ready(proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r, _, _ = select.select([proc.stdout], [], [], 0.5)
        if r:
            line = proc.stdout.readline()
            if not line:
                break
            line = line.strip()
            if line.startswith(b"{"):
                return json.loads(line)
        if proc.poll() is not None:
            break
    raise RuntimeError("agent process did not report ready (exit %s); its stderr is in %s"
                       % (proc.poll(), getattr(proc, "stderr_path", "?")))


def wait_agent(pid, timeout=30):
    deadline = time.time() + timeout
    while True:
        try:
            query(pid, "SELECT 1 AS one")
            return
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", action="store_true", help="agent side: append rows, print ready, wait for stdin EOF")
    ap.add_argument("--rows", type=int, default=3000, help="rows for python.%s" % MIXED)
    ap.add_argument("--small-rows", type=int, default=200, help="rows for python.%s" % SMALL)
    ap.add_argument("--out", help="fixture dir (default testdata/memt/probing-<version>)")
    ap.add_argument("--force", action="store_true", help="replace an existing fixture dir")
    ap.add_argument("--settle", type=float, default=1.5, help="seconds to let the agent's own samplers write")
    args = ap.parse_args()
    if args.child:
        child(args.rows, args.small_rows)
        return

    here = os.path.dirname(os.path.abspath(__file__))
    work = tempfile.mkdtemp(prefix="probing-interop-")
    data_dir = os.path.join(work, "data")
    tmp_dir = os.path.join(work, "tmp")
    os.makedirs(data_dir)
    os.makedirs(tmp_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROBING")}
    env.update(
        PROBING="1",
        PROBING_DATA_DIR=data_dir,
        PROBING_TABLE_DEFAULT_MB="1",
        TMPDIR=tmp_dir,  # the agent's fallback base is $TMPDIR/probing
        PYTHONUNBUFFERED="1",
    )
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--rows", str(args.rows),
           "--small-rows", str(args.small_rows)]
    errf = open(os.path.join(work, "agent.stderr"), "wb")
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errf)
    proc.stderr_path = errf.name
    try:
        ready = read_ready(proc, 120)
        if "error" in ready:
            raise RuntimeError(ready["error"])
        pid = ready["pid"]
        wait_agent(pid)
        time.sleep(args.settle)
        dirs = [
            os.path.join(data_dir, str(pid)),
            os.path.join(tmp_dir, "probing", str(pid)),
            os.path.join("/dev/shm/probing", str(pid)),
        ]
        live_files, _ = memt_files(dirs)
        show = query(pid, "SHOW TABLES")
        catalog = sorted(zip(column(show, 1), column(show, 2)))

        wanted = {(t["schema"], t["table"]): t for t in ready["tables"]}
        for fname in live_files:  # tables the agent itself keeps in MEMT files
            key = split_name(fname)
            wanted.setdefault(key, {"schema": key[0], "table": key[1], "rows_appended": None,
                                    "order_column": None, "builtin": True})
        tables = []
        for (schema, tbl), spec in sorted(wanted.items()):
            cols = describe(pid, schema, tbl)
            if not cols:
                raise RuntimeError("the agent's SQL layer has no table %s.%s" % (schema, tbl))
            sql, casts = select_sql(schema, tbl, cols)
            df = query(pid, sql)
            tables.append({
                "schema": schema,
                "table": tbl,
                "file": None,
                "sql": sql,
                "arrow_types": [a for _, a in cols],
                "casts": casts,
                # The agent's own samplers keep writing after the query.
                "compare": "contains" if spec.get("builtin") else "exact",
                "order_column": spec.get("order_column"),
                "rows_appended": spec.get("rows_appended"),
                "dataframe": df,
            })

        # Snapshot while the writer is alive, in case the agent removes its
        # files when it exits; the copy taken after exit is preferred.
        snap = os.path.join(work, "live-copy")
        os.makedirs(snap)
        for fname, p in live_files.items():
            shutil.copyfile(p, os.path.join(snap, fname))
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errf.close()

    after_files, other_files = memt_files(dirs)
    every_file = []
    for base in (data_dir, os.path.join(tmp_dir, "probing")):
        for root, _, names in os.walk(base):
            every_file += [os.path.relpath(os.path.join(root, n), work) for n in names]

    out = args.out or os.path.join(here, "probing-%s" % ready["probing_version"])
    if os.path.exists(out):
        if not args.force:
            sys.exit("%s exists; pass --force to replace it" % out)
        shutil.rmtree(out)
    os.makedirs(out)
    copied = []
    for fname in sorted(set(live_files) | set(after_files)):
        dst_dir = os.path.join(out, str(pid))
        os.makedirs(dst_dir, exist_ok=True)
        src = after_files.get(fname) or os.path.join(snap, fname)
        shutil.copyfile(src, os.path.join(dst_dir, fname))
        rel = "%d/%s" % (pid, fname)
        copied.append({"file": rel, "copied_after_exit": fname in after_files})
        key = split_name(fname)
        for t in tables:
            if (t["schema"], t["table"]) == key:
                t["file"] = rel

    with open(os.path.join(work, "agent.stderr"), "rb") as f:
        stderr_text = f.read().decode("utf-8", "replace")
    expected = {
        "format": 1,
        "generated_by": "testdata/memt/gen_probing_rings.py",
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "agent": {k: ready[k] for k in ("probing_version", "probing_module_version", "python", "torch",
                                        "capacity_bytes_supported", "append_many_broken")},
        "agent_env": {k: env[k] for k in sorted(env) if k.startswith("PROBING")},
        "pid": pid,
        "searched_dirs": [os.path.relpath(d, work) if d.startswith(work) else d for d in dirs],
        "files_in_data_dirs": sorted(every_file),
        "memt_files": copied,
        "non_memt_files": [os.path.relpath(p, work) for p in other_files if p.startswith(work)],
        "agent_catalog": [list(x) for x in catalog],
        "agent_stderr": stderr_text.splitlines(),
        "tables": tables,
    }
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")
    shutil.rmtree(work, ignore_errors=True)
    print("wrote %s: %d MEMT file(s), %d table(s)" % (out, len(copied), len(tables)))
    for t in tables:
        n = max((len(column(t["dataframe"], i)) for i in range(len(t["dataframe"]["cols"]))), default=0)
        print("  %s.%s: %d rows via SQL, file %s" % (t["schema"], t["table"], n, t["file"]))


if __name__ == "__main__":
    main()
