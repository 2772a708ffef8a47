"""A worker that claims again a run whose lease an attempt of its own lost (pkg/simpleworkflow/reclaim_test.go)."""

import json
import logging
import os
import sys
import threading
import time
import unittest


sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from simpleworkflow import PermanentError  # noqa: E402
from tests.support import InboxTest  # noqa: E402


class _OutcomeWatch(logging.Handler):
    """Sets seen once the worker logged the outcome of attempt 1 of a run (whatever it was)."""

    def __init__(self):
        super().__init__()
        self.seen = threading.Event()

    def emit(self, record):
        try:
            fields = json.loads(record.getMessage())
        except ValueError:
            return
        if (
            fields.get("msg") in ("Run stopped", "Run result discarded: the lease was no longer held")
            and fields.get("attempt") == 1
        ):
            self.seen.set()


class ReclaimTest(InboxTest):
    def test_reclaimed_run_outlives_its_older_attempt(self):
        """The older attempt is told its lease is gone; its outcome, written first, does not take the
        newer attempt's entry with it: the newer result is written at once (not after its lease runs
        out), and every slot of the worker is free afterwards."""
        watch = _OutcomeWatch()
        logger = logging.getLogger("simpleworkflow")
        logger.addHandler(watch)
        self.addCleanup(logger.removeHandler, watch)
        if logger.getEffectiveLevel() > logging.INFO:
            level = logger.level
            logger.setLevel(logging.INFO)
            self.addCleanup(logger.setLevel, level)

        first_in, second_in = threading.Event(), threading.Event()
        first_reason = []

        def handler(run):
            if run.attempt == 1:
                first_in.set()
                second_in.wait(30)
                # Give the cancel that came with the new claim a moment to land, if it is coming.
                run.cancelled.wait(2)
                first_reason.append(run.reason)
                return {"attempt": 1}
            second_in.set()
            # Return only after the older attempt's outcome was written, the
            # order in which that outcome used to take this attempt's entry.
            if not watch.seen.wait(30):
                raise RuntimeError("the first attempt's outcome was never logged")
            time.sleep(0.2)
            return {"attempt": run.attempt}

        barrier = threading.Barrier(2, timeout=20)

        def together(run):
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                raise PermanentError("the other run never ran beside this one")
            return True

        poller, _, _ = self.start_poller(
            type_prefixes=["py.reclaim."], concurrency=2, lease_duration=60, poll_interval=0.05
        )
        poller.handle("py.reclaim.a.v1", handler)
        poller.handle("py.reclaim.pair.v1", together)
        res = self.client.create("py.reclaim.a.v1", {}, retry_base_delay=0.001)
        self.assertTrue(first_in.wait(30), "the first attempt never ran")
        # The lease expires and is reaped while the first handler still runs.
        self.expire_lease(res.id)

        run = self.wait_status(res.id, "succeeded", timeout=20)
        self.assertEqual((run.attempt, run.result), (2, {"attempt": 2}))
        self.assertEqual(first_reason, ["lease lost"])

        # Both slots are free: two runs that finish only together both finish.
        ids = [self.client.create("py.reclaim.pair.v1", {}).id for _ in range(2)]
        for run_id in ids:
            self.assertEqual(
                self.wait_status(run_id, "succeeded", timeout=30).attempt,
                1,
                f"run {run_id} was retried: a slot was not freed",
            )


if __name__ == "__main__":
    unittest.main()
