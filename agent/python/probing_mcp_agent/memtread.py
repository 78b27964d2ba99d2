"""A MEMT v5 table reader (copy and validate, §4.8; no lease), for tests and
tooling (stdlib only): the agent never reads its own rings. The Go reader
(storage/memt) is the one the server uses.
"""

import mmap
import struct

from .memtfmt import (_DESC_TAIL, _FMT, _HDR, _I32, _SIZE, _U16, _U32, CHUNK_HEADER, DESC_SIZE, EMPTY,
                      FLAG_DEDUP, HEADER_SIZE, I64, LEASE_SLOTS, MAGIC, MAX_NAME, STR, VERSION, FormatError,
                      geometry, process_alive)


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
