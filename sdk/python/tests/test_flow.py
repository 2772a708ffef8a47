"""Flow limits through the Python SDK: a run's concurrency key, and a type's limit per key kept by the claim.

The limits themselves are the registry's (workflow.put_registry, as the owner); the SDK only gives a run
its key (create(concurrency_key=), create_many rows) and shows it (Run.concurrency_key, wait.kind "limit").
"""

import logging
import os
import sys
import threading
import time
import unittest

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from simpleworkflow import (
    MAX_CONCURRENCY_KEY_LENGTH,
    WAIT_KIND_LIMIT,
    InvalidInputError,
    Poller,
)  # noqa: E402
from tests import support  # noqa: E402
from tests.support import InboxTest, wait_for  # noqa: E402

logging.basicConfig(level=logging.WARNING)

FLOW_TYPE = "flow.per_key.v1"


def tearDownModule():
    support.stop_server()


class ConcurrencyKeyTest(InboxTest):
    def runs(self):
        return self.sql("select count(*) from workflow.workflow_run")[0][0]

    def test_key_is_stored_and_read_back(self):
        one = self.client.create("flow.keyed.v1", {}, concurrency_key="customer:acme")
        run = self.client.get(one.id)
        self.assertEqual(run.concurrency_key, "customer:acme")
        self.assertEqual(
            self.sql("select concurrency_key from workflow.workflow_run where id = %s", (one.id,)),
            [("customer:acme",)],
        )
        # The longest key, and one of characters beyond ASCII (counted as characters, as Go counts runes).
        longest = "k" * MAX_CONCURRENCY_KEY_LENGTH
        wide = "é" * MAX_CONCURRENCY_KEY_LENGTH
        for key in (longest, wide):
            with self.subTest(key=key[:3] + "..."):
                self.assertEqual(
                    self.client.get(
                        self.client.create("flow.keyed.v1", concurrency_key=key).id
                    ).concurrency_key,
                    key,
                )
        # None and "" set no key.
        for key in (None, ""):
            with self.subTest(key=key):
                run = self.client.get(self.client.create("flow.keyed.v1", concurrency_key=key).id)
                self.assertIsNone(run.concurrency_key)
        # create_many: per row, with rows without a key between them.
        made = self.client.create_many(
            [
                {"type": "flow.keyed.v1", "concurrency_key": "a"},
                {"type": "flow.keyed.v1"},
                {"type": "flow.keyed.v1", "concurrency_key": ""},
                {"type": "flow.keyed.v1", "concurrency_key": "b", "idempotency_key": "many-b"},
            ]
        )
        self.assertEqual([self.client.get(m.id).concurrency_key for m in made], ["a", None, None, "b"])
        # In list pages too.
        listed = {
            r.id: r.concurrency_key for r in self.client.list(type_prefix="flow.keyed.", limit=1000).runs
        }
        self.assertEqual(listed[one.id], "customer:acme")
        self.assertEqual(listed[made[3].id], "b")

    def test_bad_keys_are_refused_before_anything_is_stored(self):
        bad = {
            "256 characters": ("k" * (MAX_CONCURRENCY_KEY_LENGTH + 1), "256 characters, at most 255"),
            "a NUL": ("a\x00b", "without NUL"),
            "not text (a lone surrogate)": ("a\ud800", "UTF-8 text"),
            "not a string": (42, "must be a string"),
        }
        before = self.runs()
        for why, (key, words) in bad.items():
            with self.subTest(key=why):
                with self.assertRaises(InvalidInputError) as caught:
                    self.client.create("flow.keyed.v1", {}, concurrency_key=key)
                self.assertIn("concurrency key", str(caught.exception))
                self.assertIn(words, str(caught.exception))
                with self.assertRaises(InvalidInputError) as caught:
                    self.client.create_many(
                        [
                            {"type": "flow.keyed.v1", "concurrency_key": "fine"},
                            {"type": "flow.keyed.v1", "concurrency_key": key},
                        ]
                    )
                self.assertIn("row 2", str(caught.exception))
                self.assertIn("concurrency key", str(caught.exception))
                self.assertEqual(self.runs(), before, f"{why}: something was recorded")
        self.assertEqual(self.sql("select count(*) from workflow.workflow_event")[0][0], 0)

    def test_create_in_the_callers_transaction_keeps_the_key(self):
        with psycopg.connect(self.url) as conn:
            res = self.client.create("flow.keyed.v1", {}, concurrency_key="tx", conn=conn)
            (many,) = self.client.create_many(
                [{"type": "flow.keyed.v1", "concurrency_key": "tx-many"}], conn=conn
            )
            conn.commit()
        self.assertEqual(self.client.get(res.id).concurrency_key, "tx")
        self.assertEqual(self.client.get(many.id).concurrency_key, "tx-many")


