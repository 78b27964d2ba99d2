"""Who may eval: the peer-checked control socket unless the job opts out
(PROBING_ALLOW_EVAL=0/false/off/no; an unrecognised value counts as off),
TCP only with an explicit PROBING_ALLOW_EVAL=1 and the token."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import core_helpers as H  # noqa: E402

TOKEN = "tok-eval-42"
AUTH = {"Authorization": "Bearer " + TOKEN}


class Child(object):
    pass


@pytest.fixture(scope="module")
def child():
    t = H.Env()
    p, sock = H.spawn_agent(t, PROBING_SERVER_ADDR="127.0.0.1:0", PROBING_AUTH_TOKEN=TOKEN, PROBING_ALLOW_EVAL=None)
    c = Child()
    try:
        c.sock = sock
        c.ident = t.identity(p.pid)
        host, port = c.ident["addr"].rsplit(":", 1)
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


def test_trust_eval_served_on_the_socket_by_default(child):
    assert child.ident["eval_allowed"] is True and child.ident["eval_tcp"] is False
    r = H.request(child.sock, "POST", "/apis/pythonext/eval", "6*7")
    assert r.status == 200 and r.json()["output"] == "42\n", r.body
    assert H.get(child.sock, "/config/allow.eval").text == "true"
    assert H.get(child.sock, "/config/allow.eval.tcp").text == "false"
    # TCP needs the job's explicit PROBING_ALLOW_EVAL=1, token or not.
    r = H.request(child.tcp, "POST", "/apis/pythonext/eval", "6*7", headers=AUTH)
    assert r.status == 403
    assert "PROBING_ALLOW_EVAL=1" in r.json()["error"]["message"]


@pytest.mark.parametrize("value", ["0", "off", "No"])
def test_trust_eval_opt_out(tree, value):
    p, sock = H.spawn_agent(tree, PROBING_ALLOW_EVAL=value, PROBING_SERVER_ADDR="127.0.0.1:0", PROBING_AUTH_TOKEN=TOKEN)
    try:
        ident = tree.identity(p.pid)
        assert ident["eval_allowed"] is False and ident["eval_tcp"] is False
        r = H.request(sock, "POST", "/apis/pythonext/eval", "1+1")
        assert r.status == 403
        msg = r.json()["error"]["message"]
        assert "opted out" in msg and "PROBING_ALLOW_EVAL=" + value in msg, msg
        host, port = ident["addr"].rsplit(":", 1)
        assert H.request((host, int(port)), "POST", "/apis/pythonext/eval", "1+1", headers=AUTH).status == 403
        assert H.get(sock, "/config/allow.eval").text == "false"
    finally:
        H.stop(p)


def test_trust_eval_unrecognised_value_fails_closed(tree):
    p, sock = H.spawn_agent(tree, PROBING_ALLOW_EVAL="maybe")
    try:
        assert tree.identity(p.pid)["eval_allowed"] is False
        r = H.request(sock, "POST", "/apis/pythonext/eval", "1+1")
        assert r.status == 403 and "'maybe'" in r.json()["error"]["message"]
    finally:
        err = H.finish(p)
    assert "PROBING_ALLOW_EVAL='maybe'" in err


def test_trust_eval_over_tcp_with_explicit_allow_and_token(tree):
    p, sock = H.spawn_agent(tree, PROBING_ALLOW_EVAL="1", PROBING_SERVER_ADDR="127.0.0.1:0", PROBING_AUTH_TOKEN=TOKEN)
    try:
        ident = tree.identity(p.pid)
        assert ident["eval_allowed"] is True and ident["eval_tcp"] is True
        host, port = ident["addr"].rsplit(":", 1)
        t = (host, int(port))
        assert H.request(t, "POST", "/apis/pythonext/eval", "6*7").status == 401
        r = H.request(t, "POST", "/apis/pythonext/eval", "6*7", headers=AUTH)
        assert r.status == 200 and r.json()["output"] == "42\n"
    finally:
        H.stop(p)
