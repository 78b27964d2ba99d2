"""MEMT v5 writer (probing_mcp_agent/memt.py, memtfmt.py, memtenc.py): layout, protocol, sizing.

The Go side's reader is exercised against this writer by
storage/memt/python_writer_test.go; here the byte layout is checked
against the contract (§4) directly and through the agent's own reader (memtread.py).
"""
import os
import struct
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from probing_mcp_agent import memt, memtread  # noqa: E402

ALL = [("timestamp", "I64"), ("u8", "U8"), ("i32", "I32"), ("i64", "I64"), ("f32", "F32"),
       ("f64", "F64"), ("u64", "U64"), ("u32", "U32"), ("s", "Str"), ("b", "Bytes")]


def header(path):
    with open(path, "rb") as f:
        return f.read(128)


def test_header_and_descriptors(tmp_path):
    p = str(tmp_path / "python.t")
    w = memt.Writer(p, ALL, 4096, 4)
    h = header(p)
    assert h[0:4] == b"TMEM"
    assert struct.unpack_from("<HH", h, 4) == (5, 128)
    assert h[8:10] == b"\x01\x02"
    assert struct.unpack_from("<H", h, 10)[0] == 1  # ts_col: index+1 of timestamp
    flags, ncols, nchunks, csize, doff, wc, refc, pid, pad = struct.unpack_from("<IIIIIIIII", h, 12)
    assert (flags, ncols, nchunks, csize, wc, refc, pid, pad) == (0, 10, 4, 4096, 0, 1, os.getpid(), 0)
    start, = struct.unpack_from("<Q", h, 48)
    assert start == memt.process_start_time() and start > 0
    recycled, overwritten, loff, lslots, inst = struct.unpack_from("<IIIIQ", h, 56)
    assert (recycled, overwritten, lslots) == (0, 0, 16) and inst != 0
    assert loff == (128 + 64 * 10 + 63) // 64 * 64 == 768
    assert doff == (768 + 256 * 4 + 63) // 64 * 64
    assert h[96:128] == bytes(32)
    with open(p, "rb") as f:
        raw = f.read()
    assert len(raw) == doff + 4 * 4096
    d = raw[128 + 64 * 8:128 + 64 * 9]  # column "s"
    assert struct.unpack_from("<H", d, 0)[0] == 1 and d[2:3] == b"s" and d[3:56] == bytes(53)
    assert struct.unpack_from("<II", d, 56) == (memt.STR, 0)
    d = raw[128 + 64 * 4:128 + 64 * 5]  # f32
    assert struct.unpack_from("<II", d, 56) == (memt.F32, 4)
    # chunk 0: generation 1, Writing; others generation 0, Empty; min/max empty markers
    for i in range(4):
        c = doff + i * 4096
        gen, used, rc, st, res, lo, hi = struct.unpack_from("<QIIIIqq", raw, c)
        assert (used, rc, res) == (0, 0, 0)
        assert (gen, st) == ((1, 1) if i == 0 else (0, 0))
        assert (lo, hi) == (memt.I64_MAX, memt.I64_MIN)
    assert raw[loff:doff] == bytes(doff - loff)
    w.close()


def test_worked_geometry():
    # contract §4.4 worked sizes
    assert memt.geometry(11, 8, 2621440) == (832, 2880, 20974400)
    # (the contract prints 4 212 048 for this file; data_offset + 64 * 65536 is 4 211 968,
    # which is also what storage/memt computes)
    assert memt.geometry(18, 64, 65536) == (1280, 17664, 17664 + 64 * 65536)
    assert memt.geometry(20, 8, 4096) == (1408, 3456, 36224)


def test_row_encoding_example(tmp_path):
    # contract §4.6: columns timestamp I64, rank I64, name Str; row (1, 0, "ab")
    p = str(tmp_path / "python.ex")
    w = memt.Writer(p, [("timestamp", "I64"), ("rank", "I64"), ("name", "Str")], 1024, 2)
    assert w.append((1, 0, "ab")) == memt.OK
    w.close()
    with open(p, "rb") as f:
        raw = f.read()
    c = memt.geometry(3, 2, 1024)[1]
    row = b"\x16\x00\x00\x00" + b"\x01" + b"\x00" * 7 + b"\x00" * 8 + b"\x02\x00\x00\x00ab"
    assert raw[c + 40:c + 40 + 26] == row
    gen, used, rc, st, _res, lo, hi = struct.unpack_from("<QIIIIqq", raw, c)
    assert (gen, used, rc, st, lo, hi) == (1, 26, 1, 1, 1, 1)


def test_dedup_example(tmp_path):
    # the same row again with dedup stores name as C4 FF FF FF (-60)
    p = str(tmp_path / "python.dd")
    w = memt.Writer(p, [("timestamp", "I64"), ("rank", "I64"), ("name", "Str")], 1024, 2, dedup=True)
    assert w.append((1, 0, "ab")) == memt.OK
    assert w.append((1, 0, "ab")) == memt.OK
    w.close()
    with open(p, "rb") as f:
        raw = f.read()
    assert struct.unpack_from("<I", raw, 12)[0] == memt.FLAG_DEDUP
    c = memt.geometry(3, 2, 1024)[1]
    second = raw[c + 40 + 26:c + 40 + 26 + 24]
    assert second[:4] == b"\x14\x00\x00\x00" and second[-4:] == b"\xc4\xff\xff\xff"
    assert memtread.read_rows(p)[1] == [(1, 0, "ab"), (1, 0, "ab")]


