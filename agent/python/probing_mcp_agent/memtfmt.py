"""The MEMT v5 ring-table format: its layout, dtypes, and Probing's rules
for Python rings (stdlib only).

The byte layout is Probing's (shared/reference/probing-contract.md §4) and
the Go package storage/memt reads what memt.py writes (see
storage/memt/python_writer_test.go):

* a 128-byte header, 64-byte column descriptors, a reader-lease area
  (16 slots of 16 bytes per chunk), then ``num_chunks`` chunks;
* a chunk is a 40-byte header (generation u64, used u32, row_count u32,
  state u32, reserved u32, min_ts i64, max_ts i64) followed by rows
  ``[u32 row_len][col0][col1]...``; Str/Bytes values are ``[i32 len][bytes]``
  or, with FLAG_DEDUP, ``[i32 -offset]`` pointing back at an earlier copy of
  the same bytes in the same chunk and column.

Here: the constants of that layout (header offsets, chunk states, dtype
codes and sizes), geometry(), the sizes and first-row dtypes of Python
rings (§4.9: size_for, capacity_for, infer_dtype), and the liveness of the
processes a file names (its creator, the owners of reader leases).
memt.py writes the format (and re-exports these names), memtenc.py
encodes its rows, memtread.py reads it. Imports no module of the agent's.
"""

import os
import struct
import sys

MAGIC = 0x4D454D54
VERSION = 5
HEADER_SIZE = 128
DESC_SIZE = 64
LEASE_SLOTS = 16
LEASE_SLOT_SIZE = 16
CHUNK_HEADER = 40
FLAG_DEDUP = 1
MAX_NAME = 54

U8, I32, I64, F32, F64, U64, U32, STR, BYTES = 1, 2, 3, 4, 5, 6, 7, 8, 9
DTYPE_NAMES = {U8: "U8", I32: "I32", I64: "I64", F32: "F32", F64: "F64",
               U64: "U64", U32: "U32", STR: "Str", BYTES: "Bytes"}
_BY_NAME = {v.lower(): k for k, v in DTYPE_NAMES.items()}
_SIZE = {U8: 1, I32: 4, I64: 8, F32: 4, F64: 8, U64: 8, U32: 4, STR: 0, BYTES: 0}
_FMT = {U8: "B", I32: "i", I64: "q", F32: "f", F64: "d", U64: "Q", U32: "I"}

# Chunk states and append results.
EMPTY, WRITING, SEALED = 0, 1, 2
OK, READERS_PINNED, ROW_TOO_LARGE = 0, 1, 2

I64_MAX = (1 << 63) - 1
I64_MIN = -(1 << 63)

# Header offsets.
OFF_TS_COL = 10
OFF_WRITE_CHUNK = 32
OFF_CHUNKS_RECYCLED = 56
OFF_ROWS_OVERWRITTEN = 60
OFF_INSTANCE_ID = 72
OFF_WRITES_BLOCKED = 80
OFF_LEASE_FAILURES = 88

_HDR = struct.Struct("<IHHBBHIIIIIIIIIQIIIIQQQ")  # 0..96
_DESC_TAIL = struct.Struct("<II")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")
_F64 = struct.Struct("<d")

# Sizing of Python rings (§4.9).
DEFAULT_TABLE_MB = 20
PYTHON_CHUNKS = 8
MIN_CAPACITY = 32 << 10
MAX_CAPACITY = 1 << 30
MIN_CHUNK = 4 << 10
MAX_CHUNK = 8 << 20
EXPLICIT_CAPACITY = {"torch_trace": 8 << 20, "torch_step_timing": 2 << 20, "variables": 4 << 20}

if sys.byteorder != "little":  # pragma: no cover - MEMT is little-endian only
    raise ImportError("probing_mcp_agent.memt needs a little-endian CPU")


def _align64(n):
    return (n + 63) & ~63