class FlowLimitTest(InboxTest):
    def put_limit(self, wtype, max_leased_per_key):
        """The type's registry entry, written as the owner (a Python runtime, at most N leased per key)."""
        self.sql(
            "select workflow.put_registry(%s, 'python', true, '', null, null, null, null, %s::integer)",
            (wtype, max_leased_per_key),
        )
        self.assertEqual(
            self.sql(
                "select max_leased_per_key from workflow.workflow_registry where workflow_name = %s", (wtype,)
            ),
            [(max_leased_per_key,)],
        )

    def leased_of_key(self, key):
        return self.sql(
            "select count(*) from workflow.workflow_run"
            " where type = %s and concurrency_key = %s and status = 'leased'",
            (FLOW_TYPE, key),
        )[0][0]

    def test_one_run_of_a_key_at_a_time_beside_other_keys(self):
        self.put_limit(FLOW_TYPE, 1)

        # Runs of key "a" wait at the gate (bounded) and then sleep briefly; the others go at once.
        gate = threading.Event()
        lock = threading.Lock()
        in_flight = {"a": 0}
        most_in_flight = {"a": 0}
        attempts = {}

        def handler(task):
            key = task.payload["key"]
            with lock:
                attempts.setdefault(task.id, []).append(task.attempt)
                if key == "a":
                    in_flight["a"] += 1
                    most_in_flight["a"] = max(most_in_flight["a"], in_flight["a"])
            try:
                if key == "a":
                    if not gate.wait(30):
                        raise RuntimeError("the gate never opened")
                    time.sleep(0.2)
                return {"key": key}
            finally:
                if key == "a":
                    with lock:
                        in_flight["a"] -= 1

        a_runs = [
            self.client.create(FLOW_TYPE, {"key": "a", "n": i}, concurrency_key="a").id for i in range(3)
        ]
        (b_run,) = [
            r.id
            for r in self.client.create_many(
                [{"type": FLOW_TYPE, "payload": {"key": "b"}, "concurrency_key": "b"}]
            )
        ]
        bystander = self.client.create(FLOW_TYPE, {"key": None}).id
        everything = a_runs + [b_run, bystander]

        # From the database, every few milliseconds while the runs go: how many runs of "a" are leased.
        samples = []
        sampling = threading.Event()

        def sample():
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not sampling.is_set():
                    samples.append(
                        conn.execute(
                            "select count(*) from workflow.workflow_run"
                            " where type = %s and concurrency_key = 'a' and status = 'leased'",
                            (FLOW_TYPE,),
                        ).fetchone()[0]
                    )
                    time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()

        def stop_sampling():
            sampling.set()
            sampler.join(10)

        self.addCleanup(stop_sampling)

        # The handler is in place before the worker's first claim (a run claimed without one would fail).
        poller = Poller(
            self.url, type_prefixes=["flow."], worker_id="py-flow", concurrency=10, poll_interval=0.1
        )
        poller.handle(FLOW_TYPE, handler)
        worker = threading.Thread(target=poller.run, kwargs={"install_signal_handlers": False}, daemon=True)
        worker.start()

        def stop_worker():
            gate.set()
            poller.stop()
            worker.join(30)
            self.assertFalse(worker.is_alive(), "poller did not stop")

        self.addCleanup(stop_worker)

        # One run of "a" holds the key; "b" and the run without a key run beside it and finish.
        wait_for(lambda: self.leased_of_key("a") == 1, timeout=15, what="a run of key a to be leased")
        self.wait_status(b_run, "succeeded")
        self.wait_status(bystander, "succeeded")

        # The other two of "a" are held back: pending, parked on the limit, no attempt spent.
        def held():
            runs = [self.client.get(i) for i in a_runs]
            waiting = [
                r
                for r in runs
                if r.status == "pending" and r.wait is not None and r.wait.kind == WAIT_KIND_LIMIT
            ]
            return len(waiting) == 2 and waiting

        waiting = wait_for(held, timeout=15, what="two runs of key a to wait on the limit")
        for run in waiting:
            self.assertEqual(run.wait.kind, "limit")
            self.assertEqual(run.concurrency_key, "a")
            self.assertEqual(run.attempt, 0)
            self.assertIsNone(run.leased_by)
        self.assertEqual(self.leased_of_key("a"), 1)
        with lock:
            self.assertEqual(in_flight["a"], 1)

        # Open the gate: the three of "a" go one after the other.
        gate.set()
        for run_id in a_runs:
            self.wait_status(run_id, "succeeded", timeout=30)
        stop_sampling()

        self.assertTrue(samples, "the sampler took no sample")
        self.assertEqual(max(samples), 1, "more than one run of key a was leased at once")
        with lock:
            self.assertEqual(most_in_flight["a"], 1, "more than one handler of key a ran at once")
        for run_id in everything:
            with self.subTest(run=run_id):
                run = self.client.get(run_id)
                self.assertEqual(run.status, "succeeded")
                self.assertEqual(run.attempt, 1)
                self.assertIsNone(run.wait)
                with lock:
                    self.assertEqual(attempts[run_id], [1])
        self.assertEqual(self.client.get(b_run).concurrency_key, "b")
        bystanding = self.client.get(bystander)
        self.assertIsNone(bystanding.concurrency_key)
        self.assertEqual(bystanding.result, {"key": None})
        # Held back or not, each run started once and wrote no retry.
        for run_id in everything:
            with self.subTest(trail=run_id):
                trail = self.trail(run_id)
                self.assertEqual(trail.count("started"), 1, trail)
                self.assertNotIn("failed", trail)


if __name__ == "__main__":
    unittest.main()
