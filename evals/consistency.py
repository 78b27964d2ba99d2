"""Whether the parts of probing-mcp's answers agree about each rank.

An assistant reads one answer's summary, hypotheses, evidence lines and
rank groups, and then other tools' answers about the same ranks; when two
of them place a rank differently it cannot tell which to believe. This
checker reads what each part claims about each rank and reports the pairs
that cannot both be true. It knows nothing of the truth: it judges the
answers against each other only.

Within one diagnose_hang answer (check_verdict):
  place       a rank "outside any collective" (a rank group's doing, an
              evidence line) and "in all_reduce #11" or waiting in a
              collective (another part) for the same rank; or in #N and #M
              of the same group in two parts
  frame       the culprit's place in the code: the hypothesis's `where`,
              the summary's "at file:line (function)", its rank group's
              "main thread in ...", an evidence line's "its main thread is
              in ..." must name the same file:line and function
  roles       a rank both a culprit and waiting for it (collateral, "ranks
              ... wait for it"); a dead job whose confirm asks for live
              stacks
  confidence  the summary's confidence vs the top hypothesis's, and a
              data-quality line capping every verdict ("no verdict ... is
              above medium confidence") vs a higher one
  text        the text content vs the structured content: the state line,
              each numbered hypothesis's category, confidence and culprits

Across answers (check_across):
  stacks      for each culprit, the frame the verdict gives it must be in
              the stack get_stacks returns for that rank (any thread of it),
              and (a note, not a disagreement) shown in get_stacks' text
  culprits    a Flight Recorder answer's culprit ranks vs the verdict's
"""
import os
import re

from corpus import parse_rankset

Q = r"⟦([^⟧]*)⟧"                                  # one quoted piece of job text
FRAME = re.compile(Q + r":(\d+) \(" + Q + r"\)")  # ⟦file⟧:line (⟦function⟧)
RANKS = r"([0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*)"
CONF = {"low": 0, "medium": 1, "high": 2}


def _ranks(text):
    try:
        return parse_rankset(text.strip().rstrip(",;."))
    except (ValueError, AttributeError):
        return set()


def _frame(m):
    return (os.path.basename(m.group(1)), int(m.group(2)), m.group(3))


def _fmt(f):
    return "%s:%d (%s)" % f


class Claims(object):
    """What the parts of one answer say about each rank."""

    def __init__(self):
        self.place = {}   # rank -> [(("outside",) | ("in", op, seq, group) | ("waiting",), part)]
        self.frame = {}   # rank -> [((file, line, function), part)]
        self.waiters = set()  # ranks the summary says wait for the culprit

    def add_place(self, ranks, place, part):
        for r in ranks:
            self.place.setdefault(r, []).append((place, part))

    def add_frame(self, ranks, frame, part):
        for r in ranks:
            self.frame.setdefault(r, []).append((frame, part))


def _doing_claims(claims, ranks, doing, part):
    if "outside any collective" in doing:
        claims.add_place(ranks, ("outside",), part)
    m = re.search(r"\bin ⟦?(\w+)⟧? #(\d+) on group " + RANKS, doing)
    if m:
        claims.add_place(ranks, ("in", m.group(1), int(m.group(2)), m.group(3)), part)
    elif re.search(r"\bin (?:⟦[^⟧]*⟧|\w+) \(seen in its stack\)", doing):
        claims.add_place(ranks, ("waiting",), part)  # in a collective seen in the stack, without its number
    m = re.search(r"main thread (?:is )?in " + FRAME.pattern, doing)
    if m:
        claims.add_frame(ranks, _frame(m), part)


