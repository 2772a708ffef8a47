"""Transactional steps (Task.step_tx) against a real Postgres and real workers: the body's writes and
the step's journal entry commit together, under the lease fence, whatever happens to the worker.

Run as a script with ``worker URL WORKER_ID``, this file is the worker process the SIGKILL tests
start: it serves py.transfer.v1, a run with one transactional step.
"""

import logging
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import unittest
from contextlib import contextmanager
from datetime import timedelta

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from simpleworkflow import Poller, PermanentError, StoppedError, Task  # noqa: E402
from simpleworkflow import tracing  # noqa: E402
from tests import support  # noqa: E402
from tests.support import InboxTest, wait_for  # noqa: E402

logging.basicConfig(level=logging.WARNING)

RETRY_FAST = timedelta(milliseconds=100)

#: The table the steps' bodies write to. It has no unique key on purpose: a
#: write made twice shows as two rows.
LEDGER_DDL = (
    "create table public.step_tx_ledger (run_id uuid not null, step text not null, attempt int not null)"
)

#: How many times the worker process ran the transfer body, counted outside its transaction.
BODIES_DDL = """create table public.step_tx_bodies (
    run_id uuid not null, step text not null, n int not null, primary key (run_id, step))"""


# The worker process ---------------------------------------------------------------


def transfer_handler(connect):
    """py.transfer.v1: one transactional step that writes a ledger row; the payload's holdInBody
    holds the first attempt inside the body after its write, holdAfterStep after the step committed."""

    def count(run_id):
        with connect() as conn:
            conn.execute(
                "insert into public.step_tx_bodies (run_id, step, n) values (%s, 'transfer', 1) "
                "on conflict (run_id, step) do update set n = step_tx_bodies.n + 1",
                (run_id,),
            )

    def handle(run):
        def body(conn):
            conn.execute(
                "insert into public.step_tx_ledger (run_id, step, attempt) values (%s, 'transfer', %s)",
                (run.id, run.attempt),
            )
            count(run.id)  # after the write
            if run.attempt == 1 and run.payload.get("holdInBody"):
                run.wait(60)
            return {"attempt": run.attempt}

        rec = run.step_tx("transfer", body)
        if run.attempt == 1 and run.payload.get("holdAfterStep"):
            run.wait(60)
        return {"transfer": rec}

    return handle


def worker_main(url, worker_id):
    """Serve py.transfer.v1 until SIGTERM; every connection carries the worker's id as application_name."""

    def connect():
        return psycopg.connect(url, autocommit=True, application_name=worker_id, connect_timeout=10)

    poller = Poller(
        type_prefixes=["py.transfer."],
        worker_id=worker_id,
        poll_interval=0.1,
        shutdown_grace_period=0.5,
        connect=connect,
    )
    poller.handle("py.transfer.v1", transfer_handler(connect))
    poller.run()


# The tests ------------------------------------------------------------------------


