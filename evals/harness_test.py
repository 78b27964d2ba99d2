"""Unit tests of the scripted agent harness (agent.py, consistency.py):
the policy, the root-cause measure and the consistency checker, on answers
written here. No job, no server: `python3 -m unittest evals/harness_test.py`
(evals/agent_test.go runs it, and the harness on real jobs)."""
import copy
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent  # noqa: E402
import consistency  # noqa: E402

INSTRUCTIONS = "For \"why is my job stuck?\", call the `diagnose_hang` tool first: it says whether the job is hung."
TOOLS = {name: {"required": req, "read_only": ro} for name, req, ro in (
    ("diagnose_hang", [], True), ("get_stacks", [], True), ("snapshot_flight_recorder", [], True),
    ("query", ["sql"], True), ("list_processes", [], True), ("analyze_flight_recorder", ["paths"], True),
    ("eval_python", ["code"], False))}

# A stalled job's verdict, as diagnose_hang gives it (socket:cpu_stall/4).
VERDICT = {
    "state": "stalled",
    "summary": "rank 2 is the culprit (cpu_stall, high confidence) at ⟦socket_job.py⟧:127 (⟦load_batch⟧); ranks 0-1,3 wait for it. "
               "The job is stalled: no rank made progress for 5.4s.",
    "hypotheses": [{
        "category": "cpu_stall", "culprit_ranks": "2", "collateral_ranks": "0-1,3", "confidence": "high",
        "evidence": [{"source": "comm_rings", "text": "rank 2 is not in any collective; the collectives it is waited for in were never entered by it"},
                     {"source": "comm_rings", "text": "3 rank(s) wait for it in collectives (0-1,3)"},
                     {"source": "stacks", "text": "its main thread is in ⟦socket_job.py⟧:127 (⟦load_batch⟧)"}],
        "where": {"file": "/x/evals/jobs/socket_job.py", "line": 127, "function": "load_batch", "source": "time.sleep(1)"},
        "confirm": "get_stacks {\"ranks\":\"2\"} twice, a few seconds apart: the same frame",
        "refute": "rank 2's main thread moves"}],
    "ranks": [{"ranks": "2", "count": 1, "doing": "outside any collective, main thread in ⟦socket_job.py⟧:127 (⟦load_batch⟧)"},
              {"ranks": "3", "count": 1, "doing": "in all_reduce #11 on group 2-3, waiting for rank 2"},
              {"ranks": "0-1", "count": 2, "doing": "in all_reduce #11 on group 0-3, waiting for ranks 2-3"}],
}
TEXT = ("rank 2 is the culprit (cpu_stall, high confidence) ...\nState: stalled.\n\n"
        "1. cpu_stall, high confidence: culprit rank 2; waiting for it: ranks 0-1,3\n")
TRUTH = {"state": "stalled", "category": "cpu_stall", "culprits": "2", "file": "socket_job.py", "function": "load_batch"}


def stacks_answer(rank, frames):
    return {"groups": [{"role": "main thread", "ranks": str(rank),
                        "frames": [{"file": f, "line": ln, "function": fn} for f, ln, fn in frames]}]}


def view(*answers):
    v = agent.View(INSTRUCTIONS, "1. Call diagnose_hang first", TOOLS, 3)
    for tool, args, text, st in answers:
        v.calls.append({"tool": tool, "args": args, "text": text, "structured": st})
    return v


class PolicyTest(unittest.TestCase):
    def test_first_the_tool_the_instructions_name(self):
        self.assertEqual(agent.policy(view()), ("diagnose_hang", {"stall_seconds": 3}))

    def test_not_hung_stops(self):
        for state in ("healthy", "slow", "paused", "progressing"):
            self.assertIsNone(agent.policy(view(("diagnose_hang", {}, "", dict(VERDICT, state=state)))), state)

    def test_confirm_twice(self):
        v = view(("diagnose_hang", {}, TEXT, VERDICT))
        self.assertEqual(agent.policy(v), ("get_stacks", {"ranks": "2"}))
        v.calls.append({"tool": "get_stacks", "args": {"ranks": "2"}, "text": "", "structured": {}})
        self.assertEqual(agent.policy(v), ("get_stacks", {"ranks": "2"}))
        v.calls.append({"tool": "get_stacks", "args": {"ranks": "2"}, "text": "", "structured": {}})
        self.assertIsNone(agent.policy(v))

    def test_fallback_when_confirm_names_no_tool(self):
        rep = copy.deepcopy(VERDICT)
        rep["hypotheses"][0]["confirm"] = "ls -l /proc/123/fd on its node"
        rep["hypotheses"][0]["category"] = "missing_from_collective"
        v = view(("diagnose_hang", {}, TEXT, rep))
        self.assertEqual(agent.policy(v), ("get_stacks", {"ranks": "2"}))
        v.calls.append({"tool": "get_stacks", "args": {"ranks": "2"}, "text": "", "structured": {}})
        self.assertEqual(agent.policy(v), ("snapshot_flight_recorder", {}))

    def test_at_most_a_few_calls_after_the_verdict(self):
        rep = copy.deepcopy(VERDICT)
        rep["hypotheses"][0]["confidence"] = "low"
        text = "call list_processes, get_stacks {\"ranks\":\"0\"}, get_stacks {\"ranks\":\"1\"}, get_stacks {\"ranks\":\"3\"}"
        v = view(("diagnose_hang", {}, text, rep))
        for _ in range(10):
            nxt = agent.policy(v)
            if nxt is None:
                break
            v.calls.append({"tool": nxt[0], "args": nxt[1], "text": "", "structured": {}})
        self.assertEqual(len(v.calls), 1 + agent.MAX_FOLLOW)

    def test_suggested_calls(self):
        got = agent.suggested('get_stacks {"ranks":"3"} again; query (no sql); eval_python {"code":"1"}; '
                              'analyze_flight_recorder {"paths":["/d"]}; ⟦get_stacks {"ranks":"9"}⟧ in job text', TOOLS)
        self.assertEqual(got, [("get_stacks", {"ranks": "3"}, 1), ("analyze_flight_recorder", {"paths": ["/d"]}, 1)])


