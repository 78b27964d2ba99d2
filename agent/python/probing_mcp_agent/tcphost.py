"""The Host check of the TCP listener (DNS rebinding).

A web page on evil.com can point evil.com at 127.0.0.1 after loading: the
browser then sends its requests to our port with `Host: evil.com`, and
reads the answers as same-origin. So every TCP request must name this
agent in Host:
  - a loopback name (localhost, *.localhost, ip6-localhost, ...) or any
    loopback address;
  - the address the connection came in on (getsockname): an IP literal in
    Host cannot be rebound, and a client that dialled it found us there;
  - the bound address, this host's name (gethostname, and its first label),
    and PROBING_ADVERTISE_ADDR's host.
The port in Host is not compared: a tunnel (ssh -L) changes it. A request
with no Host (HTTP/1.0 tools) passes, as no browser sends one without it.
The names are computed once, when the listener starts (no DNS lookup); a
request costs a set lookup and, for an IP literal, one getsockname().
"""
import ipaddress
import os
import socket

LOOPBACK_NAMES = frozenset(["localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"])
_WILDCARDS = ("", "0.0.0.0", "::")


def split_host(value):
    """The host part of a Host header or an address (host, host:port,
    [v6]:port, a bare v6 address), lower-cased, without a trailing dot;
    None when it is malformed."""
    v = value.strip().lower()
    if not v:
        return None
    if v.startswith("["):
        end = v.find("]")
        if end < 0 or (v[end + 1:] and not v[end + 1:].startswith(":")):
            return None
        return v[1:end]
    if v.count(":") == 1:
        v = v.rpartition(":")[0]
    v = v.rstrip(".")
    if not v or any(c in v for c in " /\\@\t"):
        return None
    return v


def _ip(text):
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped or ip


def allowed_names(bound_host, environ=None):
    """The host names a request may use, besides loopback and the
    connection's own address (computed at listener start)."""
    env = os.environ if environ is None else environ
    names = set(LOOPBACK_NAMES)
    if bound_host not in _WILDCARDS:
        names.add(bound_host.lower())
    try:
        hn = socket.gethostname().lower().rstrip(".")
    except Exception:
        hn = ""
    if hn:
        names.add(hn)
        names.add(hn.split(".", 1)[0])
    adv = split_host(env.get("PROBING_ADVERTISE_ADDR") or "")
    if adv and "{" not in adv:
        names.add(adv)
    return frozenset(names)


def refuse(hosts, allowed, conn=None):
    """Why the request must be refused (a message), or "" to serve it.
    hosts: every Host header of the request."""
    if not hosts:
        return ""
    if len(hosts) > 1:
        return "the request has %d Host headers; send one" % len(hosts)
    host = split_host(hosts[0])
    if host is not None:
        if host in allowed or host.endswith(".localhost"):
            return ""
        ip = _ip(host)
        if ip is not None:
            if ip.is_loopback:
                return ""
            try:
                local = _ip(conn.getsockname()[0]) if conn is not None else None
            except (OSError, IndexError, AttributeError):
                local = None
            if local is not None and ip == local:
                return ""
    shown = hosts[0] if len(hosts[0]) <= 80 else hosts[0][:80] + "..."
    return ("Host %r does not name this agent (a DNS rebinding guard): use 127.0.0.1, localhost, this host's "
            "name or the address you connected to, or set PROBING_ADVERTISE_ADDR in the job to the name "
            "clients use" % shown)
