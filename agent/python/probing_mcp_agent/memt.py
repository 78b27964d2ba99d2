"""MEMT v5 ring tables, written from Python (stdlib only).

The byte layout is Probing's (shared/reference/probing-contract.md §4) and
the Go package storage/memt reads what this writes (see
storage/memt/python_writer_test.go):

* a 128-byte header, 64-byte column descriptors, a reader-lease area
  (16 slots of 16 bytes per chunk), then ``num_chunks`` chunks;
* a chunk is a 40-byte header (generation u64, used u32, row_count u32,
  state u32, reserved u32, min_ts i64, max_ts i64) followed by rows
  ``[u32 row_len][col0][col1]...``; Str/Bytes values are ``[i32 len][bytes]``
  or, with FLAG_DEDUP, ``[i32 -offset]`` pointing back at an earlier copy of
  the same bytes in the same chunk and column.

Writer protocol (§4.7). One writer per file. The file is built under a
hidden temporary name in the same directory (readers skip dot files:
O_CREAT|O_EXCL, flock(LOCK_EX|LOCK_NB), ftruncate, mmap, header init) and
then link()ed to its name, which fails if the name exists -- O_EXCL's
guarantee, without readers ever seeing a half-initialised table; the flock
is held while the Writer lives. Within the process a ``threading.Lock``
serialises appends. The writer keeps Python-side copies of the current
chunk's used/row_count/min/max (nobody else writes them) and publishes in
this order: (1) the row bytes (one mmap slice assignment; append_batch
writes every row that fits in the chunk with one assignment), (2) the
chunk's min/max timestamp when they change, (3) ``used``, (4)
``row_count``. Advancing to the next chunk stores state=Empty, checks the
reader leases (live pins: the row is dropped and writes_blocked counted),
seals the old chunk, updates chunks_recycled/rows_overwritten, bumps the
generation, zeroes used/row_count, resets min/max, stores state=Writing and
finally ``write_chunk``.

Memory ordering. Python cannot emit fences. Every header field a reader
relies on (generation, used, row_count, state, write_chunk, the counters,
lease slots) is written with ONE aligned store: an element assignment on a
``memoryview.cast('I'|'Q'|'q')`` of the mapping, which CPython implements
as a fixed-size memcpy of 4 or 8 bytes that GCC and Clang compile to one
``mov``/``str`` (x86-64 and arm64 make aligned 4/8-byte stores single-copy
atomic). Row bytes go in with one slice assignment (memcpy) *before*
``used`` is stored. Each of these is a separate C call made in program
order, so the compiler cannot reorder them.

* x86-64 (TSO): stores become visible in program order, so a reader that
  sees the new ``used`` also sees the row bytes, and a reader that copies a
  chunk and then finds the same generation and a non-Empty state knows the
  chunk was not recycled under it. Torn reads are always detected.
* arm64 and other weakly ordered CPUs: the hardware may make the ``used``
  store visible before the row bytes (there is no release barrier between
  them). A concurrent reader can then see the newest row with stale bytes;
  its row walk usually fails (bad length / out of range) and it drops that
  row and the ones after it in that chunk for this scan (Go: chunks_invalid),
  or, rarely, returns a row with stale column values. The generation
  re-check still detects recycling (it is a different cache line written
  much later), but it, too, has no barrier. Rows are never lost from the
  file: the next scan reads them correctly. The reader-lease check of an
  advance has the same weakness (no StoreLoad fence between state=Empty and
  reading the lease slots), so on arm64 a reader that pins a chunk at that
  very instant may still see it recycled; its own generation re-check
  catches that. A small native helper would close these gaps; the agent
  stays pure Python on purpose.

CPython's GIL does not make a multi-statement append atomic with respect
to other Python threads, which is why appends take the per-table lock.
"""

import errno
import fcntl
import mmap
import os
import struct
import sys
import threading

__all__ = [
    "U8", "I32", "I64", "F32", "F64", "U64", "U32", "STR", "BYTES",
    "DTYPE_NAMES", "Writer", "Table", "OK", "READERS_PINNED", "ROW_TOO_LARGE",
    "size_for", "capacity_for", "infer_dtype", "process_start_time", "process_alive",
    "FormatError",
]

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