def verdict_claims(rep):
    """The claims of one diagnose_hang answer's structured content."""
    c = Claims()
    for i, g in enumerate(rep.get("ranks") or []):
        _doing_claims(c, _ranks(g.get("ranks", "")), g.get("doing", ""), "ranks[%d] %r" % (i, g.get("doing", "")[:80]))
    for hi, h in enumerate(rep.get("hypotheses") or []):
        culprits = _ranks(h.get("culprit_ranks", ""))
        for ei, e in enumerate(h.get("evidence") or []):
            t, part = e.get("text", ""), "hypothesis %d evidence %d %r" % (hi + 1, ei + 1, e.get("text", "")[:80])
            for m in re.finditer(r"\brank (\d+) is not in any collective", t):
                c.add_place({int(m.group(1))}, ("outside",), part)
            for m in re.finditer(r"rank\(s\) wait for it in collectives \(" + RANKS + r"\)", t):
                c.add_place(_ranks(m.group(1)), ("waiting",), part)
            m = re.match(r"its main thread is in " + FRAME.pattern, t)
            if m and len(culprits) == 1:
                c.add_frame(culprits, _frame(m), part)
        w = h.get("where")
        if hi == 0 and w and w.get("file") and len(culprits) == 1:
            c.add_frame(culprits, (os.path.basename(w["file"]), int(w.get("line") or 0), w.get("function", "")), "hypothesis 1 where")
    s = rep.get("summary", "")
    m = re.match(r"ranks? " + RANKS + r" (?:is|are) the culprits? \([\w ]+, (\w+) confidence\)(?: at " + FRAME.pattern + ")?", s)
    if m and m.group(3):
        culprits = _ranks(m.group(1))
        if len(culprits) == 1:
            c.add_frame(culprits, (os.path.basename(m.group(3)), int(m.group(4)), m.group(5)), "summary")
    # "ranks 0-1,3 wait for it" is a role (waiting for the culprit, maybe
    # on a lock or a child), not a place: only a culprit in it is checked.
    for m in re.finditer(r"; ranks? " + RANKS + r" waits? for (?:it|them)", s):
        c.waiters |= _ranks(m.group(1))
    return c


def _conflict(a, b):
    """Why places a and b of one rank cannot both hold, or ""."""
    kinds = {a[0], b[0]}
    if "outside" in kinds and kinds & {"in", "waiting"}:
        other = a if a[0] != "outside" else b
        return "outside any collective vs " + ("in %s #%d on group %s" % other[1:] if other[0] == "in" else "waiting in a collective")
    if a[0] == b[0] == "in" and a[3] == b[3] and (a[1], a[2]) != (b[1], b[2]):
        return "in %s #%d vs %s #%d on group %s" % (a[1], a[2], b[1], b[2], a[3])
    return ""


def check_verdict(rep, text):
    """Disagreements between the parts of one diagnose_hang answer."""
    out = []
    c = verdict_claims(rep)
    for r in sorted(c.place):
        seen = c.place[r]
        for i in range(len(seen)):
            for j in range(i + 1, len(seen)):
                why = _conflict(seen[i][0], seen[j][0])
                if why:
                    out.append("rank %d: %s (%s; %s)" % (r, why, seen[i][1], seen[j][1]))
    for r in sorted(c.frame):
        frames = c.frame[r]
        first = frames[0]
        for f, part in frames[1:]:
            if f != first[0]:
                out.append("rank %d's place in the code: %s (%s) vs %s (%s)" % (r, _fmt(first[0]), first[1], _fmt(f), part))
    hyps = rep.get("hypotheses") or []
    top = hyps[0] if hyps else {}
    culprits = _ranks(top.get("culprit_ranks", ""))
    both = culprits & _ranks(top.get("collateral_ranks", ""))
    if both:
        out.append("ranks %s are both culprits and waiting for the culprit (hypothesis 1)" % sorted(both))
    for r in sorted(culprits & c.waiters):
        out.append("rank %d is the culprit and, in the summary, waits for it" % r)
    if rep.get("state") == "dead" and re.search(r"\bget_stacks\b", top.get("confirm", "")):
        out.append("the job is dead (no live process), yet hypothesis 1's confirm asks for get_stacks: %r" % top["confirm"][:120])
    s = rep.get("summary", "")
    m = re.search(r"\(([\w ]+), (\w+) confidence\)", s)
    if m and top and m.group(2) != top.get("confidence"):
        out.append("summary says %s confidence, hypothesis 1 %s" % (m.group(2), top.get("confidence")))
    for dq in rep.get("data_quality") or []:
        m = re.search(r"no verdict (?:[\w ]+ )?is above (\w+) confidence", dq)
        if m and top and CONF.get(top.get("confidence"), 0) > CONF.get(m.group(1), 2):
            out.append("hypothesis 1 is at %s confidence, but a data-quality line says no verdict from this is above %s: %r"
                       % (top.get("confidence"), m.group(1), dq[:160]))
    m = re.search(r"The job is (\w+)", s)
    if m and m.group(1) != rep.get("state") and rep.get("state") in ("stalled", "dead", "healthy", "slow", "paused"):
        out.append("summary says the job is %s, state is %s" % (m.group(1), rep.get("state")))
    out += _text_vs_structured(rep, text)
    return out


