"""In-process unit tests of the pure parts: identity sources, role, config
store semantics, stacks capture. (Nothing here activates the agent.)"""
import os
import sys
import threading

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from probing_mcp_agent import config, identity, stacks  # noqa: E402


def _ids(env):
    i = identity.build(env)
    return i["rank"], i["world_size"], i["local_rank"], i["local_world_size"], i["node_rank"]


def test_core_identity_launchers():
    assert _ids({}) == (-1, -1, -1, -1, -1)
    assert _ids({"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8",
                 "GROUP_RANK": "0"}) == (5, 16, 1, 8, 0)
    assert _ids({"SLURM_PROCID": "9", "SLURM_NTASKS": "12", "SLURM_LOCALID": "3", "SLURM_NODEID": "2",
                 "SLURM_NTASKS_PER_NODE": "4"}) == (9, 12, 3, 4, 2)
    assert _ids({"SLURM_NTASKS_PER_NODE": "4(x3)"})[3] == -1  # not a plain number
    assert _ids({"OMPI_COMM_WORLD_RANK": "7", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
                 "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}) == (7, 8, 3, 4, -1)
    assert _ids({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}) == \
        (2, 4, 0, 2, -1)
    # Under `srun mpirun`, the MPI rank wins over the srun task id.
    assert _ids({"OMPI_COMM_WORLD_RANK": "6", "SLURM_PROCID": "0", "SLURM_NODEID": "1"})[0::4] == (6, 1)
    assert _ids({"RANK": "x", "PMI_RANK": "4"})[0] == 4  # garbage is skipped


def test_core_identity_fields():
    i = identity.build({})
    for k in ("agent", "agent_version", "pid", "start_time", "host", "rank", "world_size", "local_rank",
              "local_world_size", "node_rank", "role", "addr", "socket", "faulthandler_signal",
              "faulthandler_file", "eval_allowed", "python", "torch", "argv"):
        assert k in i, k
    assert i["agent"] == "probing-mcp" and i["pid"] == os.getpid() and i["start_time"] > 0
    assert identity.start_time(os.getpid()) == i["start_time"]
    assert identity.start_time(999999999) == 0
    # torchrun's per-rank error file, kept for after the rank is gone
    assert i["torchelastic_error_file"] == ""
    p = "/tmp/torchelastic_x/run/attempt_0/2/error.json"
    assert identity.build({"TORCHELASTIC_ERROR_FILE": p + " "})["torchelastic_error_file"] == p


def test_core_role():
    assert identity.role({}) == ""
    assert identity.role({"ROLE_NAME": "default"}) == "default"
    env = {"PROBING_TP_RANK": "0", "PROBING_PP_RANK": "1", "PROBING_DP_RANK": "2", "ROLE_NAME": "x"}
    assert identity.role(env) == "dp=2,pp=1,tp=0"
    # PROBING_* wins over the Megatron aliases; the aliases fill the rest.
    env = {"PROBING_TP_RANK": "3", "TENSOR_MODEL_PARALLEL_RANK": "9", "PIPELINE_MODEL_PARALLEL_RANK": "1",
           "DATA_PARALLEL_RANK": "4", "PROBING_EP_RANK": "0", "CONTEXT_PARALLEL_RANK": "2",
           "PROBING_ROLE_STAGE": "prefill"}
    assert identity.role(env) == "cp=2,dp=4,ep=0,pp=1,stage=prefill,tp=3"
    assert identity.parallel({"PROBING_TP_RANK": "1", "PROBING_TP_SIZE": "8"}) == {"tp": {"rank": 1, "size": 8}}
    assert identity.role({"TP_RANK": "1", "PP_RANK": "0", "DP_RANK": "5"}) == "dp=5,pp=0,tp=1"


def test_core_config_env_mirroring():
    assert config.env_key("PROBING_TORCH_PROFILING") == "probing.torch.profiling"
    assert config.env_key("PROBING_SERVER_ADDR") == "probing.server.addr"
    assert config.env_key("PROBING_LOGLEVEL") == "probing.loglevel"
    for name in ("PROBING", "PROBING_ORIGINAL", "PROBING_PORT", "PROBING_AUTH_TOKEN", "PROBING_ASSETS_ROOT",
                 "PROBING_BASE_PATH", "PROBING_SERVER_ADDRPATTERN", "PROBING_HF_TOKEN", "PROBING_DB_PASSWORD",
                 "PROBING_X_SECRET", "PROBING_WANDB_KEY", "PROBING_GH_PAT", "PROBING_AUTH_USERNAME", "OTHER_VAR"):
        assert config.env_key(name) is None, name
    n = config.load_env({"PROBING_UNIT_MIRRORED_ONE": "v1", "PROBING_AUTH_TOKEN": "t", "HOME": "/x"})
    assert n == 1 and config.get("unit.mirrored.one") == "v1"
    assert not any("auth" in k for k in config.all())


def test_core_config_register_set_semantics():
    seen = []
    # Env value first, then registration: kept if valid.
    config.load_env({"PROBING_UNIT_LEVEL": "HIGH"})
    v = config.register("probing.unit.level", "low", "doc", validator=config.one_of("low", "high"),
                        on_change=lambda value: seen.append(value))
    assert v == "high" and config.get("unit.level") == "high"
    # An invalid env value falls back to the default.
    config.load_env({"PROBING_UNIT_LEVEL2": "bogus"})
    assert config.register("probing.unit.level2", "low", "doc", validator=config.one_of("low", "high")) == "low"
    # set: previous value returned, validator normalises, on_change called.
    assert config.set("unit.level", "LOW") == "high"
    assert config.get("probing.unit.level") == "low" and seen == ["low"]
    with pytest.raises(config.ConfigError) as e:
        config.set("unit.level", "mid")
    assert "probing.unit.level" in str(e.value) and "low, high" in str(e.value)
    assert config.get("unit.level") == "low"
    # on_change arities, and ValueError from on_change undoes the write.
    calls = []
    config.register("unit.two", "a", "", on_change=lambda k, v: calls.append((k, v)))
    config.register("unit.three", "a", "", on_change=lambda k, v, p: calls.append((k, v, p)))
    config.set("unit.two", "b")
    config.set("unit.three", "c")
    assert calls == [("probing.unit.two", "b"), ("probing.unit.three", "c", "a")]

    def refuse(value):
        raise ValueError("no way")

    config.register("unit.refuse", "x", "", on_change=refuse)
    with pytest.raises(config.ConfigError):
        config.set("unit.refuse", "y")
    assert config.get("unit.refuse") == "x"
    # A validator returning True/False, and typed values shown as strings.
    config.register("unit.pred", 1.5, "", validator=lambda v: float(v) >= 0)
    with pytest.raises(config.ConfigError):
        config.set("unit.pred", "-1")
    assert config.all()["probing.unit.pred"] == "1.5"
    config.register("unit.flag", True, "")
    assert config.all()["probing.unit.flag"] == "true"
    # Read-only keys, the agent itself may write; bad keys are refused.
    config.register("unit.ro", "1", "", settable=False)
    with pytest.raises(config.ReadOnlyError):
        config.set("unit.ro", "2")
    config.set_internal("unit.ro", "2")
    assert config.get("unit.ro") == "2"
    with pytest.raises(config.InvalidKeyError):
        config.set("probing.Bad Key", "1")
    with pytest.raises(config.InvalidKeyError):
        config.set("probing." + "k" * 200, "1")
    # Only registered keys are written: the store never grows from set().
    with pytest.raises(config.UnknownKeyError) as e:
        config.set("unit.fresh", "v")
    assert "probing.unit.fresh" in str(e.value) and "probing.unit.level" in str(e.value)
    assert "probing.unit.ro" not in str(e.value)  # read-only keys are not offered
    assert not config.exists("unit.fresh")
    config.load_env({"PROBING_UNIT_MIRROR": "m"})
    with pytest.raises(config.ReadOnlyError):
        config.set("unit.mirror", "n")
    assert config.get("unit.mirror") == "m"
    with pytest.raises(config.ConfigError) as e:
        config.set("unit.level", "h" * (config.MAX_VALUE_LEN + 1))
    assert str(config.MAX_VALUE_LEN) in str(e.value) and len(str(e.value)) < 200
    k = dict((d["key"], d) for d in config.keys())
    assert k["probing.unit.ro"]["settable"] is False and k["probing.unit.mirror"]["settable"] is False
    assert config.on_off("YES") == "on" and config.on_off("0") == "off"


def test_core_stacks_capture_in_process():
    ev = threading.Event()

    def nest(n):
        if n == 0:
            ev.wait(10)
            return
        nest(n - 1)

    t = threading.Thread(target=nest, args=(50,), name="unit-nest", daemon=True)
    t.start()
    try:
        import time

        for _ in range(100):
            s = stacks.capture(max_frames=20)
            th = [x for x in s["threads"] if x["name"] == "unit-nest"]
            if th and th[0]["frames"] and th[0]["frames"][0]["function"] == "wait":
                break
            time.sleep(0.01)
        th = th[0]
        assert len(th["frames"]) == 20 and th["frames_truncated"] is True
        assert th["native_id"] == t.native_id
        assert s["threads"][0]["is_main"] is True
        assert stacks.resolve_thread(t.native_id) == t.ident
        assert stacks.resolve_thread(0) == threading.main_thread().ident
        with pytest.raises(stacks.UnknownThread):
            stacks.resolve_thread(424242)
    finally:
        ev.set()
        t.join(5)


def test_core_stacks_lock_wait():
    """A thread entering a held lock says which lock (and an RLock its owner),
    one inside a with statement on a lock says it holds it; a condition
    wait, a sleep and a plain line say nothing."""
    import time

    held, rheld = threading.Lock(), threading.RLock()

    class Box(object):
        def __init__(self):
            self.lock = held

    box = Box()
    ev, stop = threading.Event(), threading.Event()
    held.acquire()

    def owner():
        with rheld:
            stop.wait(30)

    def by_with():
        with box.lock:
            pass

    def by_call():
        rheld.acquire(True, 30)
        rheld.release()

    def sleeper():
        ev.set(); time.sleep(0.2); stop.wait(30)

    other = threading.Lock()

    def idle():
        while not stop.is_set():
            time.sleep(0.01)

    def holder():
        with other:  # held by an outer frame; the innermost one has no with
            idle()

    ts = [threading.Thread(target=f, name="unit-" + f.__name__, daemon=True) for f in (owner, by_with, by_call, sleeper, holder)]
    ts[0].start()
    for _ in range(500):
        if repr(rheld).startswith("<locked"):
            break
        time.sleep(0.01)
    for t in ts[1:]:
        t.start()
    try:
        want = {"unit-by_with": ("box.lock", "lock"), "unit-by_call": ("rheld", "rlock")}
        for _ in range(500):
            got = dict((t["name"], t) for t in stacks.capture()["threads"])
            if all(got.get(n, {}).get("lock_wait") for n in want) and got.get("unit-holder", {}).get("frames", [{}])[0].get("function") == "idle":
                break
            time.sleep(0.01)
        for name, (expr, kind) in want.items():
            w = got[name]["lock_wait"]
            assert w and w["lock"] == expr and w["kind"] == kind and w["locked"] is True, (name, w)
        assert got["unit-by_with"]["lock_wait"]["lock_id"] == id(held)
        assert got["unit-by_call"]["lock_wait"]["owner"] == ts[0].ident
        assert got["unit-owner"]["lock_wait"] is None  # in Event.wait: not a lock's holder it waits for
        # The with statement it is inside says what it holds; a lock taken
        # with acquire() (the main thread's held) is not seen.
        assert [(h["lock"], h["kind"], h["lock_id"]) for h in got["unit-owner"]["locks_held"]] == [("rheld", "rlock", id(rheld))]
        assert got["unit-by_with"]["locks_held"] == [] and got["unit-sleeper"]["locks_held"] == []
        assert [(h["lock"], h["lock_id"]) for h in got["unit-holder"]["locks_held"]] == [("other", id(other))]
        assert got["unit-sleeper"]["lock_wait"] is None
    finally:
        held.release()
        stop.set()
        for t in ts:
            t.join(5)