# ---------------------------------------------------------------------------
# Row encoders


def _to_int(v):
    if v is None:
        return 0
    try:
        return int(v)
    except Exception:
        try:
            return int(float(v))
        except Exception:
            return 0


def _to_float(v):
    if v is None:
        return 0.0
    try:
        return float(v)
    except Exception:
        return 0.0


def _to_bytes_str(v):
    if v is None:
        return b""
    if v.__class__ is str:
        return v.encode("utf-8", "surrogatepass")
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    return str(v).encode("utf-8", "surrogatepass")


def _to_bytes_bin(v):
    if v is None:
        return b""
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8", "surrogatepass")
    return str(v).encode("utf-8")


_RANGES = {U8: (0, 0xFF), I32: (-(1 << 31), (1 << 31) - 1), I64: (I64_MIN, I64_MAX),
           U64: (0, (1 << 64) - 1), U32: (0, 0xFFFFFFFF)}


def coerce(dtype, v):
    """Coerce one value to what its column stores (None → 0 / ''; out of
    range integers are clamped)."""
    if dtype in (STR,):
        return _to_bytes_str(v)
    if dtype == BYTES:
        return _to_bytes_bin(v)
    if dtype in (F32, F64):
        f = _to_float(v)
        if dtype == F32:
            try:
                struct.pack("<f", f)
            except OverflowError:
                f = float("inf") if f > 0 else float("-inf")
        return f
    i = _to_int(v)
    lo, hi = _RANGES[dtype]
    return lo if i < lo else hi if i > hi else i


_PREFIX_CACHE_MAX = 4096


def _prefixer():
    """A cache of str/bytes values -> their stored form [i32 len][bytes].
    Rows repeat the same short strings (op names, shapes, roles), so most
    Str columns cost one dict lookup."""
    cache = {}
    pack = _I32.pack

    def prefixed(v):
        if v.__class__ is str:
            b = v.encode("utf-8", "surrogatepass")
        elif v.__class__ is bytes:
            b = v
        else:
            raise TypeError("not str/bytes")
        p = pack(len(b)) + b
        if len(cache) >= _PREFIX_CACHE_MAX:
            cache.clear()
        if len(p) <= 256:
            cache[v] = p
        return p

    return cache, prefixed


def _compile_encoder(dtypes):
    """A function values -> row bytes including the u32 row_len prefix, for
    a non-dedup table. Runs of fixed-width columns are packed with one
    precompiled Struct each; Str/Bytes values come from a small cache of
    their stored form. It raises (struct.error, TypeError, ...) on a value
    of the wrong type, and the caller then coerces and retries."""
    cache, prefixed = _prefixer()
    glb = {"_c": cache.get, "_pre": prefixed, "_len": len}
    lines, parts, fmt, exprs, var = [], [], "<", [], []
    fixed_total = 0
    first = True

    def flush():
        nonlocal fmt, exprs, first
        if first:
            fmt, exprs, first = "<I" + fmt[1:], ["n"] + exprs, False
        elif not exprs:
            return
        name = "_p%d" % len(glb)
        glb[name] = struct.Struct(fmt).pack
        parts.append("%s(%s)" % (name, ", ".join(exprs)))
        fmt, exprs = "<", []

    for i, d in enumerate(dtypes):
        if _SIZE[d]:
            fmt += _FMT[d]
            exprs.append("v[%d]" % i)
            fixed_total += _SIZE[d]
            continue
        lines.append("    b%d = _c(v[%d])" % (i, i))
        lines.append("    if b%d is None: b%d = _pre(v[%d])" % (i, i, i))
        var.append(i)
        flush()
        parts.append("b%d" % i)
    flush()
    if not parts[0].startswith("_p"):  # pragma: no cover - flush() always emits the first
        raise ValueError("encoder layout")
    nexpr = " + ".join(["%d" % fixed_total] + ["_len(b%d)" % i for i in var])
    body = ["def encode(v):"] + lines + ["    n = %s" % nexpr]
    if len(parts) == 1:
        body.append("    return " + parts[0])
    else:
        body.append("    return b''.join((%s,))" % ", ".join(parts))
    exec(compile("\n".join(body) + "\n", "<memt-encoder>", "exec"), glb)
    return glb["encode"]