def _text_vs_structured(rep, text):
    out = []
    m = re.search(r"^State: (\w+)", text, re.M)
    if m and m.group(1) != rep.get("state"):
        out.append("text says State: %s, structured state is %s" % (m.group(1), rep.get("state")))
    hyps = rep.get("hypotheses") or []
    for m in re.finditer(r"^(\d+)\. (\w+), (\w+) confidence: culprit ranks? " + RANKS, text, re.M):
        i = int(m.group(1)) - 1
        if i >= len(hyps):
            out.append("text lists hypothesis %d, the structured content %d" % (i + 1, len(hyps)))
            continue
        h = hyps[i]
        got = (m.group(2), m.group(3), _ranks(m.group(4)))
        want = (h.get("category"), h.get("confidence"), _ranks(h.get("culprit_ranks", "")))
        if got != want:
            out.append("text's hypothesis %d is %s/%s/ranks %s, the structured one %s/%s/ranks %s"
                       % (i + 1, got[0], got[1], sorted(got[2]), want[0], want[1], sorted(want[2])))
    return out


# ------------------------------------------------------------- across answers

def _rank_threads(stacks_answer, rank):
    """Every thread group of get_stacks' structured answer that holds rank."""
    return [g for g in (stacks_answer.get("groups") or []) if rank in _ranks(g.get("ranks", ""))]


def check_across(rep, answers):
    """Disagreements (and notes) between the verdict rep and later answers:
    answers is [(tool, args, text, structured)]. Returns (disagreements, notes)."""
    out, notes = [], []
    c = verdict_claims(rep)
    top = (rep.get("hypotheses") or [{}])[0]
    culprits = _ranks(top.get("culprit_ranks", ""))
    for k, (tool, args, text, st) in enumerate(answers, 1):
        if not isinstance(st, dict):
            continue
        if tool == "get_stacks":
            for r in sorted(culprits):
                groups = _rank_threads(st, r)
                claimed = c.frame.get(r)
                if not groups or not claimed:
                    continue
                f, part = claimed[0]
                frames = [(os.path.basename(x.get("file", "")), int(x.get("line") or 0), x.get("function", ""))
                          for g in groups for x in g.get("frames") or []]
                if f not in frames:
                    main = next((g for g in groups if g.get("role") == "main thread"), groups[0])
                    inner = (main.get("frames") or [{}])[0]
                    out.append("rank %d: the verdict places it at %s (%s); get_stacks (call %d) shows no such frame, its %s at %s:%s (%s)"
                               % (r, _fmt(f), part, k, main.get("role", "thread"), os.path.basename(inner.get("file", "?")),
                                  inner.get("line", "?"), inner.get("function", "?")))
                elif "⟦%s⟧" % f[2] not in text:
                    notes.append("rank %d: get_stacks (call %d) has the verdict's frame %s in its structured content only: its text cuts it"
                                 % (r, k, _fmt(f)))
        fr = _fr_culprits(st)
        if fr is not None and culprits and fr != culprits:
            out.append("%s (call %d) names culprit ranks %s, the verdict %s" % (tool, k, sorted(fr), sorted(culprits)))
    return out, notes


def _fr_culprits(st):
    """The culprit ranks a Flight Recorder answer names (its first problem
    group's), or None when it names none."""
    for g in st.get("groups") or st.get("process_groups") or []:
        if isinstance(g, dict) and g.get("culprit_ranks"):
            return _ranks(str(g["culprit_ranks"]))
    if st.get("culprit_ranks"):
        return _ranks(str(st["culprit_ranks"]))
    return None
