"""PROBING activation through the real site hook (a .pth processed at start-up).

See core_helpers.py for how the .pth is installed for the children.
"""
import json
import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import core_helpers as H  # noqa: E402
from test_core_process import FAKE_TORCH  # noqa: E402

PROBE = r'''
import json, os, subprocess, sys
rt = sys.modules.get("probing_mcp_agent.runtime")
hk = sys.modules.get("probing_mcp_agent._hook")
out = {"pid": os.getpid(), "active": bool(rt is not None and rt.started()),
       "PROBING": os.environ.get("PROBING"), "ORIGINAL": os.environ.get("PROBING_ORIGINAL"),
       "decision": getattr(hk, "decision", None),
       "stood_aside": rt.state.stood_aside if rt is not None else "",
       "sock": rt.state.socket_path if rt is not None else ""}
if out["sock"]:
    out["sock_exists"] = os.path.exists(out["sock"])
if "--spawn" in sys.argv:
    r = subprocess.run([sys.executable, os.path.abspath(sys.argv[0])], stdout=subprocess.PIPE,
                       universal_newlines=True)
    out["child"] = json.loads(r.stdout.strip().splitlines()[-1])
print(json.dumps(out))
'''

INIT = r'''
import os, sys
rt = sys.modules.get("probing_mcp_agent.runtime")
with open(os.environ["PMCP_INIT_LOG"], "a") as f:
    f.write("%d %s\n" % (os.getpid(), "active" if rt is not None and rt.started() else "inactive"))
'''


@pytest.fixture(scope="module")
def tree():
    t = H.Env()
    t.probe = t.write("probe.py", PROBE)
    t.init = t.write("init_script.py", INIT)
    yield t
    t.cleanup()


def probe(tree, args=(), script=None, **env):
    r = H.run([script or tree.probe] + list(args), tree.env(**env))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


@pytest.mark.parametrize("value", [None, "", "0", "off", "FALSE", "no"])
def test_core_off_values_do_nothing(tree, value):
    out, _ = probe(tree, PROBING=value)
    assert out["active"] is False
    assert out["PROBING"] == value  # untouched
    assert out["ORIGINAL"] is None


@pytest.mark.parametrize("value", ["1", "followed", "Followed"])
def test_core_followed_activates_and_does_not_propagate(tree, value):
    out, _ = probe(tree, ["--spawn"], PROBING=value)
    assert out["active"] is True and out["sock_exists"] is True
    assert out["PROBING"] is None
    assert out["ORIGINAL"] == value
    assert out["child"]["active"] is False
    assert out["child"]["PROBING"] is None


@pytest.mark.parametrize("value", ["2", "nested"])
def test_core_nested_propagates_to_children(tree, value):
    out, _ = probe(tree, ["--spawn"], PROBING=value)
    assert out["active"] is True
    assert out["PROBING"] == value and out["ORIGINAL"] == value
    c = out["child"]
    assert c["active"] is True and c["sock_exists"] is True and c["pid"] != out["pid"]
    assert c["PROBING"] == value


def test_core_regex_match_and_reexport(tree):
    out, _ = probe(tree, ["--spawn"], PROBING="regex:pro.e\\.py$")
    assert out["active"] is True
    assert out["PROBING"] == "regex:pro.e\\.py$"
    assert out["child"]["active"] is True  # the child re-evaluates: same script


def test_core_regex_matches_any_argv_element(tree):
    out, _ = probe(tree, ["--model=llama-70b"], PROBING="regex:llama")
    assert out["active"] is True


def test_core_regex_no_match_still_reexported(tree):
    out, _ = probe(tree, PROBING="regex:^nomatch$")
    assert out["active"] is False
    assert out["PROBING"] == "regex:^nomatch$"
    assert out["ORIGINAL"] == "regex:^nomatch$"


def test_core_regex_invalid_not_reexported(tree):
    out, _ = probe(tree, PROBING="regex:([")
    assert out["active"] is False
    assert out["PROBING"] is None
    assert out["ORIGINAL"] == "regex:(["


def test_core_exact_script_name(tree):
    out, _ = probe(tree, ["--spawn"], PROBING="probe.py")
    assert out["active"] is True
    assert out["PROBING"] == "probe.py"
    assert out["child"]["active"] is True


@pytest.mark.parametrize("value", ["other.py", "Probe.py", "probe"])
def test_core_exact_script_name_mismatch(tree, value):
    out, _ = probe(tree, PROBING=value)
    assert out["active"] is False
    assert out["PROBING"] == value  # re-exported for children
    assert out["ORIGINAL"] == value


def _init_log(tree, name):
    p = os.path.join(tree.root, name)
    if os.path.exists(p):
        os.unlink(p)
    return p