def geometry(num_cols, num_chunks, chunk_size):
    """(lease_offset, data_offset, file_size) of a table."""
    lease = _align64(HEADER_SIZE + DESC_SIZE * num_cols)
    data = _align64(lease + LEASE_SLOTS * LEASE_SLOT_SIZE * num_chunks)
    return lease, data, data + chunk_size * num_chunks


def size_for(capacity):
    """(chunk_size, num_chunks) of an 8-chunk Python ring of ``capacity`` bytes,
    clamped as Probing does: capacity to [32 KiB, 1 GiB], chunk to
    [4 KiB, 8 MiB], rounded down to a multiple of 8."""
    capacity = min(max(int(capacity), MIN_CAPACITY), MAX_CAPACITY)
    chunk = min(max(capacity // PYTHON_CHUNKS, MIN_CHUNK), MAX_CHUNK)
    return chunk & ~7, PYTHON_CHUNKS


def capacity_for(table, environ=None, default=None):
    """Ring capacity in bytes of Python table ``table`` (without the
    ``python.`` prefix): its explicit size when Probing has one, else
    PROBING_TABLE_DEFAULT_MB MiB when that is set to a positive integer,
    else ``default`` bytes when given, else 20 MiB. A bad variable is
    ignored (with the default) rather than breaking the training process."""
    if table in EXPLICIT_CAPACITY:
        return EXPLICIT_CAPACITY[table]
    env = os.environ if environ is None else environ
    v = (env.get("PROBING_TABLE_DEFAULT_MB") or "").strip()
    if v.isdigit() and int(v) > 0:
        return int(v) << 20
    if default is not None:
        return int(default)
    return DEFAULT_TABLE_MB << 20


_I64_NAMES = ("rank", "seq", "lineno", "line", "step", "pid", "tid", "count", "size", "world_size")
_F64_NAMES = ("_ms", "_bytes", "_ratio", "_sec", "_rate", "duration", "allocated")


def infer_dtype(name, value):
    """MEMT dtype of a first value (§4.9): bool→U8, int→I64, float→F64,
    bytes→Bytes, str→Str; None uses the column-name heuristic."""
    if isinstance(value, bool):
        return U8
    if isinstance(value, int):
        return I64
    if isinstance(value, float):
        return F64
    if isinstance(value, (bytes, bytearray, memoryview)):
        return BYTES
    if value is None:
        n = name.lower()
        if n.endswith("_id") or "step" in n or n in _I64_NAMES or n.endswith("_ns") or n.endswith("_us"):
            return I64
        if any(n.endswith(s) or n.startswith(s.strip("_")) for s in _F64_NAMES):
            return F64
        return STR
    if hasattr(value, "__index__"):  # numpy / torch integer scalars
        return I64
    if hasattr(value, "__float__") and not isinstance(value, str):
        return F64
    return STR


def dtype_of(d):
    """A dtype code from a code or a name ('I64', 'str', ...)."""
    if isinstance(d, int):
        if d in _SIZE:
            return d
    elif isinstance(d, str) and d.lower() in _BY_NAME:
        return _BY_NAME[d.lower()]
    raise ValueError("unknown MEMT dtype %r" % (d,))


def process_start_time(pid="self"):
    """Field 22 of /proc/<pid>/stat (clock ticks since boot); 0 if unknown."""
    try:
        with open("/proc/%s/stat" % pid, "rb") as f:
            s = f.read()
        i = s.rindex(b")")
        return int(s[i + 2:].split()[19])
    except Exception:
        return 0


def process_alive(pid, start_time=0):
    """kill(pid, 0) succeeds (or EPERM) and, when start_time != 0, the
    process still has that start time."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        pass
    except OSError:
        return False
    if not start_time:
        return True
    st = process_start_time(pid)
    return st == 0 or st == start_time  # unreadable /proc: trust kill


class FormatError(ValueError):
    """A file that is not a valid MEMT v5 table."""
