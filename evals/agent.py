"""A scripted agent harness: what an assistant's investigation of each
corpus case costs when it follows probing-mcp's own guidance.

No model is in the loop. policy() is a deterministic stand-in for one: it
reads what the server tells every client (initialize's instructions,
tools/list, the diagnose_hang prompt) and the answers it gets, and calls
the tools in the order they say. It never sees the truth. After each call
the harness checks, against the truth, whether the answers so far name
the root cause, and what reading them cost.

Reads, and how they are counted:
  setup     tools/list, prompts/list and prompts/get diagnose_hang: three
            reads every session makes once, whatever the case; their
            characters (the instructions, the tools' names, descriptions
            and input schemas, the prompts' list, the prompt's text) are
            reported apart, as "setup"
  calls     tools/call: the investigation. "Calls" below counts these only.
Characters are Python str lengths (Unicode code points) of text content.
"Read" is the text content of each tools/call answer: what a model reads.
The structured content (JSON) duplicates it for programs; "returned" is
text + JSON, what crossed the wire.

Root cause by call k: the first k at which the answers of calls 1..k
(cumulative) state every part the truth has:
  culprit   the latest diagnose_hang verdict's top hypothesis names exactly
            the truth's culprit ranks
  category  ... and the truth's category
  line      its `where` is the truth's file and function; or, once the
            culprit is named, a get_stacks answer shows that rank's stack
            with the truth's function in it, in its text
  resource  every string of the truth's resource (the FIFO, the child's
            command, the lock file, the deadlocked threads) appears in the
            text read so far
Target (docs/EVALS.md): the root cause within 5 calls and 15,000
characters read, on every case.

Consistency (consistency.py): each diagnose_hang answer's parts checked
against each other, and the verdict against the later answers.

  python3 evals/score.py --agent --torch-free
  python3 evals/score.py --agent --python-torch /venv/bin/python --only ddp
  python3 evals/score.py --agent --torch-free --check --baseline evals/agent_baseline.json
  python3 evals/score.py --agent --torch-free --write-baseline evals/agent_baseline.json
  make eval-agent
"""
import datetime
import json
import os
import re
import statistics
import sys
import time

import consistency
import corpus
from corpus import parse_rankset

NOT_HUNG = ("healthy", "progressing", "slow", "paused")  # the prompt: "say so and stop looking for a hang"
MAX_FOLLOW = 3       # calls after the verdict: "follow at most a few"
MAX_CALLS = 8        # a bound on a session, whatever the policy says
REPEAT_GAP_S = 2.0   # "twice, a few seconds apart"
TARGET_CALLS = 5
TARGET_CHARS = 15000
COLLECTIVE_CATEGORIES = ("missing_from_collective", "collective_mismatch", "all_in_collective", "dead_rank")


# ------------------------------------------------------------------- policy

class View(object):
    """What the policy may see: the server's guidance and the answers."""

    def __init__(self, instructions, prompt, tools, stall_seconds):
        self.instructions, self.prompt, self.stall_seconds = instructions, prompt, stall_seconds
        self.tools = tools   # name -> {"required": [...], "read_only": bool}
        self.calls = []      # [{"tool", "args", "text", "structured", ...}]

    def verdict(self):
        for c in reversed(self.calls):
            if c["tool"] == "diagnose_hang" and isinstance(c["structured"], dict):
                return c["structured"]
        return None

    def made(self, tool, args):
        return sum(1 for c in self.calls if c["tool"] == tool and c["args"] == args)