def test_every_dtype_round_trip(tmp_path):
    p = str(tmp_path / "python.all")
    w = memt.Writer(p, ALL, 4096, 4)
    rows = [
        (1, 0, -2 ** 31, -2 ** 63, 1.5, -0.0, 2 ** 64 - 1, 2 ** 32 - 1, "h\u00e9llo \U0001F600", b"\x00\xff"),
        (2, True, 7, 2 ** 63 - 1, float("inf"), 1e-300, 0, 0, "", b""),
        (3, None, 3.9, None, 2, "2.5", -1, 2 ** 40, 42, "text"),  # coerced
    ]
    for r in rows:
        assert w.append(r) == memt.OK
    w.close()
    names, got = memtread.read_rows(p)
    assert names == [n for n, _ in ALL]
    assert got[0] == rows[0]
    assert got[1] == (2, 1, 7, 2 ** 63 - 1, float("inf"), 1e-300, 0, 0, "", b"")
    assert got[2] == (3, 0, 3, 0, 2.0, 2.5, 0, 2 ** 32 - 1, "42", b"text")


def test_coerced_timestamp_and_atomic_create(tmp_path):
    p = str(tmp_path / "python.c")
    w = memt.Writer(p, [("timestamp", "I64"), ("s", "Str")], 512, 2)
    assert os.listdir(str(tmp_path)) == ["python.c"]  # built under a hidden name, linked in when complete
    assert w.append((1.7, "a")) == memt.OK
    assert w.append_located((2.2, 3))[0] == memt.OK
    assert [st for st, _, _, _ in w.append_batch([(3.9, None), ("4", b"x")])] == [memt.OK, memt.OK]
    with pytest.raises(ValueError):
        w.append((1,))
    w.close()
    assert memtread.read_rows(p)[1] == [(1, "a"), (2, "3"), (3, ""), (4, "x")]
    with open(p, "rb") as f:
        raw = f.read()
    c = memt.geometry(2, 2, 512)[1]
    assert struct.unpack_from("<qq", raw, c + 24) == (1, 4)  # min_ts, max_ts


def test_append_batch_matches_append(tmp_path):
    a, b = str(tmp_path / "python.a"), str(tmp_path / "python.b")
    cols = [("timestamp", "I64"), ("s", "Str"), ("f", "F64")]
    wa, wb = memt.Writer(a, cols, 512, 4), memt.Writer(b, cols, 512, 4)
    rows = [(i, "row %d" % i * (i % 5), i / 3.0) for i in range(200)]
    for r in rows:
        wa.append(r)
    res = wb.append_batch(rows[:50]) + wb.append_batch(rows[50:])
    assert all(st == memt.OK for st, _, _, _ in res)
    assert wa.counters() == wb.counters()
    assert memtread.read_rows(a) == memtread.read_rows(b)
    wa.close()
    wb.close()


def test_wrap_counters_and_order(tmp_path):
    p = str(tmp_path / "python.wrap")
    w = memt.Writer(p, [("timestamp", "I64"), ("v", "Str")], 256, 4)
    for i in range(300):
        assert w.append((i, "v%03d" % i)) == memt.OK
    c = w.counters()
    t = memtread.Table(p)
    got = t.rows()
    assert c["chunks_recycled"] > 0 and c["rows_overwritten"] + len(got) == 300
    assert [r[0] for r in got] == list(range(300 - len(got), 300))
    assert t.counters()["rows_overwritten"] == c["rows_overwritten"]
    assert t.writer_alive()
    t.close()
    # the write chunk index and chunk states
    with open(p, "rb") as f:
        raw = f.read()
    wc = struct.unpack_from("<I", raw, 32)[0]
    doff = memt.geometry(2, 4, 256)[1]
    states = [struct.unpack_from("<I", raw, doff + i * 256 + 16)[0] for i in range(4)]
    assert states[wc] == memt.WRITING and all(s == memt.SEALED for i, s in enumerate(states) if i != wc)
    # each recycle bumps that chunk's generation: ordering by (generation,
    # index) from the chunk after the write chunk is the ring's age order
    gens = [struct.unpack_from("<Q", raw, doff + i * 256)[0] for i in range(4)]
    order = sorted(range(4), key=lambda i: (gens[i], i))
    assert order == [(wc + 1 + k) % 4 for k in range(4)]
    w.close()


