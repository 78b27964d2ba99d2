"""fr_trace run on a scenario's dumps, and its transcript parsed: the
parity corpus's expected side (gen_corpus.py)."""
import ast
import copy
import json
import logging
import os
import re

from corpus_job import PREFIX


def import_fr():
    """Import torch's fr_trace pieces; returns a namespace."""
    from torch.distributed.flight_recorder.components import builder, config_manager, loader, utils
    # torch 2.15: utils.py imports tabulate without a fallback (builder.py has
    # a no-op one), so without the optional `tabulate` package the P2P
    # Match/MISMATCH table raises NameError.  For a deterministic corpus we
    # always give utils builder's own no-op fallback (`return data`), so the
    # table is logged as the Python repr of the rows (lists of Op / None).
    utils.tabulate = _noop_tabulate
    return builder, config_manager, loader, utils


def _noop_tabulate(data, headers=None):
    return data


class Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))
        self.lines = []

    def emit(self, record):
        self.lines.append(self.format(record))


def run_build_db(details, cli_args):
    """Run fr_trace's build_db on `details` (already in rank order)."""
    builder, config_manager, _loader, _utils = import_fr()
    args = config_manager.JobConfig().parse_args(list(cli_args))
    version = str(next(iter(details.values()))["version"]) if details else ""
    log = logging.getLogger("Flight Recorder")
    cap = Capture()
    saved = log.handlers[:]
    for h in saved:
        log.removeHandler(h)
    log.addHandler(cap)
    abort = None
    db = None
    try:
        db = builder.build_db(copy.deepcopy(details), args, version)
    except Exception as e:  # noqa: BLE001 - any exception is fr_trace's verdict
        abort = f"{type(e).__name__}: {e}"
    finally:
        log.removeHandler(cap)
        for h in saved:
            log.addHandler(h)
    text = "\n".join(cap.lines)
    if text:
        text += "\n"
    if abort is not None:
        text += f"ABORT: {abort}\n"
    return text, abort, db


def load_details(sdir, ranks, fmt):
    """details as fr_trace's loader builds them, in ascending rank order."""
    _b, _c, loader, _u = import_fr()
    details = {}
    for r in sorted(ranks):
        fname = f"{PREFIX}{r}"
        path = os.path.join(sdir, fname)
        if fmt == "pickle":
            details[fname] = loader.read_dump(PREFIX, path)
        else:  # the debug-server path: JSON replies, entries defaulted to []
            with open(path) as f:
                d = json.load(f)
            details[fname] = {"host_name": f"host_rank{r}", "rank": r,
                              "entries": d.get("entries", []), "version": d["version"],
                              "pg_config": d["pg_config"]}
    return details


# --------------------------------------------------------------------------
# Transcript parsing
# --------------------------------------------------------------------------

HEADERS = [
    ("MISSING_RANKS", re.compile(r"^Not all ranks joining collective, sequence number: (.*)$")),
    ("ALLTOALL_IO_MISMATCH", re.compile(r"^Input/output mismatch in the collective sequence number: (.*)$")),
    ("ERRORS", re.compile(r"^Collective sequence number: (.*) has errors$")),
    ("UNDECIDED_MISSING_DUMP", re.compile(r"^We cannot decide what's wrong with this collective entry because we missed FR dumps from ranks \((.*)\) so")),
    ("NO_ERRORS_FOUND", re.compile(r"^No errors found for this collective entry")),
    ("P2P_MISMATCH", re.compile(r"^MISMATCH\s*$")),
    ("P2P_MATCH", re.compile(r"^Match\s*$")),
    ("TOO_MANY_MISMATCHES", re.compile(r"^Too many mismatches for process_group (.*): (.*) aborting$")),
    ("NO_COALESCED_END", re.compile(r"^Rank (\d+) does not have a coalesced end\.$")),
    ("EMPTY_OP_LIST", re.compile(r"^Rank (\d+) has an empty op list\.$")),
    ("UNRECOGNIZED_BACKEND", re.compile(r"^unrecognized comm library '(.*)' in profiling name '(.*)'$")),
    ("ABORT", re.compile(r"^ABORT: (.*)$")),
]
DETAIL_KINDS = {"MISSING_RANKS", "ALLTOALL_IO_MISMATCH", "ERRORS"}
CULPRIT = re.compile(r"(?:^|, )Culprit rank (-?\d+); Error type: ([A-Z_]+)")


def lit(s):
    s = s.strip()
    if s == "set()":
        return []
    try:
        v = ast.literal_eval(s)
    except (ValueError, SyntaxError):
        return s
    if isinstance(v, (set, frozenset)):
        return sorted(v)
    return v


def seq_value(s):
    return int(s) if re.fullmatch(r"-?\d+", s) else s


