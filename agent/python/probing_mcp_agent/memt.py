"""MEMT v5 ring tables, written from Python (stdlib only): memt.Writer.

The byte layout is Probing's (shared/reference/probing-contract.md §4),
set out in memtfmt.py, whose names (dtype codes, OK / READERS_PINNED /
ROW_TOO_LARGE, geometry, size_for, capacity_for, infer_dtype, ...) are
importable from here too; the rows' bytes come from memtenc.py; memtread.py
reads a table back (tests and tooling). The Go package storage/memt reads
what this writes (see storage/memt/python_writer_test.go).

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
import threading

from .memtenc import _compile_encoder, coerce
from .memtfmt import (  # noqa: F401  (the format's names, re-exported: memt.OK, memt.I64, memt.geometry, ...)
    _DESC_TAIL, _F64, _FMT, _HDR, _I32, _SIZE, _U16, _U32, BYTES, CHUNK_HEADER, DEFAULT_TABLE_MB, DESC_SIZE,
    DTYPE_NAMES, EMPTY, EXPLICIT_CAPACITY, F32, F64, FLAG_DEDUP, HEADER_SIZE, I32, I64, I64_MAX, I64_MIN,
    LEASE_SLOT_SIZE, LEASE_SLOTS, MAGIC, MAX_CAPACITY, MAX_CHUNK, MAX_NAME, MIN_CAPACITY, MIN_CHUNK,
    OFF_CHUNKS_RECYCLED, OFF_INSTANCE_ID, OFF_LEASE_FAILURES, OFF_ROWS_OVERWRITTEN, OFF_TS_COL, OFF_WRITE_CHUNK,
    OFF_WRITES_BLOCKED, OK, PYTHON_CHUNKS, READERS_PINNED, ROW_TOO_LARGE, SEALED, STR, U8, U32, U64, VERSION,
    WRITING, FormatError, capacity_for, dtype_of, geometry, infer_dtype, process_alive, process_start_time,
    size_for)

__all__ = [
    "U8", "I32", "I64", "F32", "F64", "U64", "U32", "STR", "BYTES",
    "DTYPE_NAMES", "Writer", "OK", "READERS_PINNED", "ROW_TOO_LARGE",
    "size_for", "capacity_for", "infer_dtype", "process_start_time", "process_alive",
    "FormatError", "coerce", "replace_stale",
]


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