def test_row_too_large_and_closed(tmp_path):
    p = str(tmp_path / "python.big")
    w = memt.Writer(p, [("timestamp", "I64"), ("v", "Str")], 128, 2)
    assert w.append((1, "a")) == memt.OK
    assert w.append((2, "x" * 200)) == memt.ROW_TOO_LARGE
    assert w.append((3, "b")) == memt.OK
    w.close()
    assert w.append((4, "c")) == memt.ROW_TOO_LARGE  # closed: dropped, no exception
    assert [r[0] for r in memtread.read_rows(p)[1]] == [1, 3]
    with pytest.raises(ValueError):
        memt.Writer(p + "x", [("a", "I64")], 100, 2)  # not a multiple of 8


def test_exclusive_create_and_lock(tmp_path):
    p = str(tmp_path / "python.x")
    w = memt.Writer(p, [("timestamp", "I64")], 1024, 2)
    with pytest.raises(FileExistsError):
        memt.Writer(p, [("timestamp", "I64")], 1024, 2)
    assert not memt.replace_stale(p)  # a live writer holds the flock
    # another process cannot take the lock either
    code = ("import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDWR)\n"
            "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n    sys.exit(3)\n")
    assert subprocess.call([sys.executable, "-c", code, p]) == 3
    w.close()
    assert memt.replace_stale(p) and not os.path.exists(p)
    w = memt.Writer(p, [("timestamp", "I64")], 1024, 2)
    w.drop()
    assert not os.path.exists(p)


def _lease(path, chunk, slot, pid, start):
    t = memtread.Table(path)
    off = memt.geometry(len(t.columns), t.num_chunks, t.chunk_size)[0] + (chunk * 16 + slot) * 16
    t.close()
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(struct.pack("<QQ", (pid << 32) | 1, start))
    return off


def test_reader_lease_blocks_recycling(tmp_path):
    p = str(tmp_path / "python.lease")
    w = memt.Writer(p, [("timestamp", "I64"), ("v", "Str")], 128, 2)
    off = _lease(p, 1, 3, os.getpid(), memt.process_start_time())  # a live reader pins chunk 1
    n = 0
    while w.append((n, "row")) == memt.OK:
        n += 1
        assert n < 100
    c = w.counters()
    assert c["writes_blocked"] == 1 and c["rows_dropped"] == 1 and c["chunks_recycled"] == 0
    # the row was not written; release the lease and the ring moves on
    with open(p, "r+b") as f:
        f.seek(off)
        f.write(bytes(16))
    assert w.append((n, "row")) == memt.OK
    assert [r[0] for r in memtread.read_rows(p)[1]] == list(range(n + 1))
    w.close()


def test_dead_reader_lease_is_reclaimed(tmp_path):
    p = str(tmp_path / "python.dead")
    w = memt.Writer(p, [("timestamp", "I64"), ("v", "Str")], 128, 2)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    off = _lease(p, 1, 0, proc.pid, 12345)  # its owner is gone
    for i in range(20):
        assert w.append((i, "row")) == memt.OK
    assert w.counters()["writes_blocked"] == 0
    with open(p, "rb") as f:
        f.seek(off)
        assert f.read(8) == bytes(8)  # state freed (the start-time word is left, as the Go writer does)
    w.close()


def test_sizing():
    assert memt.size_for(20 << 20) == (2621440, 8)
    assert memt.size_for(1) == (4096, 8)            # capacity clamped to 32 KiB -> chunk clamped to 4 KiB
    assert memt.size_for(10 << 30) == (8 << 20, 8)  # 1 GiB cap, 8 MiB chunk cap
    assert memt.size_for(100003) == (12496, 8)      # rounded down to a multiple of 8
    env = {}
    assert memt.capacity_for("torch_step_timing", env) == 2 << 20
    assert memt.capacity_for("whatever", env) == 20 << 20
    assert memt.capacity_for("whatever", env, default=1 << 20) == 1 << 20
    assert memt.capacity_for("whatever", {"PROBING_TABLE_DEFAULT_MB": "3"}, default=1 << 20) == 3 << 20
    assert memt.capacity_for("whatever", {"PROBING_TABLE_DEFAULT_MB": "-1"}) == 20 << 20
    assert memt.capacity_for("torch_trace", {"PROBING_TABLE_DEFAULT_MB": "3"}) == 8 << 20


def test_infer_dtype():
    assert memt.infer_dtype("x", True) == memt.U8
    assert memt.infer_dtype("x", 3) == memt.I64
    assert memt.infer_dtype("x", 3.0) == memt.F64
    assert memt.infer_dtype("x", "s") == memt.STR
    assert memt.infer_dtype("x", b"s") == memt.BYTES
    assert memt.infer_dtype("record_id", None) == memt.I64
    assert memt.infer_dtype("global_step", None) == memt.I64
    assert memt.infer_dtype("latency_ms", None) == memt.F64
    assert memt.infer_dtype("duration", None) == memt.F64
    assert memt.infer_dtype("label", None) == memt.STR


def test_long_names_are_cut_on_a_character(tmp_path):
    p = str(tmp_path / "python.names")
    name = "\u00e9" * 40  # 80 bytes
    w = memt.Writer(p, [(name, "I64")], 1024, 2)
    w.append((1,))
    w.close()
    t = memtread.Table(p)
    assert t.columns[0][0] == "\u00e9" * 27 and t.ts_col == 0
    t.close()