def _read(p):
    if not os.path.exists(p):
        return []
    with open(p) as f:
        return [line.split() for line in f.read().splitlines()]


def test_core_init_script_followed(tree):
    log = _init_log(tree, "init1.log")
    out, _ = probe(tree, ["--spawn"], PROBING="init:%s+1" % tree.init, PMCP_INIT_LOG=log)
    assert out["active"] is True
    assert out["PROBING"] is None
    assert out["ORIGINAL"] == "init:%s+1" % tree.init
    assert out["child"]["active"] is False
    # The script ran once, in the parent, after activation.
    assert _read(log) == [[str(out["pid"]), "active"]]


def test_core_init_script_nested_propagates_mode_only(tree):
    log = _init_log(tree, "init2.log")
    out, _ = probe(tree, ["--spawn"], PROBING="init:%s+2" % tree.init, PMCP_INIT_LOG=log)
    assert out["active"] is True
    assert out["PROBING"] == "2"
    assert out["child"]["active"] is True
    assert out["child"]["ORIGINAL"] == "2"
    assert _read(log) == [[str(out["pid"]), "active"]]


def test_core_init_script_without_mode_does_nothing(tree):
    log = _init_log(tree, "init0.log")
    out, _ = probe(tree, PROBING="init:%s" % tree.init, PMCP_INIT_LOG=log)
    assert out["active"] is False
    assert out["PROBING"] is None
    assert _read(log) == []


def test_core_torchelastic_launcher_excluded(tree):
    out, _ = probe(tree, PROBING="1", TORCHELASTIC_RUN_ID="abc")
    assert out["active"] is False
    assert out["PROBING"] == "1" and out["ORIGINAL"] is None  # left for the ranks


def test_core_torchelastic_worker_activates(tree):
    out, _ = probe(tree, PROBING="1", TORCHELASTIC_RUN_ID="abc", RANK="0", LOCAL_RANK="0")
    assert out["active"] is True


def test_core_torchrun_script_excluded(tree):
    d = os.path.join(tree.root, "bin")
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, "torchrun")
    shutil.copy(tree.probe, p)
    out, _ = probe(tree, script=p, PROBING="2")
    assert out["active"] is False and out["PROBING"] == "2"


