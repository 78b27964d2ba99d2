"""Rows of a MEMT v5 table as bytes (stdlib only): value coercion and the
compiled row encoders of memt.Writer.

A row is ``[u32 row_len][col0][col1]...``; fixed-width columns are stored
little-endian at their size, Str/Bytes values as ``[i32 len][bytes]``
(memtfmt.py). ``coerce`` turns any value into what its column stores (None
to 0 / '', out-of-range integers clamped); ``_compile_encoder`` builds, per
table, one function from a row's values to its bytes.
"""

import struct

from .memtfmt import _FMT, _I32, _SIZE, BYTES, F32, F64, I32, I64, I64_MAX, I64_MIN, STR, U8, U32, U64


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