def policy(v):
    """The next call (tool, args), or None when the guidance is done.

    1. The tool the instructions say to call first (diagnose_hang), with
       the corpus's stall_seconds.
    2. Its state: healthy, progressing, slow or paused is no hang: stop
       (the prompt's step 1).
    3. Confirm (the prompt's step 2): the calls the top hypothesis's
       `confirm` names, as often as it says ("twice"). A verdict below
       high confidence, or with data-quality notes, also gets the calls the
       answers' text names elsewhere. Job text (between the quote marks)
       is never read for calls.
    4. Guidance that names no call: get_stacks on the culprit ranks, then,
       where the verdict points at collectives, snapshot_flight_recorder
       (a live job) or query over the collective rings (a dead one).
    At most MAX_FOLLOW calls after the verdict.
    """
    if not v.calls:
        first = first_tool(v.instructions, v.prompt, v.tools)
        return (first, {"stall_seconds": v.stall_seconds} if first == "diagnose_hang" else {}) if first else None
    rep = v.verdict()
    if rep is None or rep.get("state") in NOT_HUNG:
        return None
    top = (rep.get("hypotheses") or [{}])[0]
    wanted = suggested(top.get("confirm", ""), v.tools)
    if top.get("confidence") != "high" or rep.get("data_quality"):
        for c in v.calls:
            wanted += suggested(c["text"], v.tools)
    if not wanted:
        wanted = fallback(rep, top, v.tools)
    if len(v.calls) - 1 >= MAX_FOLLOW:
        return None
    for tool, args, times in wanted:
        if v.made(tool, args) < times:
            return tool, args
    return None


def first_tool(instructions, prompt, tools):
    """The tool the server says to call first."""
    for text in (instructions, prompt):
        m = re.search(r"call (?:the )?`?(\w+)`?(?: tool)? first", text, re.I)
        if m and m.group(1) in tools:
            return m.group(1)
    return None


def suggested(text, tools):
    """The tool calls a text names, in order: [(tool, args, times)]. A call
    is a tool's name, optionally followed by its JSON arguments; "twice"
    after it asks for two. Calls that lack a required argument, write
    tools and job text (quoted) are left out."""
    text = re.sub(r"⟦[^⟧]*⟧", "''", text)
    names = "|".join(sorted((re.escape(t) for t in tools), key=len, reverse=True))
    out = []
    for m in re.finditer(r"\b(%s)\b(?:\s*(\{[^{}]*\}))?([^;.\n]*)" % names, text):
        tool, raw, rest = m.group(1), m.group(2), m.group(3)
        try:
            args = json.loads(raw) if raw else {}
        except ValueError:
            continue
        spec = tools[tool]
        if not spec["read_only"] or any(k not in args for k in spec["required"]) or tool == "diagnose_hang" and not args:
            continue
        call = (tool, args, 2 if re.match(r"\s*(?:again, )?twice\b", rest) else 1)
        if all(c[:2] != call[:2] for c in out):
            out.append(call)
    return out


def fallback(rep, top, tools):
    culprits = top.get("culprit_ranks", "")
    out = []
    if culprits and rep.get("state") != "dead" and "get_stacks" in tools:
        out.append(("get_stacks", {"ranks": culprits}, 1))
    if top.get("category") in COLLECTIVE_CATEGORIES or re.search(r"#\d+", json.dumps(top)):
        if rep.get("state") == "dead" and "query" in tools and culprits:
            ranks = ",".join(str(r) for r in sorted(parse_rankset(culprits)))
            out.append(("query", {"sql": "SELECT rank, op, group_seq, participate_ranks, duration_ms FROM python.comm_collective "
                                         "WHERE rank IN (%s) ORDER BY timestamp DESC LIMIT 8" % ranks}, 1))
        elif "snapshot_flight_recorder" in tools:
            out.append(("snapshot_flight_recorder", {}, 1))
    return out


# ------------------------------------------------------------ root cause

def found_parts(calls, truth):
    """Which parts of the truth's root cause calls (so far) state:
    {part: bool}; only the parts the truth has."""
    rep = None
    for c in calls:
        if c["tool"] == "diagnose_hang" and isinstance(c["structured"], dict):
            rep = c["structured"]
    top = ((rep or {}).get("hypotheses") or [{}])[0]
    try:
        culprit = rep is not None and parse_rankset(top.get("culprit_ranks", "")) == parse_rankset(truth.get("culprits", ""))
    except ValueError:
        culprit = False
    parts = {"culprit": culprit, "category": rep is not None and top.get("category") == truth.get("category")}
    if truth.get("function"):
        w = top.get("where") or {}
        parts["line"] = os.path.basename(w.get("file") or "") == truth["file"] and w.get("function") == truth["function"]
        if culprit and not parts["line"]:
            parts["line"] = any(_stack_shows(c, truth) for c in calls)
    res = truth.get("resource")
    if res:
        read = "\n".join(c["text"] for c in calls)
        parts["resource"] = all(s in read for s in res["text"])
    return parts