def test_core_dash_m_torch_distributed_run_excluded(tree):
    # A stand-in torch.distributed.run module, so that `python -m` is real.
    fake = os.path.join(tree.root, "fake_torch")
    pkg = os.path.join(fake, "torch", "distributed")
    os.makedirs(pkg, exist_ok=True)
    for d in (os.path.join(fake, "torch"), pkg):
        open(os.path.join(d, "__init__.py"), "w").close()
    shutil.copy(tree.probe, os.path.join(pkg, "run.py"))
    env = tree.env(PROBING="1")
    env["PYTHONPATH"] = env["PYTHONPATH"] + os.pathsep + fake
    r = H.run(["-m", "torch.distributed.run"], env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["active"] is False and out["PROBING"] == "1"
    assert "launcher" in out["decision"]["why"]


def test_core_probing_cli_excluded(tree):
    out, _ = probe(tree, PROBING="1", PROBING_CLI_MODE="1")
    assert out["active"] is False and out["PROBING"] == "1"


def test_core_probing_cli_by_path_components():
    sys.path.insert(0, H.AGENT_PY)
    from probing_mcp_agent import _hook
    cli = ["/venv/lib/python3.11/site-packages/probing/cli.py", "/venv/site-packages/probing/cli/__main__.py"]
    for f in cli:
        assert _hook.excluded({}, ["python"], ["python"], main_file=f) == "the probing CLI", f
    # Directories that merely contain the words are not the CLI.
    for f in ["/tmp/clive/probing_mcp_demo-1/socket_rank.py", "/home/clive/probing-runs/train.py",
              "/tmp/clitest/probing_demo/train.py", "/work/probing/client.py"]:
        assert _hook.excluded({}, ["python"], ["python"], main_file=f) == "", f


def test_core_stands_aside_for_original_probing(tree):
    # A stand-in for the original agent's wheel: probing.pth -> probing_hook,
    # which (like the real one) copies PROBING to PROBING_ORIGINAL, deletes
    # it and imports `probing`. probing.pth sorts before ours.
    t = H.Env()
    try:
        t.write("site/probing.pth", "import probing_hook\n")
        t.write("site/probing_hook.py", (
            "import os\n"
            "v = os.environ.get('PROBING', '0')\n"
            "if 'PROBING' in os.environ:\n"
            "    os.environ['PROBING_ORIGINAL'] = os.environ.pop('PROBING')\n"
            "if v in ('1', '2'):\n"
            "    import probing\n"
            "    if v == '2':\n"
            "        os.environ['PROBING'] = v\n"))
        t.write("site/probing/__init__.py", "ACTIVE = True\n")
        for value in ("1", "2"):
            r = H.run([tree.probe], t.env(PROBING=value))
            assert r.returncode == 0, r.stderr
            out = json.loads(r.stdout.strip().splitlines()[-1])
            assert out["active"] is False, value
            assert "stands aside" in r.stderr and "original Probing" in r.stderr
            assert out["ORIGINAL"] == value
            assert not os.path.exists(t.ctrl) or not os.listdir(t.ctrl)
    finally:
        t.cleanup()


def test_core_own_variable_runs_beside_the_original(tree):
    # PROBING_MCP_AGENT activates this agent only, with PROBING's grammar,
    # even where the original agent's hook consumed PROBING first.
    t = H.Env()
    try:
        t.write("site/probing.pth", "import probing_hook\n")
        t.write("site/probing_hook.py", (
            "import os\n"
            "if 'PROBING' in os.environ:\n"
            "    os.environ['PROBING_ORIGINAL'] = os.environ.pop('PROBING')\n"
            "    import probing\n"))
        t.write("site/probing/__init__.py", "ACTIVE = True\n")
        r = H.run([tree.probe, "--spawn"], t.env(PROBING="1", PROBING_MCP_AGENT="2"))
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["active"] is True and out["sock_exists"] is True
        assert out["child"]["active"] is True  # "2" propagates through PROBING_MCP_AGENT
        assert "stands aside" not in r.stderr
        r = H.run([tree.probe, "--spawn"], t.env(PROBING_MCP_AGENT="1"))
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["active"] is True and out["child"]["active"] is False
        r = H.run([tree.probe], t.env(PROBING_MCP_AGENT="0"))
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["active"] is False
    finally:
        t.cleanup()


def test_core_manual_activate_is_idempotent(tree):
    code = ("import probing_mcp_agent as p, os, json\n"
            "a = p.activate(); b = p.activate()\n"
            "from probing_mcp_agent import runtime\n"
            "print(json.dumps([a, b, p.is_active(), sorted(os.listdir(os.environ['PROBING_CTRL_ROOT']))]))\n")
    r = H.run(["-c", code], tree.env(PROBING=None))
    assert r.returncode == 0, r.stderr
    a, b, active, socks = json.loads(r.stdout.strip().splitlines()[-1])
    assert a is True and b is True and active is True
    assert len([s for s in socks if s.endswith(".sock")]) >= 1


def test_core_decide_unit(monkeypatch):
    monkeypatch.delenv("PROBING", raising=False)
    sys.path.insert(0, H.AGENT_PY)
    sys.path.insert(0, H.AGENT_PY)
    from probing_mcp_agent import _hook

    d = _hook.decide({"PROBING": "1"}, ["-m"], ["python", "-m", "torch.distributed.run", "--nproc", "2"])
    assert d["active"] is None and "launcher" in d["why"]
    d = _hook.decide({"PROBING": "1"}, ["-m"], ["python", "-X", "dev", "-m", "probing.nccl"])
    assert d["active"] is None
    for cl in (["python", "-um", "torch.distributed.run"], ["python", "-mtorch.distributed.run"],
               ["python", "-W", "ignore", "-X", "dev", "-B", "-m", "torch.distributed.launch"]):
        assert _hook.decide({"PROBING": "2"}, ["-m"], cl)["active"] is None, cl
    for cl in (["python", "-c", "-m torch.distributed.run"], ["python", "-Wignore", "x.py", "-m", "torch"]):
        assert _hook._dash_m(cl, []) is None, cl
    d = _hook.decide({"PROBING": "regex:mytrain"}, ["-m"], ["python", "-m", "pkg.mytrain"])
    assert d["active"] is True
    d = _hook.decide({"PROBING": "1"}, ["train.py", "-m", "torch.distributed.run"],
                     ["python", "train.py", "-m", "torch.distributed.run"])
    assert d["active"] is True  # -m after the script is the script's argument
    d = _hook.decide({"PROBING": "INIT:/x.py+nested"}, ["t.py"])
    assert d["active"] is True and d["child"] == "nested" and d["init"] == "/x.py"


# -- start-up cost: what activation imports, and what it leaves to first use --

LAZY = r'''
import os, sys
first = sorted(sys.modules)  # as the program's first line finds them
rt = sys.modules["probing_mcp_agent.runtime"]
pid = os.getpid()
ident = os.path.join(os.environ["PROBING_DATA_DIR"], str(pid), ".identity.json")
state = [rt.started(), rt.state.ready, os.path.exists(ident), os.path.exists(rt.state.socket_path)]
if os.environ.get("LAZY_TORCH"):
    import time
    import torch  # a fake: see FAKE_TORCH
    # torch's import wakes the background part; the program never waits
    # for it. A hang guard only: the wait is on the state.
    deadline = time.time() + 60
    while not (rt.state.ready and "probing_mcp_agent.tables" in sys.modules) and time.time() < deadline:
        time.sleep(0.02)
    state.append(rt.state.ready and "probing_mcp_agent.tables" in sys.modules)
if os.environ.get("LAZY_WAIT"):
    import probing_mcp_agent
    state.append(probing_mcp_agent.wait_ready(60))
    from probing_mcp_agent import config
    state.append("probing.tables.flush_interval" in config.all())
sys.stdout.write(repr((first, state)) + "\n")
'''

# What the site hook must not import at start-up (server.py, tables, config,
# logging, json, ...): the program pays for them only when it needs them.
HEAVY = ("logging", "json", "re", "signal", "socket", "http.server", "socketserver", "subprocess",
         "probing_mcp_agent.server", "probing_mcp_agent.tables", "probing_mcp_agent.memt",
         "probing_mcp_agent.config", "probing_mcp_agent.fr", "probing_mcp_agent.collectives")


def _lazy(tree, **env):
    import ast

    # Completion on demand only: the delayed one (a second after
    # activation) could otherwise come first on a loaded machine.
    env.setdefault("PROBING_MCP_COMPLETE_AFTER", "-1")
    script = tree.write("lazy.py", LAZY)
    r = H.run([script], tree.env(**env))
    assert r.returncode == 0, r.stderr
    return ast.literal_eval(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("value", ["1", "2"])
def test_core_activation_imports_little(tree, value):
    import ast

    first, state = _lazy(tree, PROBING=value)
    # Active, the identity file and the socket there before the program's
    # first line; the rest is not done yet.
    assert state == [True, False, True, True], state
    off = H.run(["-c", "import sys; sys.stdout.write(repr(sorted(sys.modules)))"], tree.env())
    before = set(ast.literal_eval(off.stdout))
    assert [m for m in HEAVY if m in first and m not in before] == []


def test_core_activation_completes_at_torch_import(tree):
    for rel, text in FAKE_TORCH.items():
        tree.write("fake/" + rel, text)
    env = tree.env(PROBING="1", LAZY_TORCH="1", PROBING_MCP_COMPLETE_AFTER="-1")
    env["PYTHONPATH"] += os.pathsep + os.path.join(tree.root, "fake")
    script = tree.write("lazy.py", LAZY)
    r = H.run([script], env)
    assert r.returncode == 0, r.stderr
    import ast

    _, state = ast.literal_eval(r.stdout.strip().splitlines()[-1])
    assert state == [True, False, True, True, True], state


def test_core_activation_wait_ready_completes(tree):
    _, state = _lazy(tree, PROBING="1", LAZY_WAIT="1")
    assert state == [True, False, True, True, True, True], state


def test_core_long_lived_process_completes_unasked(tree):
    """A process that outlives PROBING_MCP_COMPLETE_AFTER completes its
    start-up with no client, no torch and no wait_ready, and loads the
    server: the first client of a job that has just hung must not pay for
    the imports (on a loaded node they can outlast its timeout)."""
    script = tree.write("unasked.py", (
        "import sys, time\n"
        "rt = sys.modules['probing_mcp_agent.runtime']\n"
        "deadline = time.time() + 60  # a hang guard; the wait is on the state\n"
        "while not (rt.state.ready and 'probing_mcp_agent.server' in sys.modules) and time.time() < deadline:\n"
        "    time.sleep(0.05)\n"
        "sys.stdout.write(repr([rt.state.ready, 'probing_mcp_agent.server' in sys.modules]) + '\\n')\n"))
    r = H.run([script], tree.env(PROBING="1", PROBING_MCP_COMPLETE_AFTER="0.2"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[True, True]", r.stdout


def test_core_first_client_completes_the_start(tree):
    """The control socket answers its first client with the start-up
    complete: the recorders' config keys are there."""
    script = tree.write("idle_child.py", H.IDLE_CHILD)
    p = H.spawn([script], tree.env(PROBING="1"))
    try:
        H.readline(p, want="UP")
        sock = H.wait_path(tree.sock(p.pid))
        r = H.get(sock, "/config/_keys")
        assert r.status == 200 and "probing.tables.flush_interval" in r.body.decode(), r.body[:300]
        assert H.get(sock, "/ready").status == 200
    finally:
        H.stop(p)
