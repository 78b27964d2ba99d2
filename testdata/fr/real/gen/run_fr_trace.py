#!/usr/bin/env python3
"""Run torch's own FR analyzer over every dump directory and keep its output.

    /root/devenv/bin/python testdata/fr/real/gen/run_fr_trace.py --out testdata/fr/real \
        [--tabulate-path DIR]

For every scenario directory <S> listed in <out>/manifest.json, and its <S>_pgfix
copy, this runs (with cwd = <out>, so paths in the output are relative):

  python -m torch.distributed.flight_recorder.fr_trace <dir>            -> <dir>.txt
  python gen/fr_trace_sorted.py <dir>                                   -> <dir>.sorted.txt
and, when the default run exits non-zero, the same two with --allow-incomplete-ranks
                                                   -> <dir>.allow_incomplete[.sorted].txt
plus -j (just print entries) on missing_rank and missing_rank_pgfix, and one run
on missing_rank_json (fr_trace cannot read JSON dumps).

Outputs (stdout and stderr together, verbatim) go to <out>/fr_trace_outputs/, and a
description of every run (command, exit code, rank load order) to
<out>/fr_trace_outputs/runs.json, which gen/parse_fr_trace.py reads.

The environment sets PYTHONWARNINGS to hide torch's "Failed to initialize NumPy"
import warning (numpy is not installed in the venv); nothing else is changed.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

MODULE_CMD = ["-m", "torch.distributed.flight_recorder.fr_trace"]
SORTED_CMD = ["gen/fr_trace_sorted.py"]
DERIVED = {
    # directory -> (source directory, ranks to leave out)
    "missing_rank_nodump_pgfix": ("missing_rank_pgfix", [2]),
}


def _ranks_in_walk_order(path):
    ranks = []
    for _, _, files in os.walk(path):
        for f in files:
            m = re.search(r"(\d+)$", f)
            if m:
                ranks.append(int(m.group(1)))
    return ranks


def _run(out, argv, extra_env, outfile, label):
    env = dict(os.environ)
    env["PYTHONWARNINGS"] = "ignore:Failed to initialize NumPy"
    env.update(extra_env)
    p = subprocess.run([sys.executable] + argv, cwd=out, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    with open(os.path.join(out, "fr_trace_outputs", outfile), "wb") as f:
        f.write(p.stdout)
    shown = " ".join(["python"] + argv)
    if extra_env:
        shown = " ".join(f"{k}={v}" for k, v in extra_env.items()) + " " + shown
    print(f"[rc={p.returncode}] {shown} > fr_trace_outputs/{outfile}", flush=True)
    return {"label": label, "command": shown, "cwd": os.path.relpath(out, os.getcwd()),
            "returncode": p.returncode, "output": f"fr_trace_outputs/{outfile}"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--tabulate-path", help="a directory holding the tabulate package, "
                    "used only for one extra -j run (tabulate is not a torch dependency)")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)

    for d, (src, drop) in DERIVED.items():
        dst = os.path.join(out, d)
        if os.path.isdir(dst):
            shutil.rmtree(dst)
        shutil.copytree(os.path.join(out, src), dst)
        for r in drop:
            os.remove(os.path.join(dst, f"nccl_trace_rank_{r}"))

    od = os.path.join(out, "fr_trace_outputs")
    if os.path.isdir(od):
        shutil.rmtree(od)
    os.makedirs(od)

    dirs = []
    for scen in manifest:
        dirs += [(scen, scen, "raw"), (scen, scen + "_pgfix", "pgfix")]
    for d, (src, _) in DERIVED.items():
        dirs.append((d, d, "pgfix_derived"))

    runs = []
    for scen, d, variant in dirs:
        base = {"scenario": scen, "dir": d, "variant": variant,
                "walk_order": _ranks_in_walk_order(os.path.join(out, d))}
        r = _run(out, MODULE_CMD + [d], {}, f"{d}.txt", "default")
        runs.append(dict(base, **r, rank_order="walk"))
        r2 = _run(out, SORTED_CMD + [d], {}, f"{d}.sorted.txt", "default")
        runs.append(dict(base, **r2, rank_order="ascending"))
        if r["returncode"] != 0 or r2["returncode"] != 0:
            flag = ["--allow-incomplete-ranks"]
            r = _run(out, MODULE_CMD + [d] + flag, {}, f"{d}.allow_incomplete.txt",
                     "allow_incomplete")
            runs.append(dict(base, **r, rank_order="walk"))
            r = _run(out, SORTED_CMD + [d] + flag, {}, f"{d}.allow_incomplete.sorted.txt",
                     "allow_incomplete")
            runs.append(dict(base, **r, rank_order="ascending"))

    # -j (just print entries)
    for d, variant in (("missing_rank", "raw"), ("missing_rank_pgfix", "pgfix")):
        base = {"scenario": "missing_rank", "dir": d, "variant": variant,
                "walk_order": _ranks_in_walk_order(os.path.join(out, d))}
        r = _run(out, MODULE_CMD + [d, "-j"], {}, f"{d}.j.txt", "just_print_entries")
        runs.append(dict(base, **r, rank_order="walk"))
    if args.tabulate_path:
        d = "missing_rank_pgfix"
        base = {"scenario": "missing_rank", "dir": d, "variant": "pgfix",
                "walk_order": _ranks_in_walk_order(os.path.join(out, d))}
        r = _run(out, MODULE_CMD + [d, "-j"], {"PYTHONPATH": args.tabulate_path},
                 f"{d}.j.tabulate.txt", "just_print_entries")
        r["command"] = r["command"].replace(args.tabulate_path, "<dir with tabulate>")
        runs.append(dict(base, **r, rank_order="walk"))

    # JSON dumps: fr_trace only loads pickles
    for scen in manifest:
        d = scen + "_json"
        if os.path.isdir(os.path.join(out, d)):
            base = {"scenario": scen, "dir": d, "variant": "json",
                    "walk_order": _ranks_in_walk_order(os.path.join(out, d))}
            r = _run(out, MODULE_CMD + [d], {}, f"{d}.txt", "default")
            runs.append(dict(base, **r, rank_order="walk"))
            break   # one is enough to show it

    with open(os.path.join(od, "runs.json"), "w") as f:
        json.dump(runs, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