class StepTxTest(InboxTest):
    def setUp(self):
        super().setUp()
        self.sql(LEDGER_DDL)

    def ledger(self, run_id):
        """{step: [attempt, ...]} of the run's ledger rows."""
        rows = {}
        for step, attempt in self.sql(
            "select step, attempt from public.step_tx_ledger where run_id = %s " "order by step, attempt",
            (run_id,),
        ):
            rows.setdefault(step, []).append(attempt)
        return rows

    def journal(self, run_id):
        return [
            (s.name, s.position, s.kind, s.outcome, s.output, s.attempt) for s in self.client.steps(run_id)
        ]

    def test_writes_once_across_retries(self):
        """A retried attempt replays a committed step without running its body; a body that raises
        after its write rolls the write back, so its retry writes once too."""
        poller, _, _ = self.start_poller(type_prefixes=["py.txstep."])
        runs = {"debit": 0, "credit": 0}

        def handler(run):
            def debit(conn):
                runs["debit"] += 1
                conn.execute(
                    "insert into public.step_tx_ledger values (%s, 'debit', %s)", (run.id, run.attempt)
                )
                return 42

            def credit(conn):
                runs["credit"] += 1
                conn.execute(
                    "insert into public.step_tx_ledger values (%s, 'credit', %s)", (run.id, run.attempt)
                )
                if run.attempt == 1:
                    raise RuntimeError("the credit body fails after its write")
                return "ok"

            n = run.step_tx("debit", debit)
            c = run.step_tx("credit", credit)
            if run.attempt < 3:
                raise RuntimeError("after both steps: the next attempt replays them")
            return {"n": n, "c": c}

        poller.handle("py.txstep.a.v1", handler)
        res = self.client.create("py.txstep.a.v1", {}, retry_base_delay=RETRY_FAST)
        run = self.wait_status(res.id, "succeeded", timeout=30)
        self.assertEqual((run.attempt, run.result), (3, {"n": 42, "c": "ok"}))
        self.assertEqual(runs, {"debit": 1, "credit": 2}, "debit's body ran again, or credit's did not retry")
        self.assertEqual(self.ledger(res.id), {"debit": [1], "credit": [2]})
        self.assertEqual(
            self.journal(res.id), [("debit", 0, "step", "ok", 42, 1), ("credit", 1, "step", "ok", "ok", 2)]
        )

    def test_lease_lost_commits_nothing(self):
        """A worker that lost its lease while the body ran commits nothing: the body's write is rolled
        back with the refused journal entry, and the attempt that follows writes once."""
        poller, _, _ = self.start_poller(type_prefixes=["py.txlost."])
        in_body = threading.Event()
        release = threading.Event()
        lost = queue.Queue()
        runs = {"debit": 0}

        def handler(run):
            def debit(conn):
                runs["debit"] += 1
                conn.execute(
                    "insert into public.step_tx_ledger values (%s, 'debit', %s)", (run.id, run.attempt)
                )
                if run.attempt == 1:
                    in_body.set()
                    release.wait(30)
                return 1

            try:
                run.step_tx("debit", debit)
            except BaseException as e:
                if run.attempt == 1:
                    lost.put(e)
                raise
            if run.attempt == 1:
                lost.put(None)
            return {"done": True}

        poller.handle("py.txlost.a.v1", handler)
        res = self.client.create("py.txlost.a.v1", {}, retry_base_delay=RETRY_FAST)
        self.assertTrue(in_body.wait(30), "the body never ran")
        # The lease expires and is reaped while the body holds its uncommitted write.
        self.expire_lease(res.id)
        release.set()
        err = lost.get(timeout=30)
        self.assertIsInstance(err, StoppedError, f"the first attempt's step returned {err!r}")
        self.assertEqual(err.reason, "lease lost")
        run = self.wait_status(res.id, "succeeded", timeout=30)
        self.assertEqual((run.attempt, run.result), (2, {"done": True}))
        self.assertEqual(
            self.ledger(res.id), {"debit": [2]}, "the write of the attempt without the lease stayed"
        )
        self.assertEqual(runs["debit"], 2)
        self.assertEqual(self.journal(res.id), [("debit", 0, "step", "ok", 1, 2)])

    def test_a_duplicate_rolls_back_and_returns_the_journaled_value(self):
        """When the journal already has the step from the same lease (a write whose answer was lost),
        the body's writes are rolled back and the value journaled first is returned."""
        poller, _, _ = self.start_poller(type_prefixes=["py.txdup."])

        def handler(run):
            def body(conn):
                conn.execute(
                    "insert into public.step_tx_ledger values (%s, 'pick', %s)", (run.id, run.attempt)
                )
                # Another writer holding the same lease journals the step first.
                self.sql(
                    "select status from workflow.record_steps(%s, %s::uuid[], %s::bigint[], %s::text[], "
                    "%s::int[], %s::jsonb[])",
                    (run.worker_id, [run.id], [run.lease_token], ["pick"], [0], ['{"by": "twin"}']),
                )
                return {"by": "body"}

            return {"pick": run.step_tx("pick", body)}

        poller.handle("py.txdup.v1", handler)
        res = self.client.create("py.txdup.v1", {})
        run = self.wait_status(res.id, "succeeded")
        self.assertEqual((run.attempt, run.result), (1, {"pick": {"by": "twin"}}))
        self.assertEqual(self.ledger(res.id), {}, "the body's write stayed with a duplicate journal entry")
        self.assertEqual(self.journal(res.id), [("pick", 0, "step", "ok", {"by": "twin"}, 1)])

    def test_a_body_that_ends_its_transaction_is_refused(self):
        """The body must not commit or roll back: conn.commit() raises psycopg's ProgrammingError (and
        nothing stays), a COMMIT statement or a psycopg.Rollback is a PermanentError; nothing is journaled."""
        poller, _, _ = self.start_poller(type_prefixes=["py.txmisuse."])

        def handler(run):
            def write(conn, step):
                conn.execute(
                    "insert into public.step_tx_ledger values (%s, %s, %s)", (run.id, step, run.attempt)
                )

            def commits(conn):
                write(conn, "commit-call")
                conn.commit()

            def commit_statement(conn):
                write(conn, "commit-statement")
                conn.execute("commit")
                return 1

            def rolls_back(conn):
                write(conn, "rollback")
                raise psycopg.Rollback()

            def bad_output(conn):
                write(conn, "bad-output")
                return {1, 2}

            seen = {}
            for name, fn in (("a", commits), ("b", commit_statement), ("c", rolls_back), ("d", bad_output)):
                try:
                    seen[name] = ["returned", run.step_tx(name, fn)]
                except Exception as e:  # noqa: BLE001
                    seen[name] = [type(e).__name__, str(e)]
            seen["ok"] = run.step_tx("ok", lambda conn: "fine")
            return seen

        poller.handle("py.txmisuse.v1", handler)
        res = self.client.create("py.txmisuse.v1", {})
        result = self.wait_status(res.id, "succeeded").result
        self.assertEqual(result["a"][0], "ProgrammingError")
        self.assertEqual(
            result["b"],
            [
                "PermanentError",
                'step "b": the step\'s function ended its transaction; ' "it must not commit or roll back",
            ],
        )
        self.assertEqual(
            result["c"],
            [
                "PermanentError",
                'step "c": the step\'s function rolled back its '
                "transaction; it must not commit or roll back",
            ],
        )
        self.assertEqual(result["d"][0], "PermanentError")
        self.assertIn("not JSON-serialisable", result["d"][1])
        self.assertEqual(result["ok"], "fine")
        # Only the write committed by the body's own COMMIT stayed.
        self.assertEqual(self.ledger(res.id), {"commit-statement": [1]})
        self.assertEqual([s.name for s in self.client.steps(res.id)], ["ok"])


