"""The Python worker writes as the Go worker does: the steps of concurrent handlers in one
workflow.record_steps call per flush, their outcomes in batches of complete_runs / fail_runs, each
run with its own answer; and the client reads and writes through functions only.

The evidence is the statements themselves, counted by a connection class the poller (and the
client) is given through ``connect``."""

import ast
import logging
import os
import re
import sys
import threading
import time
import unittest
from collections import defaultdict
from datetime import timedelta

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import simpleworkflow  # noqa: E402
from simpleworkflow import MAX_JSON_DEPTH, PermanentError  # noqa: E402
from tests import support  # noqa: E402
from tests.support import InboxTest, wait_for  # noqa: E402

logging.basicConfig(level=logging.WARNING)

SDK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "simpleworkflow")
_WRITES = re.compile(r"workflow\.(record_steps|complete_runs|fail_runs|release_runs)\(")


def tearDownModule():
    support.stop_server()


class Statements:
    """What the connections of one poller or client executed."""

    def __init__(self, delay=0.0, hold=()):
        self.lock = threading.Lock()
        #: The first call of each of these functions waits until released:
        #: held[f] is set when it starts waiting, released[f] lets it go on.
        self.held = {f: threading.Event() for f in hold}
        self.released = {f: threading.Event() for f in hold}
        #: function -> [(rows in the call, refused by the database)]
        self.calls = defaultdict(list)
        self.queries = []
        #: Seconds each batched write takes longer (the database is slow):
        #: whatever arrives meanwhile goes in the next batch.
        self.delay = delay

    def connection_class(self):
        statements = self

        class Counting(psycopg.Connection):
            def execute(self, query, params=None, *args, **kwargs):
                text = query if isinstance(query, str) else str(query)
                with statements.lock:
                    statements.queries.append(text)
                m = _WRITES.search(text)
                if m is None:
                    return super().execute(query, params, *args, **kwargs)
                if statements.delay:
                    time.sleep(statements.delay)
                fn = m.group(1)
                if fn in statements.held and not statements.held[fn].is_set():
                    statements.held[fn].set()
                    statements.released[fn].wait(30)
                rows = len(params[1])
                try:
                    cur = super().execute(query, params, *args, **kwargs)
                except psycopg.Error:
                    with statements.lock:
                        statements.calls[m.group(1)].append((rows, True))
                    raise
                with statements.lock:
                    statements.calls[m.group(1)].append((rows, False))
                return cur

        return Counting

    def connect(self, url):
        cls = self.connection_class()
        return lambda: cls.connect(url, autocommit=True)

    def sizes(self, function):
        with self.lock:
            return [n for n, _ in self.calls[function]]