class RootCauseTest(unittest.TestCase):
    def test_found_by_the_verdict(self):
        calls = [{"tool": "diagnose_hang", "args": {}, "text": TEXT, "structured": VERDICT}]
        self.assertEqual(agent.found_parts(calls, TRUTH), {"culprit": True, "category": True, "line": True})

    def test_line_from_the_culprits_stack_and_resource_from_the_text(self):
        rep = copy.deepcopy(VERDICT)
        del rep["hypotheses"][0]["where"]
        truth = dict(TRUTH, resource={"what": "the FIFO", "text": ["sample-00048.txt"]})
        calls = [{"tool": "diagnose_hang", "args": {}, "text": TEXT, "structured": rep}]
        self.assertEqual(agent.found_parts(calls, truth), {"culprit": True, "category": True, "line": False, "resource": False})
        calls.append({"tool": "get_stacks", "args": {"ranks": "2"}, "structured": stacks_answer(2, [("/x/socket_job.py", 127, "load_batch")]),
                      "text": "⟦load_batch⟧ ⟦socket_job.py⟧:127, opening ⟦/tmp/d/sample-00048.txt⟧"})
        self.assertEqual(agent.found_parts(calls, truth), {"culprit": True, "category": True, "line": True, "resource": True})

    def test_wrong_culprit(self):
        calls = [{"tool": "diagnose_hang", "args": {}, "text": TEXT, "structured": VERDICT}]
        self.assertFalse(agent.found_parts(calls, dict(TRUTH, culprits="1"))["culprit"])


class ConsistencyTest(unittest.TestCase):
    def test_a_consistent_verdict(self):
        self.assertEqual(consistency.check_verdict(VERDICT, TEXT), [])

    def test_outside_vs_in_a_collective(self):
        rep = copy.deepcopy(VERDICT)
        rep["ranks"][0]["doing"] = "in all_reduce #34 on group 0-3, every member entered it"
        got = consistency.check_verdict(rep, TEXT)
        self.assertTrue(any("rank 2: outside any collective vs in all_reduce #34 on group 0-3" in d for d in got), got)

    def test_two_sequence_numbers(self):
        rep = copy.deepcopy(VERDICT)
        rep["ranks"].append({"ranks": "0", "count": 1, "doing": "in all_reduce #12 on group 0-3"})
        got = consistency.check_verdict(rep, TEXT)
        self.assertTrue(any("rank 0: in all_reduce #11 vs all_reduce #12 on group 0-3" in d for d in got), got)

    def test_frames_roles_confidence_and_text(self):
        rep = copy.deepcopy(VERDICT)
        rep["hypotheses"][0]["where"]["line"] = 130
        rep["hypotheses"][0]["collateral_ranks"] = "0-3"
        rep["data_quality"] = ["who waits is read from the stacks, so no verdict from this is above medium confidence"]
        got = "\n".join(consistency.check_verdict(rep, TEXT.replace("State: stalled", "State: dead")))
        for want in ("socket_job.py:127 (load_batch)", "socket_job.py:130 (load_batch) (hypothesis 1 where)",
                     "both culprits and waiting", "no verdict from this is above medium", "text says State: dead"):
            self.assertIn(want, got)

    def test_waiting_for_the_culprit_is_a_role(self):
        # ranks blocked on the culprit's lock, outside any collective (ddp:manifest_lock)
        rep = copy.deepcopy(VERDICT)
        rep["ranks"][1]["doing"] = rep["ranks"][2]["doing"] = "outside any collective, main thread in ⟦j.py⟧:177 (⟦append_manifest⟧)"
        rep["hypotheses"][0]["evidence"] = rep["hypotheses"][0]["evidence"][2:]
        self.assertEqual(consistency.check_verdict(rep, TEXT), [])
        rep["summary"] = rep["summary"].replace("ranks 0-1,3 wait", "ranks 0-3 wait")
        self.assertEqual(consistency.check_verdict(rep, TEXT), ["rank 2 is the culprit and, in the summary, waits for it"])

    def test_a_dead_job_confirmed_by_live_stacks(self):
        rep = dict(copy.deepcopy(VERDICT), state="dead")
        rep["summary"] = rep["summary"].replace("The job is stalled", "The job is dead")
        got = consistency.check_verdict(rep, TEXT.replace("State: stalled", "State: dead"))
        self.assertEqual(len(got), 1)
        self.assertIn("the job is dead (no live process), yet hypothesis 1's confirm asks for get_stacks", got[0])

    def test_across_get_stacks(self):
        here = stacks_answer(2, [("/lib/time.py", 1, "sleep"), ("/x/socket_job.py", 127, "load_batch")])
        self.assertEqual(consistency.check_across(VERDICT, [("get_stacks", {}, "⟦load_batch⟧", here)]), ([], []))
        dis, _ = consistency.check_across(VERDICT, [("get_stacks", {}, "", stacks_answer(2, [("/x/socket_job.py", 99, "forward")]))])
        self.assertEqual(len(dis), 1)
        self.assertIn("get_stacks (call 1) shows no such frame, its main thread at socket_job.py:99 (forward)", dis[0])
        _, notes = consistency.check_across(VERDICT, [("get_stacks", {}, "… 8 more outer frames", here)])
        self.assertIn("its text cuts it", notes[0])


if __name__ == "__main__":
    unittest.main()