def parse_errors(msg):
    """'Culprit rank 1; Error type: X, detail, Culprit rank 2; ...' ->
    [{rank, type, detail}], sorted by rank (fr_trace's order is set order)."""
    ms = list(CULPRIT.finditer(msg))
    out = []
    for i, m in enumerate(ms):
        end = ms[i + 1].start() if i + 1 < len(ms) else len(msg)
        rest = msg[m.end():end]
        detail = rest[2:] if rest.startswith(", ") else (rest or None)
        out.append({"rank": int(m.group(1)), "type": m.group(2), "detail": detail or None})
    out.sort(key=lambda e: (e["rank"], e["type"], e["detail"] or ""))
    return out


def new_block(kind, header):
    return {"kind": kind, "header": header, "pg_name": None, "pg_desc": None,
            "collective_seq_id": None, "profiling_name": None, "record_id": None,
            "missing_ranks": None, "culprit_ranks": None, "error_types": None,
            "total_input_numel": None, "total_output_numel": None,
            # extras (not needed for the headline comparison)
            "input_sizes": None, "output_sizes": None, "world_size": None,
            "expected_ranks": None, "collective_state": None, "errors": None,
            "stack_trace": None, "table": None, "rank": None}


def parse_transcript(text):
    blocks = []
    cur = None
    in_stack = False
    for raw in text.split("\n"):
        line = raw.rstrip("\n")
        kind = None
        for k, rx in HEADERS:
            m = rx.match(line)
            if m:
                kind = k
                break
        if kind:
            in_stack = False
            b = new_block(kind, line.rstrip())
            if kind in DETAIL_KINDS:
                b["collective_seq_id"] = seq_value(m.group(1))
            elif kind == "UNDECIDED_MISSING_DUMP":
                b["missing_ranks"] = lit(m.group(1))
            elif kind == "TOO_MANY_MISMATCHES":
                b["pg_desc"] = m.group(2)
            elif kind in ("NO_COALESCED_END", "EMPTY_OP_LIST"):
                b["rank"] = int(m.group(1))
            elif kind == "UNRECOGNIZED_BACKEND":
                b["profiling_name"] = m.group(2)
            elif kind in ("P2P_MISMATCH", "P2P_MATCH"):
                b["table"] = []
            blocks.append(b)
            cur = b
            continue
        if cur is None:
            if line.strip():
                raise ValueError(f"unparsed transcript line: {line!r}")
            continue
        if cur["kind"] in ("P2P_MISMATCH", "P2P_MATCH"):
            if line.strip():
                cur["table"].append(line)
            continue
        if cur["kind"] not in DETAIL_KINDS:
            if line.strip():
                raise ValueError(f"unexpected line after {cur['kind']}: {line!r}")
            continue
        if in_stack:
            if line.strip():
                cur["stack_trace"].append(line.strip())
            continue
        key, sep, val = line.partition(": ")
        if not sep and line.startswith("collective stack trace:"):
            key, val = "collective stack trace", ""
        if key == "internal record id":
            cur["record_id"] = seq_value(val)
        elif key == "group info":
            name, s, desc = val.partition(":")
            cur["pg_name"] = name
            cur["pg_desc"] = desc if s else "undefined"
        elif key == "collective":
            cur["profiling_name"] = val
        elif key == "missing ranks":
            cur["missing_ranks"] = lit(val)
        elif key == "total input numel":
            cur["total_input_numel"] = int(val)
        elif key == "total output numel":
            cur["total_output_numel"] = int(val)
        elif key == "input sizes":
            cur["input_sizes"] = lit(val)
        elif key == "output sizes":
            cur["output_sizes"] = lit(val)
        elif key == "world size":
            cur["world_size"] = int(val)
        elif key == "expected ranks":
            cur["expected_ranks"] = lit(val)
        elif key == "collective state":
            cur["collective_state"] = val
        elif key == "error msg":
            errs = parse_errors(val)
            cur["errors"] = errs
            cur["culprit_ranks"] = [e["rank"] for e in errs]
            cur["error_types"] = [e["type"] for e in errs]
        elif key == "collective stack trace":
            in_stack = True
            cur["stack_trace"] = []
            if val.strip():
                cur["stack_trace"].append(val.strip())
        elif line.strip():
            raise ValueError(f"unexpected detail line: {line!r}")
    return blocks


def summarize_db(db):
    if db is None:
        return None, None
    out = []
    for c in db.collectives:
        out.append({
            "id": c.id,
            "group_id": c.group_id,
            "pg_desc": c.pg_desc,
            "pass_check": c.pass_check,
            "collective_seq_id": c.collective_seq_id,
            "p2p_seq_id": c.p2p_seq_id,
            "record_id": c.record_id,
            "collective_name": c.collective_name,
            "input_sizes": c.input_sizes,
            "output_sizes": c.output_sizes,
            "expected_ranks": sorted(c.expected_ranks),
            "collective_state": c.collective_state,
            "input_numel": c.input_numel,
            "output_numel": c.output_numel,
            "missing_ranks": sorted(c.missing_ranks) if c.missing_ranks else None,
            "mismatch_ranks": sorted(c.mismatch_collectives) if c.mismatch_collectives else None,
        })
    n = len(out)
    if n > 40:
        out = out[:5] + out[-5:]
    return n, out


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------