class Writer(object):
    """The single writer of one MEMT v5 table file.

    ``columns`` is a list of (name, dtype) pairs (dtype a code or a name).
    ``append(values)`` takes the values in column order (a tuple or list) and
    returns OK, READERS_PINNED (the next chunk is leased by a live reader:
    the row is dropped and writes_blocked counts it) or ROW_TOO_LARGE.
    Thread-safe (one lock per table). Not fork-safe: a forked child must
    not use its parent's writers (tables.py resets them after fork).
    """

    def __init__(self, path, columns, chunk_size, num_chunks=PYTHON_CHUNKS, dedup=False, mode=0o644):
        cols = []
        for name, d in columns:
            nb = name.encode("utf-8")
            if len(nb) > MAX_NAME:  # cut on a character boundary
                nb = nb[:MAX_NAME].decode("utf-8", "ignore").encode("utf-8")
            cols.append((nb, dtype_of(d)))
        if not cols:
            raise ValueError("memt: a table needs at least one column")
        chunk_size, num_chunks = int(chunk_size), int(num_chunks)
        if num_chunks < 1 or chunk_size < CHUNK_HEADER + 8 or chunk_size % 8:
            raise ValueError("memt: bad geometry: %d chunks of %d bytes" % (num_chunks, chunk_size))
        if dedup and len(cols) > 64:
            raise ValueError("memt: dedup supports at most 64 columns")
        self.path = path
        self.columns = [(n.decode("utf-8"), d) for n, d in cols]
        self.dtypes = [d for _, d in cols]
        self.dedup = bool(dedup)
        self.chunk_size, self.num_chunks = chunk_size, num_chunks
        self.lease_offset, self.data_offset, self.file_size = geometry(len(cols), num_chunks, chunk_size)
        if self.file_size >= 1 << 31:
            raise ValueError("memt: %d bytes is too large a table" % self.file_size)
        self.ts_col = 0
        for i, (n, d) in enumerate(cols):
            if d == I64 and n in (b"timestamp", b"ts"):
                self.ts_col = i + 1
                break
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.rows_dropped = 0  # rows not written (pinned, too large, or closed)
        self.closed = False
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, "memt: %s exists" % path, path)
        # Built under a hidden temporary name (readers skip dot files), then
        # linked into place, which fails if the name exists (O_EXCL's
        # guarantee): a reader never sees a half-initialised table.
        tmp = os.path.join(d, ".%s.%d.%d.tmp" % (os.path.basename(path), os.getpid(), threading.get_ident()))
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                raise OSError(e.errno, "memt: %s is locked by another writer" % path)
            os.ftruncate(fd, self.file_size)
            mm = mmap.mmap(fd, self.file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        self._fd, self._mm = fd, mm
        self._views()
        self._chunk = [self.data_offset + i * chunk_size for i in range(num_chunks)]
        self._encode = _compile_encoder(self.dtypes) if not self.dedup else None
        self._ncols = len(self.dtypes)
        self._tsi = self.ts_col - 1
        self._seen = None
        try:
            self._init()
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise
            except OSError:
                # no hard links here: fall back to creating the name itself
                # (readers may then briefly see a file that is not yet a table)
                nfd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
                try:
                    fcntl.flock(nfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    os.ftruncate(nfd, self.file_size)
                    mm2 = mmap.mmap(nfd, self.file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                except BaseException:
                    os.close(nfd)
                    os.unlink(path)
                    raise
                self._release_views()
                mm.close()
                os.close(fd)
                self._fd, self._mm = nfd, mm2
                self._views()
                self._init()
        except BaseException:
            self._release_views()
            try:
                self._mm.close()
            except Exception:
                pass
            os.close(self._fd)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        try:
            os.unlink(tmp)
        except OSError:
            pass

    def _views(self):
        mv = memoryview(self._mm)
        self._mv = mv
        self._u32 = mv.cast("I")
        self._u64 = mv.cast("Q")
        self._i64 = mv.cast("q")

    def _release_views(self):
        for name in ("_u32", "_u64", "_i64", "_mv"):
            v = getattr(self, name, None)
            if v is not None:
                try:
                    v.release()
                except Exception:
                    pass

    # -- layout ------------------------------------------------------------

    def _init(self):
        mm, u32, u64, i64 = self._mm, self._u32, self._u64, self._i64
        inst = int.from_bytes(os.urandom(8), "little") or 1
        st = process_start_time()
        _HDR.pack_into(mm, 0, MAGIC, VERSION, HEADER_SIZE, 1, 2, self.ts_col,
                       FLAG_DEDUP if self.dedup else 0, len(self.columns), self.num_chunks,
                       self.chunk_size, self.data_offset, 0, 1, self.pid & 0xFFFFFFFF, 0, st,
                       0, 0, self.lease_offset, LEASE_SLOTS, inst, 0, 0)
        for i, (n, d) in enumerate(self.columns):
            nb = n.encode("utf-8")
            at = HEADER_SIZE + DESC_SIZE * i
            _U16.pack_into(mm, at, len(nb))
            mm[at + 2:at + 2 + len(nb)] = nb
            _DESC_TAIL.pack_into(mm, at + 56, d, _SIZE[d])
        # Lease slots and chunk headers: the file is fresh (ftruncate gives
        # zeros), but be explicit about every field the protocol names.
        n = LEASE_SLOTS * LEASE_SLOT_SIZE * self.num_chunks
        mm[self.lease_offset:self.lease_offset + n] = bytes(n)
        for c in self._chunk:
            u64[c >> 3] = 0
            u32[(c + 8) >> 2] = 0
            u32[(c + 12) >> 2] = 0
            u32[(c + 16) >> 2] = EMPTY
            i64[(c + 24) >> 3] = I64_MAX
            i64[(c + 32) >> 3] = I64_MIN
        c0 = self._chunk[0]
        u64[c0 >> 3] = 1
        u32[(c0 + 16) >> 2] = WRITING
        self._select(0)
        self._reset_dedup()

    def _reset_dedup(self):
        if self.dedup:
            self._seen = [None] * len(self.columns)

    # -- append ------------------------------------------------------------

    def append(self, values):
        """Append one row (values in column order). Returns OK,
        READERS_PINNED or ROW_TOO_LARGE; raises only on a wrong column
        count."""
        if len(values) != self._ncols:
            raise ValueError("memt: row has %d values, the table has %d columns"
                             % (len(values), self._ncols))
        if self.dedup:
            vals = [coerce(d, v) for d, v in zip(self.dtypes, values)]
            with self.lock:
                return self._append_dedup(vals)
        try:
            row = self._encode(values)
            ts = values[self._tsi] if self._tsi >= 0 else 0
        except Exception:
            values = self._coerced(values)
            row = self._encode(values)
            ts = values[self._tsi] if self._tsi >= 0 else 0
        with self.lock:
            return self._append_row(row, ts)[0]

    def append_located(self, values):
        """Like append (non-dedup tables only), but also returns where the
        row went: (status, chunk, generation, row_end) where row_end is the
        absolute file offset just past the row's last column. ``update_f64``
        uses it to patch a fixed column of a published row in place."""
        try:
            row = self._encode(values)
            ts = values[self._tsi] if self._tsi >= 0 else 0
        except Exception:
            if len(values) != self._ncols:
                raise ValueError("memt: row has %d values, the table has %d columns"
                                 % (len(values), self._ncols))
            values = self._coerced(values)
            row = self._encode(values)
            ts = values[self._tsi] if self._tsi >= 0 else 0
        with self.lock:
            return self._append_row(row, ts)

    def append_batch(self, rows):
        """Append many rows (each a sequence of values in column order;
        non-dedup tables). Rows that fit in the current chunk are written
        with one slice assignment and published with one ``used`` /
        ``row_count`` store. Returns, per row, (status, chunk, generation,
        row_end) as append_located does."""
        enc = self._encode
        tsi = self._tsi
        out = []
        blobs = []
        for v in rows:
            try:
                b = enc(v)
            except Exception:
                try:
                    if len(v) != self._ncols:
                        raise ValueError("memt: row has %d values, the table has %d columns"
                                         % (len(v), self._ncols))
                    v = self._coerced(v)
                    b = enc(v)
                except ValueError:
                    b = None
            blobs.append((b, v[tsi] if (tsi >= 0 and b is not None) else 0))
        with self.lock:
            cs = self.chunk_size
            i, n = 0, len(blobs)
            while i < n:
                b, ts = blobs[i]
                if b is None:
                    out.append((ROW_TOO_LARGE, 0, 0, 0))
                    self.rows_dropped += 1
                    i += 1
                    continue
                if CHUNK_HEADER + self._used + len(b) > cs:
                    st = self._make_room(len(b))
                    if st != OK:
                        out.append((st, 0, 0, 0))
                        i += 1
                        continue
                # gather the run of rows that fit in this chunk
                used0 = used = self._used
                parts = []
                lo, hi = self._min, self._max
                room = cs - CHUNK_HEADER
                cur, gen, base = self._cur, self._gen, self._c + CHUNK_HEADER
                while i < n:
                    b, ts = blobs[i]
                    if b is None or used + len(b) > room:
                        break
                    parts.append(b)
                    used += len(b)
                    out.append((OK, cur, gen, base + used))
                    if ts > hi:
                        hi = ts
                    if ts < lo:
                        lo = ts
                    i += 1
                blob = b"".join(parts)
                self._mm[base + used0:base + used] = blob
                if tsi >= 0:
                    if hi != self._max:
                        self._max = hi
                        self._i64[self._maxi] = hi
                    if lo != self._min:
                        self._min = lo
                        self._i64[self._mini] = lo
                self._used = used
                self._u32[self._usedi] = used             # publish: used first ...
                self._rows += len(parts)
                self._u32[self._usedi + 1] = self._rows   # ... then row_count
        return out

    def _coerced(self, values):
        return [coerce(d, v) for d, v in zip(self.dtypes, values)]

    def _append_row(self, row, ts):
        need = len(row)
        used = self._used
        if CHUNK_HEADER + used + need > self.chunk_size:
            st = self._make_room(need)
            if st != OK:
                return (st, 0, 0, 0)
            used = self._used
        at = self._c + CHUNK_HEADER + used
        self._mm[at:at + need] = row
        if self._tsi >= 0:
            if ts > self._max:
                self._max = ts
                self._i64[self._maxi] = ts
            if ts < self._min:
                self._min = ts
                self._i64[self._mini] = ts
        used += need
        self._used = used
        u32 = self._u32
        u32[self._usedi] = used          # publish: used first ...
        self._rows += 1
        u32[self._usedi + 1] = self._rows  # ... then row_count
        return (OK, self._cur, self._gen, at + need)

    def _make_room(self, need):
        """The row does not fit in the current chunk: advance (or say why
        not). Called with the lock held."""
        if self.closed:
            self.rows_dropped += 1
            return ROW_TOO_LARGE
        if self._used == 0 or CHUNK_HEADER + need > self.chunk_size:
            self.rows_dropped += 1
            return ROW_TOO_LARGE
        if not self._advance():
            self.rows_dropped += 1
            return READERS_PINNED
        return OK

    def _select(self, n):
        """Point the Python-side state at chunk n (the write chunk)."""
        self._cur = n
        c = self._c = self._chunk[n]
        self._usedi = (c + 8) >> 2
        self._mini = (c + 24) >> 3
        self._maxi = (c + 32) >> 3
        self._used = self._u32[self._usedi]
        self._rows = self._u32[self._usedi + 1]
        self._gen = self._u64[c >> 3]
        self._min = self._i64[self._mini]
        self._max = self._i64[self._maxi]

    def update_f64(self, chunk, generation, offset, value):
        """Overwrite the F64 column at file offset ``offset`` (from
        append_located's row_end minus the column's distance to it) of a
        published row, if its chunk was not recycled since. One 8-byte
        memcpy: a reader copying the row at that instant sees the old or
        the new value (on a weakly ordered CPU, in theory, a mix)."""
        with self.lock:
            if self.closed or (chunk == self._cur and generation != self._gen) or \
                    self._u64[self._chunk[chunk] >> 3] != generation:
                return False
            self._mm[offset:offset + 8] = _F64.pack(value)
            return True

    def _append_dedup(self, vals):
        if self.closed:
            self.rows_dropped += 1
            return ROW_TOO_LARGE
        cs = self.chunk_size
        for attempt in (0, 1):
            c = self._c
            used = self._used
            seen = self._seen
            parts = []
            fresh = []  # (col, offset in row body, bytes) of literal values
            pos = 0
            for i, (d, v) in enumerate(zip(self.dtypes, vals)):
                if _SIZE[d]:
                    b = struct.pack("<" + _FMT[d], v)
                    parts.append(b)
                    pos += len(b)
                    continue
                m = seen[i]
                ref = m.get(v) if m is not None else None
                if ref is not None:
                    parts.append(_I32.pack(-ref))
                    pos += 4
                else:
                    parts.append(_I32.pack(len(v)))
                    parts.append(v)
                    fresh.append((i, pos, v))
                    pos += 4 + len(v)
            body = b"".join(parts)
            need = 4 + len(body)
            if CHUNK_HEADER + used + need > cs:
                if attempt:
                    self.rows_dropped += 1
                    return ROW_TOO_LARGE
                st = self._make_room(need)
                if st != OK:
                    return st
                continue
            at = c + CHUNK_HEADER + used
            self._mm[at:at + need] = _U32.pack(len(body)) + body
            if self._tsi >= 0:
                ts = vals[self._tsi]
                if ts > self._max:
                    self._max = ts
                    self._i64[self._maxi] = ts
                if ts < self._min:
                    self._min = ts
                    self._i64[self._mini] = ts
            for i, p, v in fresh:
                # offset from the chunk start (header included) of [len][bytes]
                off = CHUNK_HEADER + used + 4 + p
                if seen[i] is None:
                    seen[i] = {}
                seen[i].setdefault(v, off)
            self._used = used + need
            self._u32[self._usedi] = self._used
            self._rows += 1
            self._u32[self._usedi + 1] = self._rows
            return OK
        return ROW_TOO_LARGE  # pragma: no cover

    # -- ring advance --------------------------------------------------------

    def _advance(self):
        u32, u64 = self._u32, self._u64
        cur = self._cur
        n = (cur + 1) % self.num_chunks
        nc = self._chunk[n]
        si = (nc + 16) >> 2
        old = u32[si]
        u32[si] = EMPTY  # no new pins from here on
        if self._leased(n):
            u32[si] = old
            u64[OFF_WRITES_BLOCKED >> 3] = (u64[OFF_WRITES_BLOCKED >> 3] + 1) & 0xFFFFFFFFFFFFFFFF
            return False
        if n != cur:
            u32[(self._chunk[cur] + 16) >> 2] = SEALED
        rows = u32[(nc + 12) >> 2]
        if rows:
            u32[OFF_CHUNKS_RECYCLED >> 2] = (u32[OFF_CHUNKS_RECYCLED >> 2] + 1) & 0xFFFFFFFF
            u32[OFF_ROWS_OVERWRITTEN >> 2] = (u32[OFF_ROWS_OVERWRITTEN >> 2] + rows) & 0xFFFFFFFF
        u64[nc >> 3] = (u64[nc >> 3] + 1) & 0xFFFFFFFFFFFFFFFF
        u32[(nc + 8) >> 2] = 0
        u32[(nc + 12) >> 2] = 0
        self._i64[(nc + 24) >> 3] = I64_MAX
        self._i64[(nc + 32) >> 3] = I64_MIN
        u32[si] = WRITING
        u32[OFF_WRITE_CHUNK >> 2] = n
        self._select(n)
        self._reset_dedup()
        return True

    def _leased(self, n):
        """A live reader lease on chunk n? Dead owners' slots are freed.
        Spins (up to 1024 rounds) while a live lease is held."""
        u64 = self._u64
        base = (self.lease_offset + n * LEASE_SLOTS * LEASE_SLOT_SIZE) >> 3
        alive = {}
        for _ in range(1024):
            live = False
            for s in range(LEASE_SLOTS):
                i = base + 2 * s
                st = u64[i]
                if not st:
                    continue
                key = (st >> 32, u64[i + 1])
                ok = alive.get(key)
                if ok is None:
                    ok = alive[key] = process_alive(key[0], key[1])
                if ok:
                    live = True
                elif u64[i] == st:
                    # Not a CAS: a reader that claims this freed slot between
                    # our load and store loses its claim and retries.
                    u64[i] = 0
            if not live:
                return False
            if _ and _ % 64 == 0 and hasattr(os, "sched_yield"):
                os.sched_yield()
        return True

    # -- misc ----------------------------------------------------------------

    def counters(self):
        u32, u64 = self._u32, self._u64
        return {"chunks_recycled": u32[OFF_CHUNKS_RECYCLED >> 2],
                "rows_overwritten": u32[OFF_ROWS_OVERWRITTEN >> 2],
                "writes_blocked": u64[OFF_WRITES_BLOCKED >> 3],
                "reader_lease_failures": u64[OFF_LEASE_FAILURES >> 3],
                "rows_dropped": self.rows_dropped}

    def close(self):
        """Unmap and release the writer lock; the file stays."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self._used = 1 << 40  # every append now takes the slow path, which sees closed
            self._release_views()
            try:
                self._mm.close()
            except Exception:
                pass
            try:
                os.close(self._fd)
            except OSError:
                pass

    def abandon(self):
        """Forget the mapping without touching it (a forked child's copy of
        its parent's writer): no more appends, the file is left alone."""
        self.closed = True
        self._used = 1 << 40

    def drop(self):
        """Close, unlink the file and try to remove its (then empty) dir."""
        self.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
        try:
            os.rmdir(os.path.dirname(self.path))
        except OSError:
            pass


def replace_stale(path):
    """Remove ``path`` if it is a table nobody holds the writer lock on (a
    dead process with a reused pid, or an earlier incarnation). Returns
    True if the path is now free."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        return e.errno == errno.ENOENT
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a live writer holds it
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------
# Reader (copy and validate, §4.8; no lease). For tests and tooling.


class Table(object):
    """A table file opened for reading. ``rows()`` returns the committed rows,
    oldest chunk first, as tuples (Str → str, Bytes → bytes)."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, mmap.MAP_SHARED, mmap.PROT_READ)
        try:
            self._validate()
        except Exception:
            self._mm.close()
            raise

    def _validate(self):
        mm = self._mm
        if len(mm) < HEADER_SIZE:
            raise FormatError("%s: shorter than the header" % self.path)
        h = _HDR.unpack_from(mm, 0)
        (magic, version, hsize, b0, b1, ts_col, flags, ncols, nchunks, csize, doff,
         _wc, _rc, cpid, _pad, cstart, _cr, _ro, loff, lslots, inst, _wb, _lf) = h
        if magic != MAGIC or version != VERSION or hsize != HEADER_SIZE or (b0, b1) != (1, 2):
            raise FormatError("%s: not a MEMT v5 table" % self.path)
        if flags & ~FLAG_DEDUP or not nchunks or csize < CHUNK_HEADER + 8 or csize % 8 or not ncols:
            raise FormatError("%s: bad flags or geometry" % self.path)
        lo, do, size = geometry(ncols, nchunks, csize)
        if loff != lo or doff != do or lslots != LEASE_SLOTS or len(mm) < size:
            raise FormatError("%s: offsets do not match the layout" % self.path)
        cols = []
        for i in range(ncols):
            at = HEADER_SIZE + DESC_SIZE * i
            n = _U16.unpack_from(mm, at)[0]
            if n > MAX_NAME:
                raise FormatError("%s: column %d name too long" % (self.path, i))
            d, _sz = _DESC_TAIL.unpack_from(mm, at + 56)
            if d not in _SIZE:
                raise FormatError("%s: column %d: unknown dtype %d" % (self.path, i, d))
            cols.append((bytes(mm[at + 2:at + 2 + n]).decode("utf-8", "replace"), d))
        if ts_col > ncols or (ts_col and cols[ts_col - 1][1] != I64):
            raise FormatError("%s: bad timestamp column" % self.path)
        self.columns, self.ts_col, self.dedup = cols, ts_col, bool(flags & FLAG_DEDUP)
        self.num_chunks, self.chunk_size, self.data_offset = nchunks, csize, doff
        self.creator_pid, self.creator_start_time, self.instance_id = cpid, cstart, inst

    def counters(self):
        u = struct.unpack_from("<IIIIQQQ", self._mm, 56)
        return {"chunks_recycled": u[0], "rows_overwritten": u[1],
                "writes_blocked": u[5], "reader_lease_failures": u[6]}

    def writer_alive(self):
        return process_alive(self.creator_pid, self.creator_start_time)

    def rows(self, stats=None):
        mm = self._mm
        order = []
        for i in range(self.num_chunks):
            c = self.data_offset + i * self.chunk_size
            gen, _used, rc = struct.unpack_from("<QII", mm, c)
            if gen and rc:
                order.append((gen, i))
        order.sort()
        out = []
        st = stats if stats is not None else {}
        for k in ("chunks", "torn", "invalid"):
            st.setdefault(k, 0)
        for g, i in order:
            c = self.data_offset + i * self.chunk_size
            if struct.unpack_from("<I", mm, c + 16)[0] == EMPTY:
                continue
            g1 = struct.unpack_from("<Q", mm, c)[0]
            used = struct.unpack_from("<I", mm, c + 8)[0]
            if g1 != g or used > self.chunk_size - CHUNK_HEADER:
                st["torn"] += 1
                continue
            buf = bytes(mm[c + CHUNK_HEADER:c + CHUNK_HEADER + used])
            if struct.unpack_from("<I", mm, c + 16)[0] == EMPTY or struct.unpack_from("<Q", mm, c)[0] != g1:
                st["torn"] += 1
                continue
            st["chunks"] += 1
            if not self._walk(buf, out):
                st["invalid"] += 1
        return out

    def _walk(self, buf, out):
        p, end = 0, len(buf)
        cols = self.columns
        while p < end:
            if end - p < 4:
                return False
            n = _U32.unpack_from(buf, p)[0]
            if n > end - p - 4:
                return False
            q, rend = p + 4, p + 4 + n
            row = []
            for _name, d in cols:
                sz = _SIZE[d]
                if sz:
                    if q + sz > rend:
                        return False
                    row.append(struct.unpack_from("<" + _FMT[d], buf, q)[0])
                    q += sz
                    continue
                if q + 4 > rend:
                    return False
                ln = _I32.unpack_from(buf, q)[0]
                if ln >= 0:
                    if q + 4 + ln > rend:
                        return False
                    v = bytes(buf[q + 4:q + 4 + ln])
                    q += 4 + ln
                else:
                    if not self.dedup:
                        return False
                    ref = -ln - CHUNK_HEADER
                    if ref < 0 or ref + 4 > p:
                        return False
                    tl = _I32.unpack_from(buf, ref)[0]
                    if tl < 0 or ref + 4 + tl > p:
                        return False
                    v = bytes(buf[ref + 4:ref + 4 + tl])
                    q += 4
                row.append(v.decode("utf-8", "replace") if d == STR else v)
            if q != rend:
                return False
            out.append(tuple(row))
            p = rend
        return True

    def close(self):
        try:
            self._mm.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def read_rows(path):
    """(column names, rows) of a table file, read with the copy protocol."""
    with Table(path) as t:
        return [n for n, _ in t.columns], t.rows()