def _stack_shows(call, truth):
    if call["tool"] != "get_stacks" or not isinstance(call["structured"], dict):
        return False
    culprits = parse_rankset(truth.get("culprits", ""))
    for g in call["structured"].get("groups") or []:
        try:
            ranks = parse_rankset(g.get("ranks", ""))
        except ValueError:
            continue
        if ranks & culprits and any(os.path.basename(f.get("file", "")) == truth["file"] and f.get("function") == truth["function"]
                                    for f in g.get("frames") or []):
            return "⟦%s⟧" % truth["function"] in call["text"]
    return False


# ---------------------------------------------------------------- session

def _chars(obj):
    return len(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))


def investigate(binary, job, stall_seconds):
    """One MCP session over stdio on job's dirs, driven by policy(). Returns
    the setup's measures and the View with every call."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    out = {}

    async def run():
        params = StdioServerParameters(command=binary, args=["serve"], env=corpus.server_env(job.data, job.ctrl))
        with open(job.server_err, "w") as errlog:
            with anyio.fail_after(corpus.CALL_TIMEOUT_S * 2):
                async with stdio_client(params, errlog=errlog) as (read, write):
                    async with ClientSession(read, write) as s:
                        init = await s.initialize()
                        instructions = init.instructions or ""
                        tl = await s.list_tools()
                        tools = {t.name: {"required": list((t.input_schema or {}).get("required") or []),
                                          "read_only": bool(t.annotations and t.annotations.read_only_hint)} for t in tl.tools}
                        tools_seen = [{"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in tl.tools]
                        pl = await s.list_prompts()
                        prompts_seen = [{"name": p.name, "description": p.description} for p in pl.prompts]
                        prompt = ""
                        if any(p.name == "diagnose_hang" for p in pl.prompts):
                            g = await s.get_prompt("diagnose_hang", {})
                            prompt = "\n".join(getattr(m.content, "text", "") for m in g.messages)
                        out["setup"] = {"reads": 3 if prompt else 2, "chars": {
                            "instructions": len(instructions), "tools/list": _chars(tools_seen),
                            "prompts/list": _chars(prompts_seen), "prompts/get": len(prompt)}}
                        v = View(instructions, prompt, tools, stall_seconds)
                        out["view"] = v
                        while len(v.calls) < MAX_CALLS:
                            nxt = policy(v)
                            if nxt is None:
                                break
                            tool, args = nxt
                            if v.made(tool, args):
                                await anyio.sleep(REPEAT_GAP_S)
                            t0 = time.perf_counter()
                            res = await s.call_tool(tool, args)
                            text = "\n".join(b.text for b in res.content if getattr(b, "type", None) == "text")
                            v.calls.append({"tool": tool, "args": args, "text": text, "structured": res.structured_content,
                                            "is_error": bool(res.is_error), "ms": round((time.perf_counter() - t0) * 1000.0, 1),
                                            "text_chars": len(text), "json_chars": _chars(res.structured_content)
                                            if res.structured_content is not None else 0})

    anyio.run(run)
    return out["setup"], out["view"]


def run_case(case, opt):
    def body(r, job):
        setup, v = investigate(opt.bin, job, opt.stall_seconds)
        r["setup"] = setup
        r["calls"] = [{k: c[k] for k in ("tool", "args", "text_chars", "json_chars", "ms", "is_error")} for c in v.calls]
        r["texts"] = [c["text"] for c in v.calls]
        if not v.calls or v.calls[0]["tool"] != "diagnose_hang":
            r["error"] = "the policy did not start with diagnose_hang (the instructions name no first tool?)"
            return
        first_k = {}
        rc = None
        for k in range(1, len(v.calls) + 1):
            parts = found_parts(v.calls[:k], job.truth)
            for p, ok in parts.items():
                if ok and p not in first_k:
                    first_k[p] = k
            if rc is None and all(parts.values()):
                rc = k
        r["parts"] = {p: first_k.get(p) for p in parts}
        read = [c["text_chars"] for c in v.calls]
        r["root_cause"] = {"call": rc, "chars": sum(read[:rc]) if rc else None}
        r["read_chars"] = sum(read)
        r["returned_chars"] = sum(c["text_chars"] + c["json_chars"] for c in v.calls)
        r["meets_target"] = bool(rc and rc <= TARGET_CALLS and r["root_cause"]["chars"] <= TARGET_CHARS)
        rep = v.calls[0]["structured"] if isinstance(v.calls[0]["structured"], dict) else {}
        r["state"] = rep.get("state")
        r["verdict"] = rep
        dis = consistency.check_verdict(rep, v.calls[0]["text"]) if rep else ["diagnose_hang gave no structured content"]
        across, notes = consistency.check_across(rep, [(c["tool"], c["args"], c["text"], c["structured"]) for c in v.calls[1:]])
        r["inconsistencies"] = dis + across
        r["notes"] = notes

    return corpus.run_case(case, opt, body)


# ------------------------------------------------------------------ output

def _k(x):
    return "-" if x is None else str(x)


def table_rows(results):
    rows = [("case", "calls to root cause", "of", "culprit/category/line/resource by call", "chars read to root cause",
             "chars read", "returned", "consistent", "target")]
    for r in results:
        if r.get("skipped"):
            rows.append((r["case"], "", "", "", "", "", "", "", "skipped: " + r["skipped"]))
            continue
        if r.get("error") and "root_cause" not in r:
            rows.append((r["case"], "", str(len(r.get("calls") or [])), "", "", "", "", "", "ERROR: " + r["error"].splitlines()[0][:100]))
            continue
        p, rc = r["parts"], r["root_cause"]
        parts = "/".join(_k(p[k]) if k in p else "n/a" for k in ("culprit", "category", "line", "resource"))
        rows.append((r["case"], _k(rc["call"]) if rc["call"] else "not found", str(len(r["calls"])), parts,
                     _k(rc["chars"]), str(r["read_chars"]), str(r["returned_chars"]),
                     "yes" if not r["inconsistencies"] else "no (%d)" % len(r["inconsistencies"]),
                     ("ERROR: " + r["error"].splitlines()[0][:80]) if r.get("error") else ("met" if r["meets_target"] else "MISSED")))
    return rows


def totals(results):
    ok = [r for r in results if "root_cause" in r and not r.get("error")]
    found = [r for r in ok if r["root_cause"]["call"]]

    def med(vs):
        return statistics.median(vs) if vs else 0

    return {"cases": len([r for r in results if not r.get("skipped")]), "errors": sum(1 for r in results if r.get("error")),
            "found": len(found), "met": sum(1 for r in ok if r["meets_target"]),
            "consistent": sum(1 for r in ok if not r["inconsistencies"]),
            "calls_to_root_cause": {"median": med([r["root_cause"]["call"] for r in found]),
                                    "max": max([r["root_cause"]["call"] for r in found] or [0])},
            "chars_to_root_cause": {"median": med([r["root_cause"]["chars"] for r in found]),
                                    "max": max([r["root_cause"]["chars"] for r in found] or [0])},
            "calls": {"median": med([len(r["calls"]) for r in ok]), "max": max([len(r["calls"]) for r in ok] or [0])},
            "read_chars": {"median": med([r["read_chars"] for r in ok]), "max": max([r["read_chars"] for r in ok] or [0])},
            "setup_chars": max([sum(r["setup"]["chars"].values()) for r in ok] or [0])}


def totals_line(t):
    return ("root cause found %d/%d, target met (<= %d calls, <= %d chars) %d/%d, consistent %d/%d, errors %d; "
            "calls to root cause median %g max %g; chars read to root cause median %g max %g; calls median %g max %g; "
            "chars read median %g max %g; setup (3 reads) %d chars" % (
                t["found"], t["cases"], TARGET_CALLS, TARGET_CHARS, t["met"], t["cases"], t["consistent"], t["cases"], t["errors"],
                t["calls_to_root_cause"]["median"], t["calls_to_root_cause"]["max"], t["chars_to_root_cause"]["median"],
                t["chars_to_root_cause"]["max"], t["calls"]["median"], t["calls"]["max"], t["read_chars"]["median"],
                t["read_chars"]["max"], t["setup_chars"]))


def details(results):
    """Each case's calls, and its inconsistencies and notes."""
    lines = []
    for r in results:
        if not r.get("calls"):
            continue
        calls = ", ".join("%s %s (%d)" % (c["tool"], json.dumps(c["args"], ensure_ascii=False) if c["args"] else "{}", c["text_chars"])
                          for c in r["calls"])
        lines.append("%s: %s" % (r["case"], calls))
        for d in r.get("inconsistencies") or []:
            lines.append("    inconsistent: " + d)
        for n in r.get("notes") or []:
            lines.append("    note: " + n)
    return lines


