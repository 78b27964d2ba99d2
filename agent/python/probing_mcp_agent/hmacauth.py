"""Signed requests on the agent's TCP listener (agent/PROTOCOL.md).

The same scheme as the Go side (internal/hmacauth): a caller proves it
holds PROBING_AUTH_TOKEN with an HMAC over the method, the request-target,
the address it sent to, a time, a nonce and the body; the answer carries
an HMAC over the nonce, its status and its body. The token itself never
travels, so an address planted in a shared store learns nothing.

Stdlib only; the lock guards one dict for microseconds and is never held
across a call out of this module.
"""

import hashlib
import hmac
import threading
import time

from . import tcphost

SCHEME = "Probing-HMAC-SHA256"
RESPONSE_HEADER = "X-Probing-Signature"
WINDOW = 300  # seconds a request's time may differ from this clock
MAX_SEEN = 1 << 17

_REQ = b"probing-mcp request v1"
_RESP = b"probing-mcp response v1"
_KEY = b"probing-mcp hmac key v1"
_HEX = set("0123456789abcdefABCDEF")

_lock = threading.Lock()
_seen = {}  # nonce -> unix time after which it may be forgotten


class AuthError(Exception):
    def __init__(self, status, message):
        Exception.__init__(self, message)
        self.status = status
        self.message = message


def key(token):
    token = (token or "").strip()
    if not token:
        return None
    return hmac.new(token.encode("utf-8"), _KEY, hashlib.sha256).digest()


def _mac(k, *parts):
    return hmac.new(k, b"\n".join(parts), hashlib.sha256).hexdigest()


def is_signed(authz):
    return (authz or "").strip().split(" ", 1)[0].lower() == SCHEME.lower()


def _clip(s, n=80):
    return s if len(s) <= n else s[:n] + "..."


def parse(authz):
    """The header's fields, or AuthError(401) naming what is wrong."""
    scheme, _, rest = (authz or "").strip().partition(" ")
    if scheme.lower() != SCHEME.lower():
        raise AuthError(401, "authorization scheme is not %s" % SCHEME)
    if len(rest) > 512:
        raise AuthError(401, "%s header is over 512 bytes" % SCHEME)
    out = {}
    for kv in rest.split(","):
        k, eq, v = kv.strip().partition("=")
        if not eq or k in out:
            raise AuthError(401, "%s header: %r is not one key=value" % (SCHEME, _clip(kv)))
        out[k] = v
    if set(out) != {"ts", "nonce", "addr", "sig"}:
        raise AuthError(401, "%s header: exactly ts, nonce, addr and sig are required" % SCHEME)
    if not out["ts"].lstrip("-").isdigit() or not out["ts"].isascii():
        raise AuthError(401, "%s header: ts is not seconds since the epoch" % SCHEME)
    for f, n in (("nonce", 32), ("sig", 64)):
        if len(out[f]) != n or not set(out[f]) <= _HEX:
            raise AuthError(401, "%s header: %s is not %d hex digits" % (SCHEME, f, n))
    host, port = split_host_port(out["addr"])
    if host is None:
        raise AuthError(401, "%s header: addr %r is not host:port" % (SCHEME, _clip(out["addr"])))
    out["nonce"], out["sig"] = out["nonce"].lower(), out["sig"].lower()
    return out


def split_host_port(addr):
    if addr.startswith("["):
        host, sep, port = addr[1:].partition("]:")
    else:
        host, sep, port = addr.rpartition(":")
        if ":" in host:
            return None, None
    if not sep or not host or not port.isdigit() or not port.isascii():
        return None, None
    return host, int(port)


def _same_host(a, b):
    ia, ib = tcphost._ip(a), tcphost._ip(b)
    if ia is not None and ib is not None:
        return ia == ib
    return a.lower() == b.lower()


def served_at(local, advertised=()):
    """servedHere for a connection whose own end is local (host, port)."""
    def check(addr):
        host, port = split_host_port(addr)
        if host is None:
            return False
        for a in advertised:
            ah, ap = split_host_port(a)
            if ah is not None and ap == port and _same_host(ah, host):
                return True
        lip = tcphost._ip(local[0])
        if local[1] != port or lip is None:
            return False
        ip = tcphost._ip(host)
        if ip is None:
            return host.lower() == "localhost" and lip.is_loopback
        return ip == lip
    return check


def verify(k, method, target, authz, body, served_here=None, now=None):
    """The nonce to sign the answer with, or AuthError."""
    f = parse(authz)
    want = _mac(k, _REQ, method.encode("latin-1"), target.encode("latin-1"), f["addr"].encode("latin-1"),
                str(int(f["ts"])).encode(), f["nonce"].encode(), hashlib.sha256(body or b"").hexdigest().encode())
    if not hmac.compare_digest(want, f["sig"]):
        raise AuthError(401, "the request's signature is wrong: the caller does not hold this agent's "
                             "PROBING_AUTH_TOKEN, or the request was changed on its way")
    now = time.time() if now is None else now
    skew = now - int(f["ts"])
    if abs(skew) > WINDOW:
        raise AuthError(401, "the request was signed %ds from this node's clock (the window is +-%ds): a replay, "
                             "or clocks out of step (synchronise them with NTP)" % (int(skew), WINDOW))
    if served_here is not None and not served_here(f["addr"]):
        raise AuthError(403, "the request was signed for %s, which is not this listener: relayed by another "
                             "address?" % _clip(f["addr"]))
    with _lock:
        if f["nonce"] in _seen:
            raise AuthError(401, "the request's nonce was used before: a replayed request is refused")
        if len(_seen) >= MAX_SEEN:
            for n in [n for n, until in _seen.items() if until < now]:
                del _seen[n]
            if len(_seen) >= MAX_SEEN:
                raise AuthError(503, "over %d signed requests within %ds: try again shortly" % (MAX_SEEN, WINDOW))
        _seen[f["nonce"]] = int(f["ts"]) + WINDOW + 1
    return f["nonce"]


def sign_response(k, nonce, status, body):
    return _mac(k, _RESP, nonce.encode(), str(int(status)).encode(), hashlib.sha256(body or b"").hexdigest().encode())


def sign(k, method, target, addr, body, now=None):
    """(header, nonce) for one request: the caller's side, for tests and tools."""
    import os

    nonce = os.urandom(16).hex()
    ts = str(int(time.time() if now is None else now))
    sig = _mac(k, _REQ, method.encode("latin-1"), target.encode("latin-1"), addr.encode("latin-1"), ts.encode(),
               nonce.encode(), hashlib.sha256(body or b"").hexdigest().encode())
    return "%s ts=%s,nonce=%s,addr=%s,sig=%s" % (SCHEME, ts, nonce, addr, sig), nonce
