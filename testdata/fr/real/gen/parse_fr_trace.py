#!/usr/bin/env python3
"""Turn the saved fr_trace outputs into expected.json.

    python3 testdata/fr/real/gen/parse_fr_trace.py --out testdata/fr/real

Reads <out>/fr_trace_outputs/runs.json (written by run_fr_trace.py), parses each
saved output, and writes <out>/expected.json: one object per fr_trace run with the
ordered list of problems ("blocks") fr_trace reported.  Standard library only.

Block kinds:
  MISSING_RANKS             "Not all ranks joining collective, sequence number: N"
  <MatchState name>         "Collective sequence number: N has errors"; kind is the
                            error type of the first "Culprit rank" in the error msg
                            (all of them are listed in "errors")
  ALLTOALL_IO_MISMATCH      "Input/output mismatch in the collective sequence number: N"
  UNDECIDED                 "We cannot decide what's wrong with this collective entry ..."
  NO_ERRORS_FOUND           "No errors found for this collective entry, ..."
  P2P_MISMATCH              "MISMATCH " (coalesced P2P table)
  ABORT                     "Too many mismatches for process_group ..." or an uncaught
                            exception (header = the exception line of the traceback)
"""

import argparse
import ast
import json
import os
import re

HDR_MISSING = re.compile(r"^Not all ranks joining collective, sequence number: (\S+)$")
HDR_ERRORS = re.compile(r"^Collective sequence number: (\S+) has errors$")
HDR_A2A = re.compile(r"^Input/output mismatch in the collective sequence number: (\S+)$")
UNDECIDED = re.compile(r"^We cannot decide what's wrong with this collective entry "
                       r"because we missed FR dumps from ranks \((.*)\) so")
NO_ERRORS = "No errors found for this collective entry"
TOO_MANY = re.compile(r"^Too many mismatches for process_group (.*): (.*) aborting$")
CULPRIT = re.compile(r"Culprit rank (\d+); Error type: ([A-Z_]+)")
NOTE_PATTERNS = (
    re.compile(r"^tabulate is not installed"),
    re.compile(r"^Rank \d+ does not have a coalesced end\.$"),
    re.compile(r"^Rank \d+ has an empty op list\.$"),
    re.compile(r"^unrecognized comm library"),
)


def _ranks(text):
    text = text.strip()
    if text in ("", "set()"):
        return []
    return sorted(int(x) for x in ast.literal_eval(text))


def _seq(text):
    try:
        return int(text)
    except ValueError:
        return text


def _new_block(kind, header, seq=None):
    return {"pg_name": None, "pg_desc": None, "kind": kind, "collective_seq_id": seq,
            "profiling_name": None, "missing_ranks": [], "culprit_ranks": [],
            "header": header}