class _Recorder:
    def __init__(self):
        self.attributes = {}

    def set(self, key, value):
        self.attributes[key] = value


class _FakeTracing:
    """Stands in for Tracing: records the step spans' names and attributes."""

    def __init__(self):
        self.spans = []

    @contextmanager
    def step(self, attempt_span, kind, name, run_id, attempt):
        span = _Recorder()
        self.spans.append((kind, name, span.attributes))
        yield span


class ReplayTest(unittest.TestCase):
    def test_a_replay_returns_the_journal_without_a_connection(self):
        """A journaled step_tx returns its output without calling the body or opening a transaction;
        its span is marked transactional, as the Go SDK's is."""
        traced = _FakeTracing()

        def no_connection():
            raise AssertionError("a replay opened a connection")

        task = Task(
            "00000000-0000-0000-0000-000000000001",
            "py.replay.v1",
            {},
            2,
            3,
            "worker",
            lease_token=7,
            connect=no_connection,
            tracing=traced,
            span=object(),
            journal=[{"name": "pay", "position": 0, "kind": "step", "outcome": "ok", "output": {"id": 9}}],
        )

        def body(conn):
            raise AssertionError("a replay called the body")

        self.assertEqual(task.step_tx("pay", body), {"id": 9})
        self.assertEqual(
            traced.spans,
            [
                (
                    "step",
                    "pay",
                    {tracing.ATTR_STEP_POS: 0, tracing.ATTR_REPLAYED: True, tracing.ATTR_STEP_TX: True},
                )
            ],
        )
        self.assertEqual(tracing.ATTR_STEP_TX, "simpleworkflow.step.transactional")