def regressions(results, baseline_path):
    """Cases worse than the baseline's: root cause lost, more calls to it,
    or over 1.5x its characters (+500)."""
    with open(baseline_path) as f:
        base = {c["case"]: c for c in json.load(f)["cases"]}
    out = []
    for r in results:
        b = base.get(r["case"])
        if not b or "root_cause" not in r or not b.get("root_cause", {}).get("call"):
            continue
        now, was = r["root_cause"], b["root_cause"]
        if not now["call"]:
            out.append("%s: root cause found by call %d in the baseline, not found now" % (r["case"], was["call"]))
        elif now["call"] > was["call"]:
            out.append("%s: root cause by call %d, the baseline by call %d" % (r["case"], now["call"], was["call"]))
        elif now["chars"] > 1.5 * was["chars"] + 500:
            out.append("%s: %d characters read to the root cause, the baseline %d" % (r["case"], now["chars"], was["chars"]))
    return out


def render(rows, sep="  ", md=False):
    if md:
        esc = lambda c: c.replace("|", "\\|")  # noqa: E731
        return "\n".join(["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
                         + ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows[1:]])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(sep.join(c.ljust(widths[i]) for i, c in enumerate(row[:-1])) + sep + row[-1] for row in rows)


def run(cases, skipped, opt, argv):
    """score.py --agent: every case investigated; the table, the details,
    and with --check exit 1 on a harness error or a regression."""
    for name, why in skipped:
        print("skipping %s: %s" % (name, why), file=sys.stderr)

    def done(r):
        rc = (r.get("root_cause") or {}).get("call")
        print("%-40s %s (%.0f s)" % (r["case"], "ERROR" if r.get("error") else
                                     ("root cause by call %d of %d" % (rc, len(r["calls"])) if rc else "root cause not found"),
                                     r.get("total_s", 0)), file=sys.stderr, flush=True)

    t0 = time.monotonic()
    results = corpus.run_all(cases, opt.jobs, lambda c: run_case(c, opt), done)
    if results is None:
        return 130
    results += [{"case": n, "skipped": why} for n, why in skipped]
    t = totals(results)
    rows = table_rows(results)
    print(render(rows))
    print("")
    print(totals_line(t))
    print("(%d case(s) in %.0f s, --jobs %d)\n" % (len(cases), time.monotonic() - t0, opt.jobs))
    print("\n".join(details(results)))
    for r in results:
        if r.get("error"):
            print("\n%s failed:\n  %s" % (r["case"], r["error"].replace("\n", "\n  ")))
    regs = regressions(results, opt.baseline) if opt.baseline else []
    for line in regs:
        print("REGRESSION " + line)
    stamp = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "machine": corpus.machine(),
             "commit": corpus.commit(), "argv": argv}
    if opt.json:
        with open(opt.json, "w") as f:
            json.dump(dict(stamp, totals=t, regressions=regs, cases=results), f, indent=1)
    if opt.write_baseline:
        with open(opt.write_baseline, "w") as f:
            json.dump(dict(stamp, cases=[{"case": r["case"], "root_cause": r["root_cause"], "calls": len(r["calls"]),
                                          "read_chars": r["read_chars"]} for r in results if "root_cause" in r]), f, indent=1)
            f.write("\n")
    if opt.markdown:
        with open(opt.markdown, "w") as f:
            f.write("Measured on %s UTC, %s, commit %s, with `%s`.\n\n%s\n\nTotals: %s.\n\n```\n%s\n```\n" % (
                stamp["date"][:16].replace("T", " "), stamp["machine"], stamp["commit"],
                " ".join(["python3", "evals/score.py"] + argv), render(rows, md=True), totals_line(t), "\n".join(details(results))))
    if opt.check and (t["errors"] or regs):
        return 1
    return 0