class BatchedWritesTest(InboxTest):
    def test_steps_and_outcomes_of_concurrent_handlers_are_written_in_batches(self):
        n, steps = 24, 3
        statements = Statements(delay=0.05)
        barrier = threading.Barrier(n, timeout=30)

        def handler(task):
            barrier.wait()  # every handler completes its steps at the same time
            out = [task.step(f"s{i}", lambda i=i: {"run": task.id, "i": i}) for i in range(steps)]
            return {"steps": out}

        runs = self.client.create_many([{"type": "pybatch.steps.v1"} for _ in range(n)])
        poller, _, _ = self.start_poller(
            type_prefixes=["pybatch."], concurrency=n, connect=statements.connect(self.url)
        )
        poller.handle("pybatch.steps.v1", handler)
        for r in runs:
            run = self.wait_status(r.id, "succeeded", timeout=60)
            self.assertEqual(run.result, {"steps": [{"run": r.id, "i": i} for i in range(steps)]})
            self.assertEqual(
                [(s.name, s.position, s.outcome) for s in self.client.steps(r.id)],
                [(f"s{i}", i, "ok") for i in range(steps)],
            )
        wait_for(lambda: not poller._active, what="the slots to be freed")

        step_calls = statements.sizes("record_steps")
        self.assertEqual(sum(step_calls), n * steps, step_calls)
        self.assertLessEqual(
            len(step_calls),
            n * steps // 3,
            f"{len(step_calls)} record_steps calls for {n * steps} steps: {step_calls}",
        )
        self.assertGreaterEqual(max(step_calls), n // 3, step_calls)
        outcome_calls = statements.sizes("complete_runs")
        self.assertEqual(sum(outcome_calls), n, outcome_calls)
        self.assertLess(len(outcome_calls), n, f"one complete_runs call per run: {outcome_calls}")
        self.assertGreater(max(outcome_calls), 1, outcome_calls)

    def test_failures_of_concurrent_handlers_are_written_in_batches(self):
        n = 16
        statements = Statements(delay=0.2)
        barrier = threading.Barrier(n, timeout=30)

        def handler(task):
            barrier.wait()
            if task.payload["n"] % 2:
                raise PermanentError(f"bad order {task.payload['n']}")
            raise RuntimeError(f"try again {task.payload['n']}")

        runs = self.client.create_many(
            [
                {"type": "pybatch.fail.v1", "payload": {"n": i}, "retry_base_delay": timedelta(hours=1)}
                for i in range(n)
            ]
        )
        poller, _, _ = self.start_poller(
            type_prefixes=["pybatch."], concurrency=n, connect=statements.connect(self.url)
        )
        poller.handle("pybatch.fail.v1", handler)
        for i, r in enumerate(runs):
            if i % 2:
                run = self.wait_status(r.id, "failed", timeout=30)
                self.assertEqual(run.last_error, f"bad order {i}")
            else:
                run = wait_for(lambda: (x := self.client.get(r.id)).last_error and x, what="the retry")
                self.assertEqual((run.status, run.last_error), ("pending", f"try again {i}"))
        fail_calls = statements.sizes("fail_runs")
        self.assertEqual(sum(fail_calls), n, fail_calls)
        self.assertLess(len(fail_calls), n, f"one fail_runs call per run: {fail_calls}")
        self.assertGreater(max(fail_calls), 1, fail_calls)

    def test_a_bad_row_fails_only_its_own_run(self):
        # A first run's step write and outcome write are held until every
        # other handler has queued its own: those then go in one batch each,
        # good rows and bad ones together.
        statements = Statements(hold=("record_steps", "complete_runs"))
        kinds = ["fine"] * 9 + ["nul_step", "nul_result", "deep_result", "error"]
        stepping, returning = [], []
        seen = {}

        def deep(n):
            v = []
            for _ in range(n - 1):
                v = [v]
            return v

        def handler(task):
            kind = task.payload["kind"]
            if kind != "first":
                self.assertTrue(statements.held["record_steps"].wait(30))
                stepping.append(task.id)
            output = {"v": "a\u0000b"} if kind == "nul_step" else {"kind": kind}
            try:
                task.step("work", lambda: output)
            except PermanentError as e:
                seen[task.id] = e
                returning.append(task.id)
                raise
            returning.append(task.id)
            if kind == "nul_result":
                return {"v": "a\u0000b"}
            if kind == "deep_result":
                return {"v": deep(MAX_JSON_DEPTH)}
            if kind == "error":
                raise RuntimeError("a plain failure")
            return {"ok": True}

        runs = {k: [] for k in set(kinds) | {"first"}}
        for kind in ["first"] + kinds:
            runs[kind].append(self.client.create("pybad.row.v1", {"kind": kind}, max_attempts=1).id)
        poller, thread, _ = self.start_poller(
            type_prefixes=["pybad."], concurrency=len(kinds) + 1, connect=statements.connect(self.url)
        )
        poller.handle("pybad.row.v1", handler)
        self.assertTrue(statements.held["record_steps"].wait(30), "the first step was not written")
        wait_for(lambda: len(stepping) == len(kinds), what="every other handler to reach its step")
        time.sleep(0.2)  # they queue their steps
        statements.released["record_steps"].set()
        self.assertTrue(statements.held["complete_runs"].wait(30), "the first outcome was not written")
        wait_for(lambda: len(returning) == len(kinds) + 1, what="every handler to return")
        time.sleep(0.2)  # they queue their outcomes
        statements.released["complete_runs"].set()

        self.assertEqual(self.wait_status(runs["first"][0], "succeeded", timeout=30).result, {"ok": True})
        for run_id in runs["fine"]:
            run = self.wait_status(run_id, "succeeded", timeout=30)
            self.assertEqual((run.attempt, run.result), (1, {"ok": True}))
            self.assertEqual(
                [(s.name, s.output) for s in self.client.steps(run_id)], [("work", {"kind": "fine"})]
            )
        (nul_step,) = runs["nul_step"]
        run = self.wait_status(nul_step, "failed", timeout=30)
        self.assertEqual(run.attempt, 1)
        self.assertTrue(run.last_error.startswith("invalid input: "), run.last_error)
        self.assertIn("Unicode escape", run.last_error)
        self.assertIsInstance(seen[nul_step], PermanentError)
        self.assertEqual(self.client.steps(nul_step), [])
        (nul_result,) = runs["nul_result"]
        run = self.wait_status(nul_result, "failed", timeout=30)
        self.assertIn("the handler's result could not be stored", run.last_error)
        self.assertIsNone(run.result)
        (deep_result,) = runs["deep_result"]
        run = self.wait_status(deep_result, "failed", timeout=30)
        self.assertIn("nests deeper than 64 levels", run.last_error)
        self.assertEqual([s.name for s in self.client.steps(deep_result)], ["work"])
        (error,) = runs["error"]
        self.assertEqual(self.wait_status(error, "failed", timeout=30).last_error, "a plain failure")
        self.assertTrue(thread.is_alive(), "the worker died")

        # One batch held every other step, and one every other outcome: the
        # database refused each (a NUL escape), and it was written again row
        # by row, so that only the bad row failed.
        with statements.lock:
            steps = list(statements.calls["record_steps"])
            completions = list(statements.calls["complete_runs"])
        self.assertEqual(steps[:2], [(1, False), (len(kinds), True)], steps)
        self.assertEqual(sorted(steps[2:]), [(1, False)] * (len(kinds) - 1) + [(1, True)], steps)
        results = len(kinds) - 2  # nul_step and error fail
        self.assertEqual(completions[:2], [(1, False), (results, True)], completions)
        self.assertEqual(sorted(completions[2:]), [(1, False)] * (results - 1) + [(1, True)], completions)


class FunctionsOnlyTest(InboxTest):
    def test_the_sdk_holds_no_query_on_a_table(self):
        """In the package's SQL, every workflow.<name> is a function call; nothing inserts, updates or deletes."""
        found, queries = [], 0
        for name in sorted(os.listdir(SDK)):
            if not name.endswith(".py"):
                continue
            with open(os.path.join(SDK, name), encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.JoinedStr):
                    text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    text = node.value
                else:
                    continue
                if re.search(r"(?i)\b(insert\s+into|update\s+workflow\.|delete\s+from)\b", text):
                    found.append(f"{name}: {text.strip()[:80]}")
                if not re.search(r"(?i)\bselect\b", text) or "workflow." not in text:
                    continue
                queries += 1
                for m in re.finditer(r"workflow\.([a-z_]+)(\s*\()?", text):
                    if m.group(2) is None:
                        found.append(
                            f"{name}: workflow.{m.group(1)} is read as a table in {text.strip()[:80]!r}"
                        )
        self.assertEqual(found, [])
        self.assertGreater(queries, 10, "the scan found the package's queries")

    def test_each_client_call_is_one_function_call(self):
        statements = Statements()
        client = simpleworkflow.Client(connect=statements.connect(self.url))
        with client:
            first = client.create("pyfn.job.v1", {"n": 1}, idempotency_key="k", deadline=60)
            again = client.create("pyfn.job.v1", {"n": 2}, idempotency_key="k")
            client.create_many([{"type": "pyfn.job.v1"}])
            run = client.get(first.id)
            client.list(type_prefix="pyfn.")
            client.steps(first.id)
            client.events(first.id)
            client.signal(first.id, "go")
            client.cancel(first.id)
        self.assertEqual((first.created, again.created, again.id), (True, False, first.id))
        self.assertEqual(run.payload, {"n": 1})
        # The deadline is the database's: its clock at the insert plus 60 s.
        ((exact,),) = self.sql(
            "select deadline_at = created_at + interval '60 seconds' from workflow.workflow_run "
            "where id = %s",
            (first.id,),
        )
        self.assertTrue(exact)
        calls = [re.sub(r"\s+", " ", q).strip() for q in statements.queries]
        self.assertEqual(len(calls), 9, calls)
        for q in calls:
            self.assertRegex(q, r"^select .*\bworkflow\.[a-z_]+\(", q)
            self.assertNotRegex(q, r"from workflow\.workflow_", q)
        self.assertIn("workflow.create_run(", calls[0])
        self.assertIn("workflow.create_run(", calls[1])
        for i, fn in [(3, "get_run"), (4, "list_runs"), (5, "run_steps"), (6, "run_events")]:
            self.assertIn(f"workflow.{fn}(", calls[i])


if __name__ == "__main__":
    unittest.main()
