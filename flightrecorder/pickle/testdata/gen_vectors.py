#!/usr/bin/env python3
"""Writes vectors.json: CPython pickles of protocols 2-5 with the value each
must decode to. Run from this directory: python3 gen_vectors.py

The expected value is tagged JSON so that tuples, sets, bytes and big ints
survive: {"t": kind, "v": ...}.
"""
import base64
import collections
import json
import pickle


def tag(x):
    if x is None:
        return {"t": "None"}
    if isinstance(x, bool):
        return {"t": "bool", "v": x}
    if isinstance(x, int):
        if -(2**63) <= x < 2**63:
            return {"t": "int", "v": str(x)}
        return {"t": "bigint", "v": str(x)}
    if isinstance(x, float):
        return {"t": "float", "v": repr(x)}
    if isinstance(x, str):
        return {"t": "str", "v": x}
    if isinstance(x, bytes):
        return {"t": "bytes", "v": base64.b64encode(x).decode()}
    if isinstance(x, list):
        return {"t": "list", "v": [tag(i) for i in x]}
    if isinstance(x, tuple):
        return {"t": "tuple", "v": [tag(i) for i in x]}
    if isinstance(x, (set, frozenset)):
        return {"t": "set", "v": sorted((tag(i) for i in x), key=json.dumps)}
    if isinstance(x, dict):
        return {"t": "dict", "v": [[tag(k), tag(v)] for k, v in x.items()]}
    raise TypeError(type(x))


shared_frame = {"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 2950}
entry = {
    "frames": [shared_frame, {"name": "train_step", "filename": "train.py", "line": 88}],
    "record_id": 941, "pg_id": 0, "process_group": ("0", "default_pg"),
    "collective_seq_id": 183, "p2p_seq_id": 0, "op_id": 190,
    "profiling_name": "nccl:all_reduce", "time_created_ns": 1767225600123456789,
    "duration_ms": 1.25, "input_sizes": [[4096, 1024]], "input_dtypes": ["BFloat16"],
    "output_sizes": [[4096, 1024]], "output_dtypes": ["BFloat16"], "state": "started",
    "time_discovered_started_ns": 1767225600124000000, "time_discovered_completed_ns": None,
    "retired": False, "timeout_ms": 600000, "is_p2p": False,
}
cases = {
    "scalars": [None, True, False, 0, 1, 255, 256, 65535, 65536, -1, -129, 2**31 - 1, -(2**31),
                2**31, 2**63 - 1, -(2**63), 2**64, -(2**70), 0.5, -1e300, float("inf"), "", "héllo ✓"],
    "bytes": [b"", b"\x00\xff", b"x" * 300],
    "containers": {"a": [1, [2, [3, []]]], "t": (1,), "t2": (1, 2), "t3": (1, 2, 3), "t4": (1, 2, 3, 4), "e": (),
                   "d": {}, "s": {1, 2}, "fs": frozenset({"x"}), (1, "k"): "tuple key", 7: "int key"},
    "shared": [shared_frame, shared_frame, [shared_frame]],
    "dump": {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
             "comm_lib_version": "2.27.5",
             "pg_status": {"0": {"last_enqueued_collective": 183, "last_started_collective": 183,
                                 "last_completed_collective": 182}},
             "entries": [entry, dict(entry, record_id=942, state="scheduled")]},
    "ordered": collections.OrderedDict([("b", 1), ("a", 2)]),
    "long_string": "x" * 300,
    "many_memo": [str(i) for i in range(300)] * 2,
}
vectors = []
for name, value in cases.items():
    for proto in (2, 3, 4, 5):
        if name == "bytes" and proto == 2:
            continue  # protocol 2 pickles bytes through _codecs.encode, which is refused
        data = pickle.dumps(value, protocol=proto)
        expect = value
        if isinstance(value, collections.OrderedDict):
            expect = dict(value)
        vectors.append({"name": f"{name}/p{proto}", "pickle": base64.b64encode(data).decode(), "expect": tag(expect)})
with open("vectors.json", "w") as f:
    json.dump(vectors, f, indent=0)
print(f"wrote {len(vectors)} vectors")
