"""Every bad argument to the agent is a 400 that names it and what it accepts
(never a 500, never clamped in silence), a chunked body is parsed strictly,
and error messages echo a bounded piece of the client's input."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import core_helpers as H  # noqa: E402


class Child(object):
    pass


@pytest.fixture(scope="module")
def child():
    t = H.Env()
    p, sock = H.spawn_agent(t, PROBING_ALLOW_EVAL="1")
    c = Child()
    try:
        c.sock = sock
        yield c
    finally:
        H.stop(p)
        t.cleanup()


BAD_QUERIES = [
    ("/apis/stacks?max_frames=-10", "max_frames", "1..100000"),
    ("/apis/stacks?max_frames=0", "max_frames", "1..100000"),
    ("/apis/stacks?max_frames=100001", "max_frames", "1..100000"),
    ("/apis/stacks?max_frames=abc", "max_frames", "1..100000"),
    ("/apis/stacks?max_frames=1e3", "max_frames", "1..100000"),
    ("/apis/stacks?max_frames=%D9%A1", "max_frames", "1..100000"),  # an Arabic-Indic digit
    ("/apis/nodes?limit=-10", "limit", "1..10000"),
    ("/apis/nodes?limit=10001", "limit", "1..10000"),
    ("/apis/nodes?offset=-10", "offset", "0.."),
    ("/apis/nodes?since_version=-5", "since_version", "-1.."),
    ("/apis/pythonext/callstack?tid=-10", "tid", "0.."),
    ("/apis/pythonext/callstack?tid=abc", "tid", "0.."),
    ("/apis/pythonext/callstack?tid=%d" % (1 << 70), "tid", "0.."),
    ("/apis/pythonext/callstack?max_frames=-1", "max_frames", "1..100000"),
    ("/apis/pythonext/callstack?locals=maybe", "locals", "true/false"),
    ("/apis/pythonext/flight-recorder/snapshot?format=xml", "format", "pickle or json"),
    ("/apis/pythonext/flight-recorder/snapshot?raw=2", "raw", "true/false"),
]


@pytest.mark.parametrize("path,name,accepted", BAD_QUERIES)
def test_trust_bad_query_argument_is_a_400_naming_it(child, path, name, accepted):
    r = H.get(child.sock, path)
    assert r.status == 400, (path, r.status, r.body)
    body = r.json()
    msg = body["error"] if isinstance(body["error"], str) else body["error"]["message"]
    assert name in msg and accepted in msg, msg


@pytest.mark.parametrize("timeout", ["-10", "0", "inf", "nan", "301", "abc", "1e9", "5s"])
def test_trust_bad_eval_timeout_is_a_400(child, timeout):
    r = H.request(child.sock, "POST", "/apis/pythonext/eval?timeout=" + timeout, "1")
    assert r.status == 400, (timeout, r.status, r.body)
    msg = r.json()["error"]["message"]
    assert "timeout" in msg and "300" in msg, msg


CHUNKED = b"PUT /config/loglevel HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize("body,why", [
    (b"-10\r\nabc\r\n0\r\n\r\n", b"chunk size"),     # the hole: int("-10", 16) == -16
    (b"+4\r\ninfo\r\n0\r\n\r\n", b"chunk size"),
    (b"0x4\r\ninfo\r\n0\r\n\r\n", b"chunk size"),
    (b"1_0\r\ninfo\r\n0\r\n\r\n", b"chunk size"),
    (b"zz\r\ninfo\r\n0\r\n\r\n", b"chunk size"),
    (b"10000000000000000\r\n", b"chunk size"),       # 17 hex digits
    (b"8\r\ninfo", b"cut short"),                     # the data ends early
    (b"4\r\ninfoXX0\r\n\r\n", b"cut short"),          # no CRLF after the data
    (b"4\r\ninfo\r\n0\r\n" + b"X-T: 1\r\n" * 100 + b"\r\n", b"trailer"),
])
def test_trust_malformed_chunked_body_is_a_400(child, body, why):
    out = H.raw(child.sock, CHUNKED + body, shut_wr=True)
    head = out.split(b"\r\n")[0]
    assert b" 400 " in head and b"BAD_REQUEST" in out and why in out, out
    assert H.get(child.sock, "/config/loglevel").text == "warning"


@pytest.mark.parametrize("cl", [b"-5", b"+5", b"abc", b"\xd9\xa1", b"99999999999999999999999"])
def test_trust_bad_content_length_is_a_400(child, cl):
    out = H.raw(child.sock, b"PUT /config/loglevel HTTP/1.1\r\nContent-Length: " + cl + b"\r\n\r\ninfo", shut_wr=True)
    assert b" 400 " in out.split(b"\r\n")[0] and b"Content-Length" in out, out


def test_trust_error_echoes_are_bounded(child):
    s = child.sock
    long = "9" * 3000
    for method, path in (("GET", "/apis/stacks?max_frames=" + long), ("GET", "/apis/stacks?max_frames=x" + long),
                         ("GET", "/apis/pythonext/callstack?tid=" + long),
                         ("GET", "/apis/pythonext/flight-recorder/snapshot?format=" + long),
                         ("POST", "/apis/pythonext/eval?timeout=" + long), ("GET", "/config/" + "a" * 3000),
                         ("GET", "/no/" + "p" * 3000), ("POST", "/health/" + "h" * 3000)):
        r = H.request(s, method, path, "1" if method == "POST" else None)
        assert r.status in (400, 404), (path[:40], r.status)
        assert len(r.body) < 600, (path[:40], len(r.body), r.body[:200])
    out = H.raw(s, b"B" * 3000 + b" /health HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert len(out) < 1000 and b" 405 " in out.split(b"\r\n")[0], out[:300]
