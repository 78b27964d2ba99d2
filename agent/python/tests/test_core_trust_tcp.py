"""The TCP listener: it needs PROBING_AUTH_TOKEN to start, loopback included
(every local user can reach a loopback port), every path but /health and
/ready needs the token, and every request must name this agent in Host
(DNS rebinding)."""
import os
import socket
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import core_helpers as H  # noqa: E402

sys.path.insert(0, H.AGENT_PY)
from probing_mcp_agent import tcphost  # noqa: E402

TOKEN = "tok-tcp-42"
AUTH = {"Authorization": "Bearer " + TOKEN}


class Child(object):
    pass


@pytest.fixture(scope="module")
def child():
    t = H.Env()
    p, sock = H.spawn_agent(t, PROBING_SERVER_ADDR="127.0.0.1:0", PROBING_AUTH_TOKEN=TOKEN)
    c = Child()
    try:
        c.sock, c.pid = sock, p.pid
        host, port = t.identity(p.pid)["addr"].rsplit(":", 1)
        c.tcp = (host, int(port))
        yield c
    finally:
        H.stop(p)
        t.cleanup()


@pytest.fixture()
def tree():
    t = H.Env()
    yield t
    t.cleanup()


def test_trust_tcp_loopback_without_token_is_not_served(tree):
    p, sock = H.spawn_agent(tree, PROBING_SERVER_ADDR="127.0.0.1:0")
    try:
        ident = tree.identity(p.pid)
        assert ident["addr"] == "", ident["addr"]  # no listener at all
        assert H.get(sock, "/config/server.address").text == ""
        assert H.get(sock, "/health").status == 200  # the Unix socket still serves
    finally:
        err = H.finish(p)
    assert "refusing to listen on 127.0.0.1:0 without PROBING_AUTH_TOKEN" in err
    assert "loopback included" in err


def test_trust_tcp_every_data_path_needs_the_token(child):
    t = child.tcp
    assert H.get(t, "/health").json() == {"status": "ok"}
    assert H.get(t, "/ready").json() == {"status": "ready"}
    for method, path, body in (("GET", "/apis/overview", None), ("GET", "/apis/stacks", None),
                               ("GET", "/apis/identity", None), ("GET", "/config", None),
                               ("GET", "/config/_keys", None), ("GET", "/apis/pythonext/callstack", None),
                               ("PUT", "/config/comm.collectives", "off"),
                               ("POST", "/apis/pythonext/eval", "1"),
                               ("GET", "/apis/pythonext/flight-recorder/snapshot", None),
                               ("GET", "/no/such/path", None)):
        r = H.request(t, method, path, body)
        assert r.status == 401, (method, path, r.status)
        assert r.json()["error"]["code"] == "UNAUTHORIZED"
    assert H.get(child.sock, "/config/comm.collectives").text == "on"  # the PUT did nothing
    assert H.get(t, "/apis/identity", headers=AUTH).json()["pid"] == child.pid


def test_trust_tcp_host_must_name_this_agent(child):
    t = child.tcp
    for host in ("rebind.evil.com", "rebind.evil.com:%d" % t[1], "evil.com.", "10.9.9.9", "[2001:db8::1]:80",
                 "127.0.0.1.evil.com", "localhost.evil.com", "", "a b"):
        for path in ("/apis/overview", "/health"):
            r = H.get(t, path, headers=dict(AUTH, Host=host))
            assert r.status == 403, (host, path, r.status)
            msg = r.json()["error"]["message"]
            assert "does not name this agent" in msg and "PROBING_ADVERTISE_ADDR" in msg, msg
    r = H.request(t, "PUT", "/config/comm.collectives", "off", headers=dict(AUTH, Host="rebind.evil.com"))
    assert r.status == 403
    assert H.get(child.sock, "/config/comm.collectives").text == "on"
    hn = socket.gethostname()
    for host in ("127.0.0.1", "127.0.0.1:%d" % t[1], "localhost:1", "LOCALHOST", "[::1]:9", "127.5.6.7",
                 "app.localhost", hn, hn + ":%d" % t[1], hn.split(".")[0]):
        r = H.get(t, "/apis/identity", headers=dict(AUTH, Host=host))
        assert r.status == 200, (host, r.status, r.body)
    out = H.raw(t, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.com\r\nConnection: close\r\n\r\n")
    assert b" 403 " in out.split(b"\r\n")[0] and b"2 Host headers" in out, out


def test_trust_tcp_host_advertised_and_connected_address(tree):
    # PROBING_ADVERTISE_ADDR's host is accepted; on a wildcard bind, the
    # address a client connected to is too (a remote client's Host).
    p, sock = H.spawn_agent(tree, PROBING_PORT="RANDOM", PROBING_AUTH_TOKEN=TOKEN,
                     PROBING_ADVERTISE_ADDR="node-7.cluster.example:{port}")
    try:
        port = int(tree.identity(p.pid)["addr"].rsplit(":", 1)[1])
        t = ("127.0.0.1", port)
        assert H.get(t, "/apis/identity", headers=dict(AUTH, Host="node-7.cluster.example:1")).status == 200
        assert H.get(t, "/apis/identity", headers=dict(AUTH, Host="node-8.cluster.example")).status == 403
        try:
            addrs = set(ai[4][0] for ai in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET))
        except socket.gaierror:
            addrs = set()
        addrs = [a for a in addrs if not a.startswith("127.")]
        if addrs:
            r = H.get((addrs[0], port), "/apis/identity", headers=dict(AUTH, Host="%s:%d" % (addrs[0], port)))
            assert r.status == 200, r.body
    finally:
        H.stop(p)