class WorkerKilledTest(InboxTest):
    """A worker process SIGKILLed at each point of a transactional step; another one finishes the run."""

    def setUp(self):
        super().setUp()
        self.sql(LEDGER_DDL)
        self.sql(BODIES_DDL)

    def worker(self, worker_id):
        log = tempfile.TemporaryFile(mode="w+")
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "worker", self.url, worker_id],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def stop():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

        self.addCleanup(stop)
        return proc

    def sessions(self, worker_id):
        return self.sql("select count(*) from pg_stat_activity where application_name = %s", (worker_id,))[0][
            0
        ]

    def bodies(self, run_id):
        return self.sql("select coalesce(sum(n), 0) from public.step_tx_bodies where run_id = %s", (run_id,))[
            0
        ][0]

    def kill_and_finish(self, name, payload, at, bodies, survivor, hold_journal=False):
        lock = psycopg.connect(self.url, autocommit=True)
        self.addCleanup(lock.close)
        if hold_journal:
            # The journal write waits, after inserting the step's entry, on a
            # lock the test holds: the worker has written its ledger row and
            # its journal entry and has not sent its commit.
            with open(
                os.path.join(support.ROOT, "testdata", "steptx", "hold_journal.sql"), encoding="utf-8"
            ) as f:
                self.sql(f.read())
            lock.execute("select pg_advisory_lock(0, 4242)")
        first_id, second_id = f"{name}-a", f"{name}-b"
        first = self.worker(first_id)
        res = self.client.create("py.transfer.v1", payload)
        at(res.id)
        first.send_signal(signal.SIGKILL)
        self.assertEqual(first.wait(timeout=10), -signal.SIGKILL)
        if hold_journal:
            # The orphaned session goes on once the lock is free, finds its
            # client gone and rolls back: no commit was ever sent.
            lock.execute("select pg_advisory_unlock(0, 4242)")
        wait_for(lambda: self.sessions(first_id) == 0, timeout=30, what="the killed worker's sessions to end")
        # Its lease runs out (sooner than waiting for it) and is reaped.
        self.sql(
            "update workflow.workflow_run set lease_until = now() - interval '1 second' "
            "where id = %s and status = 'leased'",
            (res.id,),
        )
        self.sql("select workflow.reap_expired_leases(10)")
        self.worker(second_id)
        run = self.wait_status(res.id, "succeeded", timeout=60)
        self.assertEqual((run.attempt, run.leased_by), (2, second_id))
        self.assertEqual(run.result, {"transfer": {"attempt": survivor}})
        self.assertEqual(
            self.sql("select attempt from public.step_tx_ledger where run_id = %s", (res.id,)),
            [(survivor,)],
            f"want exactly one ledger row, from attempt {survivor}",
        )
        self.assertEqual(self.bodies(res.id), bodies)
        self.assertEqual([(s.name, s.attempt) for s in self.client.steps(res.id)], [("transfer", survivor)])

    def test_killed_inside_the_body_after_its_write(self):
        self.kill_and_finish(
            "tx-kill-body",
            {"holdInBody": True},
            at=lambda run_id: wait_for(lambda: self.bodies(run_id) == 1, timeout=30, what="the body's write"),
            bodies=2,
            survivor=2,
        )

    def test_killed_between_the_journal_write_and_the_commit(self):
        def waiting(run_id):
            return (
                self.sql(
                    "select count(*) from pg_locks l join pg_stat_activity a using (pid) "
                    "where l.locktype = 'advisory' and not l.granted and l.objid = 4242 "
                    "and a.application_name = 'tx-kill-journal-a'"
                )[0][0]
                == 1
            )

        self.kill_and_finish(
            "tx-kill-journal",
            {},
            hold_journal=True,
            at=lambda run_id: wait_for(
                lambda: waiting(run_id), timeout=30, what="the journal write to wait on the lock"
            ),
            bodies=2,
            survivor=2,
        )

    def test_killed_after_the_commit_before_the_outcome(self):
        self.kill_and_finish(
            "tx-kill-commit",
            {"holdAfterStep": True},
            at=lambda run_id: wait_for(
                lambda: len(self.client.steps(run_id)) == 1, timeout=30, what="the step to be journaled"
            ),
            bodies=1,
            survivor=1,
        )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "worker":
        worker_main(sys.argv[2], sys.argv[3])
    else:
        unittest.main()
