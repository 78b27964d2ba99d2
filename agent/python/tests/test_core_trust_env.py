"""The environment the agent reports (/apis/overview, every transport) is an
allow-list of launcher and framework variables; names with a secret word
are withheld even from allow-listed families, and the reply counts, never
names, what it withheld. Config mirroring of PROBING_* drops the same names."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import core_helpers as H  # noqa: E402

sys.path.insert(0, H.AGENT_PY)
from probing_mcp_agent import envfilter  # noqa: E402

TOKEN = "tok-env-42"
AUTH = {"Authorization": "Bearer " + TOKEN}
# What the attack found leaking through /apis/overview, plus allow-listed
# families whose name carries a secret word.
SECRETS = dict(DATABASE_URL="postgres://u:pw-db-secret@h/db", OPENAI_KEY="sk-openai-secret", GH_PAT="ghp_patsecret",
               WANDB_KEY="wandb-secret", PRIVATE_KEY_PEM="-----BEGIN PRIVATE KEY-----pem-secret",
               NCCL_IB_AUTH_TOKEN="nccl-secret", PROBING_WANDB_KEY="probing-secret",
               TORCH_NCCL_SESSION_COOKIE="torch-secret")
LAUNCHER = dict(RANK="2", WORLD_SIZE="4", LOCAL_RANK="2", LOCAL_WORLD_SIZE="4", GROUP_RANK="0", MASTER_ADDR="10.1.2.3",
                MASTER_PORT="29500", TORCHELASTIC_RUN_ID="run-1", SLURM_JOB_ID="777", SLURM_PROCID="2",
                OMPI_COMM_WORLD_RANK="2", PMI_RANK="2", CUDA_VISIBLE_DEVICES="2", NCCL_SOCKET_IFNAME="eth0",
                TORCH_NCCL_ASYNC_ERROR_HANDLING="1", OMP_NUM_THREADS="4", PROBING_FOO_BAR="baz")


@pytest.fixture(scope="module")
def child():
    t = H.Env()
    env = dict(SECRETS, **LAUNCHER)
    p, sock = H.spawn_agent(t, PROBING_SERVER_ADDR="127.0.0.1:0", PROBING_AUTH_TOKEN=TOKEN, PROBING_ALLOW_EVAL="1",
                            **env)
    try:
        host, port = t.identity(p.pid)["addr"].rsplit(":", 1)
        yield sock, (host, int(port))
    finally:
        H.stop(p)
        t.cleanup()


def test_trust_overview_env_is_an_allow_list(child):
    sock, tcp = child
    for target, headers in ((sock, {}), (tcp, AUTH)):
        o = H.get(target, "/apis/overview", headers=headers).json()
        env = o["env"]
        for k, v in LAUNCHER.items():
            assert env.get(k) == v, k
        for k in list(SECRETS) + ["PATH", "HOME", "PROBING_AUTH_TOKEN"]:
            assert k not in env, k
        text = json.dumps(o)
        for v in list(SECRETS.values()) + [TOKEN]:
            assert v not in text, v
        # Every variable is either reported or counted, and none is named.
        n = H.request(sock, "POST", "/apis/pythonext/eval", "import os\nlen(os.environ)").json()
        assert o["env_withheld"] == int(n["output"]) - len(env)
        assert o["env_withheld"] >= len(SECRETS)
    # The config store mirrors PROBING_* with the same rule.
    for path in ("/config", "/config/_keys", "/apis/identity"):
        text = H.get(sock, path).text
        for v in list(SECRETS.values()) + [TOKEN]:
            assert v not in text, (path, v)
    assert H.get(sock, "/config/wandb.key").status == 404
    assert H.get(sock, "/config/foo.bar").text == "baz"


def test_core_envfilter_allow_list():
    env = {"DATABASE_URL": "postgres://u:pw@h/db", "OPENAI_KEY": "k", "GH_PAT": "p", "WANDB_KEY": "w",
           "PRIVATE_KEY_PEM": "-----BEGIN", "AWS_SECRET_ACCESS_KEY": "a", "HOME": "/root", "PATH": "/bin",
           "NCCL_IB_AUTH_TOKEN": "t", "PROBING_AUTH_USERNAME": "ops", "PROBING_DB_PASSWORD": "x",
           "TORCH_NCCL_SESSION": "s", "SLURM_JOB_PASS": "x",
           "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "GROUP_RANK": "0", "ROLE_NAME": "trainer",
           "ROLE_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1", "TORCHELASTIC_RUN_ID": "r",
           "SLURM_JOB_ID": "7", "SLURM_PROCID": "1", "OMPI_COMM_WORLD_RANK": "1", "PMI_RANK": "1",
           "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
           "TORCH_FR_BUFFER_SIZE": "2000", "OMP_NUM_THREADS": "4", "PROBING_DATA_DIR": "/d"}
    out, withheld = envfilter.report(env)
    assert sorted(out) == ["CUDA_VISIBLE_DEVICES", "GROUP_RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                           "NCCL_DEBUG", "OMPI_COMM_WORLD_RANK", "OMP_NUM_THREADS", "PMI_RANK", "PROBING_DATA_DIR",
                           "RANK", "ROLE_NAME", "ROLE_RANK", "SLURM_JOB_ID", "SLURM_PROCID", "TORCHELASTIC_RUN_ID",
                           "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "WORLD_SIZE"]
    assert withheld == len(env) - len(out) == 13
    assert envfilter.secret("my_api_key") and not envfilter.secret("NCCL_DEBUG")
