"""Config writes go to registered, settable keys only, with bounded values:
no request can make the store grow."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import core_helpers as H  # noqa: E402


@pytest.fixture(scope="module")
def sock():
    t = H.Env()
    p, sock = H.spawn_agent(t, PROBING_FOO_BAR="baz")
    try:
        yield sock
    finally:
        H.stop(p)
        t.cleanup()


def test_trust_config_put_only_to_registered_keys(sock):
    s = sock
    before = H.get(s, "/config").json()
    r = H.request(s, "PUT", "/config/custom.knob", "7")
    assert r.status == 404, r.body
    msg = r.json()["error"]["message"]
    assert "probing.custom.knob" in msg and "settable keys:" in msg and "probing.loglevel" in msg, msg
    assert "probing.comm.collectives" in msg and "probing.server.address" not in msg
    for i in range(300):
        assert H.request(s, "PUT", "/config/k%d" % i, "v" * 1000).status == 404
    assert H.get(s, "/config").json() == before  # the store did not grow
    assert H.get(s, "/config/custom.knob").status == 404
    # A key that mirrors the environment is not a setting.
    r = H.request(s, "PUT", "/config/foo.bar", "x")
    assert r.status == 403 and "mirrors the environment" in r.json()["error"]["message"]
    assert H.get(s, "/config/foo.bar").text == "baz"
    keys = dict((k["key"], k) for k in H.get(s, "/config/_keys").json())
    assert keys["probing.foo.bar"]["settable"] is False and keys["probing.loglevel"]["settable"] is True
    # Values and keys are bounded, and so are the messages about them.
    r = H.request(s, "PUT", "/config/loglevel", "x" * 5000)
    assert r.status == 400
    msg = r.json()["error"]["message"]
    assert "probing.loglevel" in msg and "5000" in msg and "1024" in msg and len(msg) < 200, msg
    r = H.request(s, "PUT", "/config/" + "k" * 3000, "1")
    assert r.status == 400 and len(r.json()["error"]["message"]) < 300
    r = H.request(s, "PUT", "/config/loglevel", "LOUD" * 200)
    assert r.status == 400 and len(r.json()["error"]["message"]) < 300
    assert H.get(s, "/config/loglevel").text == "warning"
    assert H.request(s, "PUT", "/config/loglevel", "info").json()["previous"] == "warning"
    assert H.request(s, "PUT", "/config/loglevel", "warning").status == 200