def parse_output(text):
    lines = text.splitlines()
    blocks, notes = [], []
    cur = None
    i = 0
    if any(ln.startswith("Traceback (most recent call last):") for ln in lines):
        # the exception line is the last non-empty line
        last = [ln for ln in lines if ln.strip()][-1]
        tb_block = _new_block("ABORT", last)
        m = re.search(r"Missing dump files from ranks (\{.*\})", last)
        if m:
            tb_block["missing_dump_ranks"] = _ranks(m.group(1))
    else:
        tb_block = None
    while i < len(lines):
        ln = lines[i]
        m_missing, m_err, m_a2a = HDR_MISSING.match(ln), HDR_ERRORS.match(ln), HDR_A2A.match(ln)
        if m_missing or m_err or m_a2a:
            if m_missing:
                cur = _new_block("MISSING_RANKS", ln, _seq(m_missing.group(1)))
            elif m_err:
                cur = _new_block(None, ln, _seq(m_err.group(1)))
            else:
                cur = _new_block("ALLTOALL_IO_MISMATCH", ln, _seq(m_a2a.group(1)))
                cur["culprit_ranks"] = None  # fr_trace names no culprit in the log
            blocks.append(cur)
            i += 1
            continue
        if UNDECIDED.match(ln):
            b = _new_block("UNDECIDED", ln)
            b["missing_dump_ranks"] = _ranks(UNDECIDED.match(ln).group(1))
            blocks.append(b)
            cur = None
        elif ln.startswith(NO_ERRORS):
            blocks.append(_new_block("NO_ERRORS_FOUND", ln))
            cur = None
        elif ln.startswith("MISMATCH"):
            blocks.append(_new_block("P2P_MISMATCH", ln.rstrip()))
            cur = None
        elif TOO_MANY.match(ln):
            m = TOO_MANY.match(ln)
            b = _new_block("ABORT", ln)
            b["pg_guid"], b["pg_desc"] = m.group(1), m.group(2)
            blocks.append(b)
            cur = None
        elif any(p.match(ln) for p in NOTE_PATTERNS):
            notes.append(ln)
        elif cur is not None:
            key, sep, val = ln.partition(": ")
            if ln.startswith("collective stack trace:"):
                frames = []
                j = i + 1
                while j < len(lines) and " at " in lines[j] and not lines[j].startswith(
                        ("Not all", "Collective sequence", "Input/output", "We cannot",
                         "No errors", "Too many")):
                    frames.append(lines[j].strip())
                    j += 1
                cur["stack"] = frames
                i = j
                cur = None
                continue
            if not sep:
                pass
            elif key == "internal record id":
                cur["record_id"] = _seq(val)
            elif key == "group info":
                name, colon, desc = val.partition(":")
                cur["pg_name"] = name
                cur["pg_desc"] = desc if colon else "undefined"
            elif key == "collective":
                cur["profiling_name"] = val
            elif key == "missing ranks":
                cur["missing_ranks"] = _ranks(val)
            elif key == "total input numel":
                cur["total_input_numel"] = int(val)
            elif key == "total output numel":
                cur["total_output_numel"] = int(val)
            elif key == "input sizes":
                cur["input_sizes"] = ast.literal_eval(val)
            elif key == "output sizes":
                cur["output_sizes"] = ast.literal_eval(val)
            elif key == "world size":
                cur["world_size"] = int(val)
            elif key == "expected ranks":
                cur["expected_ranks"] = _ranks(val)
            elif key == "collective state":
                cur["collective_state"] = val
            elif key == "error msg":
                errs = [{"culprit_rank": int(r), "error_type": t} for r, t in CULPRIT.findall(val)]
                cur["error_msg"] = val
                cur["errors"] = errs
                cur["culprit_ranks"] = sorted({e["culprit_rank"] for e in errs})
                if errs and cur["kind"] is None:
                    cur["kind"] = errs[0]["error_type"]
        i += 1
    if tb_block is not None:
        blocks.append(tb_block)
    return blocks, notes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    with open(os.path.join(out, "fr_trace_outputs", "runs.json")) as f:
        runs = json.load(f)
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    torch_version = None
    fr_version = None
    for scen in manifest.values():
        for rr in scen["ranks"].values():
            torch_version = torch_version or rr.get("torch_version")
            fr_version = fr_version or rr.get("fr_version")
    results = []
    for run in runs:
        with open(os.path.join(out, run["output"]), encoding="utf-8") as f:
            text = f.read()
        blocks, notes = parse_output(text)
        ranks = sorted(
            int(m.group(1)) for n in os.listdir(os.path.join(out, run["dir"]))
            if (m := re.fullmatch(r"nccl_trace_rank_(\d+)", n)))
        results.append({
            "scenario": run["scenario"],
            "dir": run["dir"],
            "variant": run["variant"],
            "ranks": ranks,
            "world_size": manifest.get(run["scenario"], {}).get("world_size", len(ranks)),
            "torch_version": torch_version,
            "fr_version": fr_version,
            "fr_trace_command": run["command"],
            "cwd": "testdata/fr/real",
            "mode": run["label"],
            "rank_order": run["rank_order"],
            "load_order": run["walk_order"] if run["rank_order"] == "walk" else ranks,
            "returncode": run["returncode"],
            "output": run["output"],
            "notes": notes,
            "blocks": blocks,
        })
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    for r in results:
        heads = "; ".join(f"{b['kind']}: {b['header'][:90]}" for b in r["blocks"]) or "(no problems)"
        print(f"{r['dir']:<34} {r['mode']:<18} {r['rank_order']:<9} rc={r['returncode']} {heads}")


if __name__ == "__main__":
    main()