def test_core_tcphost_split_and_refuse():
    assert tcphost.split_host("Example.COM.:80") == "example.com"
    assert tcphost.split_host("[::1]:8080") == "::1" and tcphost.split_host("[::1]") == "::1"
    assert tcphost.split_host("::1") == "::1" and tcphost.split_host("10.0.0.1") == "10.0.0.1"
    for bad in ("", "[::1", "[::1]x", "a b", "u@h", "h/x", ":80"):
        assert tcphost.split_host(bad) is None, bad
    allowed = tcphost.allowed_names("0.0.0.0", {"PROBING_ADVERTISE_ADDR": "[fd00::7]:{port}"})
    assert "fd00::7" in allowed and "localhost" in allowed and "0.0.0.0" not in allowed
    assert tcphost.refuse([], allowed) == ""
    assert tcphost.refuse(["127.0.0.2:1"], allowed) == "" and tcphost.refuse(["[::1]"], allowed) == ""
    assert tcphost.refuse(["[::ffff:127.0.0.1]"], allowed) == ""
    assert tcphost.refuse(["x.localhost"], allowed) == "" and tcphost.refuse(["[fd00::7]:9"], allowed) == ""
    assert "does not name this agent" in tcphost.refuse(["evil.com"], allowed)
    assert len(tcphost.refuse(["e" * 5000], allowed)) < 400
    assert "2 Host headers" in tcphost.refuse(["localhost", "evil.com"], allowed)


# -- signed requests (issue 23): the token proves itself without travelling

from probing_mcp_agent import hmacauth  # noqa: E402

VECTORS = os.path.join(H.AGENT_PY, "..", "..", "internal", "hmacauth", "testdata", "vectors.json")


def test_trust_tcp_signatures_match_the_go_side():
    import json

    with open(VECTORS) as f:
        vs = json.load(f)
    assert len(vs) >= 2
    for v in vs:
        k = hmacauth.key(v["Token"])
        hmacauth._seen.pop(v["Nonce"], None)
        assert hmacauth.verify(k, v["Method"], v["Target"], v["Header"], v["Body"].encode(), None,
                               now=v["TS"]) == v["Nonce"]
        assert hmacauth.sign_response(k, v["Nonce"], v["Status"], v["Body"].encode()) == v["Response"]


def _signed(t, method, path, body=b"", token=TOKEN, addr=None):
    k = hmacauth.key(token)
    h, nonce = hmacauth.sign(k, method, path, addr or "%s:%d" % t, body)
    return h, nonce


def test_trust_tcp_signed_request_is_served_and_answer_signed(child):
    t = child.tcp
    h, nonce = _signed(t, "GET", "/apis/identity")
    r = H.get(t, "/apis/identity", headers={"Authorization": h})
    assert r.status == 200 and r.json()["pid"] == child.pid
    k = hmacauth.key(TOKEN)
    assert r.headers[hmacauth.RESPONSE_HEADER] == hmacauth.sign_response(k, nonce, 200, r.body)
    # The same request again is a replay.
    r = H.get(t, "/apis/identity", headers={"Authorization": h})
    assert r.status == 401 and "replay" in r.json()["error"]["message"], r.body
    assert hmacauth.RESPONSE_HEADER not in r.headers


def test_trust_tcp_bad_signatures_are_refused(child):
    t = child.tcp
    cases = []
    h, _ = _signed(t, "GET", "/apis/identity", token="another-token")
    cases.append(("GET", "/apis/identity", None, h, 401, "signature is wrong"))
    h, _ = _signed(t, "PUT", "/config/comm.collectives", b"on")
    cases.append(("PUT", "/config/comm.collectives", "off", h, 401, "signature is wrong"))  # body changed
    h, _ = _signed(t, "GET", "/apis/overview")
    cases.append(("GET", "/apis/identity", None, h, 401, "signature is wrong"))  # path changed
    h, _ = _signed(t, "GET", "/apis/identity", addr="10.9.9.9:%d" % t[1])
    cases.append(("GET", "/apis/identity", None, h, 403, "relayed"))
    k = hmacauth.key(TOKEN)
    h, _ = hmacauth.sign(k, "GET", "/apis/identity", "%s:%d" % t, b"", now=1)
    cases.append(("GET", "/apis/identity", None, h, 401, "NTP"))
    cases.append(("GET", "/apis/identity", None, hmacauth.SCHEME + " ts=1", 401, "required"))
    for method, path, body, h, status, words in cases:
        r = H.request(t, method, path, body, headers={"Authorization": h})
        assert r.status == status and words in r.json()["error"]["message"], (path, r.status, r.body)
    assert H.get(child.sock, "/config/comm.collectives").text == "on"
