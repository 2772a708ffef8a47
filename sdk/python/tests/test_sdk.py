"""Tests of the Python SDK against a real Postgres and the inbox's SQL functions."""

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest
from datetime import datetime, timedelta, timezone

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from simpleworkflow import InvalidInputError, NotFoundError, PermanentError  # noqa: E402
from tests import support  # noqa: E402
from tests.support import InboxTest, wait_for  # noqa: E402

logging.basicConfig(level=logging.WARNING)


def tearDownModule():
    support.stop_server()


def wait_listening(test):
    """Waits until the test's worker listens and its first claim has been answered."""
    wait_for(
        lambda: test.sql(
            "select count(*) filter (where query ilike 'listen%%') > 0"
            " and count(*) filter (where query like '%%claim_runs%%' and state = 'idle') > 0"
            " from pg_stat_activity where datname = current_database()"
        )[0][0],
        timeout=10,
        what="the worker to listen and poll once",
    )


class ClientTest(InboxTest):
    def test_schema_version_is_the_one_the_file_installed(self):
        with open(os.path.join(support.ROOT, "internal", "engine", "sql", "workflow.sql")) as f:
            declared = re.search(r"^select workflow\.begin_schema\((\d+)\);$", f.read(), re.M)
        assert declared is not None
        self.assertEqual(self.client.schema_version(), int(declared.group(1)))
        with psycopg.connect(self.url) as conn:
            rows = conn.execute("select version from workflow.schema_version").fetchall()
        self.assertEqual(rows, [(int(declared.group(1)),)])

    def test_create_is_idempotent_and_validated(self):
        first = self.client.create("content.thumbnail.v1", {"content_id": "c_123"}, idempotency_key="k1")
        again = self.client.create("content.thumbnail.v1", {"content_id": "other"}, idempotency_key="k1")
        self.assertTrue(first.created)
        self.assertFalse(again.created)
        self.assertEqual(first.id, again.id)
        run = self.client.get(first.id)
        self.assertEqual(run.status, "pending")
        self.assertEqual(run.payload, {"content_id": "c_123"})
        with self.assertRaises(InvalidInputError):
            self.client.create("content.thumbnail", {})
        with self.assertRaises(InvalidInputError):
            self.client.create("content.thumbnail.v1", [1, 2])  # type: ignore[arg-type]
        with self.assertRaises(NotFoundError):
            self.client.get("00000000-0000-0000-0000-000000000000")

    def test_cancel_writes_the_event(self):
        res = self.client.create("content.thumbnail.v1", {})
        self.assertTrue(self.client.cancel(res.id))
        self.assertFalse(self.client.cancel(res.id))
        self.assertEqual(self.trail(res.id), ["created", "cancelled"])

    def test_retry_brings_a_cancelled_run_back(self):
        res = self.client.create("content.thumbnail.v1", {}, max_attempts=2)
        bystander = self.client.create("content.thumbnail.v1", {"other": True})
        with self.assertRaises(InvalidInputError):
            self.client.retry(res.id)  # still pending
        self.assertTrue(self.client.cancel(res.id))
        self.assertTrue(self.client.cancel(bystander.id))
        with self.assertRaises(InvalidInputError):
            self.client.retry(res.id, attempts=0)
        with self.assertRaises(NotFoundError):
            self.client.retry("00000000-0000-0000-0000-000000000000")
        self.client.retry(res.id, by="py-test")
        run = self.client.get(res.id)
        self.assertEqual(run.status, "pending")
        self.assertEqual(run.max_attempts, 2)
        self.assertEqual(self.trail(res.id), ["created", "cancelled", "retried"])
        self.assertEqual(self.client.get(bystander.id).status, "cancelled")

    def test_create_in_the_callers_transaction(self):
        # The transactional outbox: rolled back with the caller's writes (no
        # run, no event, no worker woken); committed, a worker starts it at
        # once although its poll interval is a minute.
        self.sql("create table public.shop_order (id int primary key, run_id uuid)")
        started = []
        poller, _, _ = self.start_poller(type_prefixes=["outbox."], worker_id="py-outbox", poll_interval=60)
        poller.handle("outbox.ship.v1", lambda run: started.append(run.id))
        # The worker listens and its first claim has been answered: from now
        # on only a notification can wake it before a minute passes.
        wait_listening(self)
        with psycopg.connect(self.url) as conn:
            res = self.client.create("outbox.ship.v1", {"order": 1}, conn=conn)
            conn.execute("insert into public.shop_order values (1, %s)", (res.id,))
            conn.rollback()
        self.assertEqual(self.sql("select count(*) from workflow.workflow_run")[0][0], 0)
        self.assertEqual(self.sql("select count(*) from workflow.workflow_event")[0][0], 0)
        time.sleep(0.5)
        self.assertEqual(started, [])
        with psycopg.connect(self.url) as conn:
            res = self.client.create("outbox.ship.v1", {"order": 2}, conn=conn)
            conn.execute("insert into public.shop_order values (2, %s)", (res.id,))
            conn.commit()
        wait_for(lambda: started == [res.id], timeout=5, what="the committed run to start")

    def test_create_many(self):
        before = self.client.create("many.a.v1", {}, idempotency_key="k1")
        res = self.client.create_many(
            [
                {"type": "many.a.v1", "payload": {"n": 1}},
                {"type": "many.a.v1", "idempotency_key": "k1"},
                {
                    "type": "many.b.v1",
                    "payload": {"n": 2},
                    "idempotency_key": "k2",
                    "priority": 5,
                    "max_attempts": 7,
                    "retry_base_delay": timedelta(seconds=1),
                    "deadline": 3600,
                },
                {"type": "many.b.v1", "idempotency_key": "k2"},
            ]
        )
        self.assertEqual([r.created for r in res], [True, False, True, False])
        self.assertEqual(res[1].id, before.id)
        self.assertEqual(res[3].id, res[2].id)
        run = self.client.get(res[2].id)
        self.assertEqual((run.priority, run.max_attempts, dict(run.payload)), (5, 7, {"n": 2}))
        self.assertIsNotNone(run.deadline_at)
        self.assertEqual(self.trail(res[0].id), ["created"])
        self.assertEqual(self.client.create_many([]), [])
        # A bad row is named and nothing is written.
        for runs, want in [
            ([{"type": "many.a.v1"}, {"type": "Many"}], "row 2"),
            ([{"type": "many.a.v1", "payload": [1]}], "row 1"),
            ([{"type": "many.a.v1"}, {"type": "many.a.v1", "payload": {"a": "x\x00y"}}], "row 2"),
            ([{"type": "many.a.v1", "idempotency_key": "a\x00b"}], "row 1"),
            ([{"type": "many.a.v1", "colour": "red"}], "row 1"),
            ([{"type": "many.a.v1"}] * 10001, "at most 10000"),
        ]:
            with self.assertRaises(InvalidInputError) as cm:
                self.client.create_many(runs)
            self.assertIn(want, str(cm.exception))
        self.assertEqual(self.sql("select count(*) from workflow.workflow_run")[0][0], 3)
        # In the caller's transaction: rolled back with it.
        with psycopg.connect(self.url) as conn:
            rolled = self.client.create_many([{"type": "many.tx.v1"}], conn=conn)
            conn.rollback()
        with self.assertRaises(NotFoundError):
            self.client.get(rolled[0].id)

    def test_list_pages_in_creation_order(self):
        import base64

        a = [self.client.create("pylist.a.v1", {"n": i}).id for i in range(5)]
        b = [self.client.create("pylist.b_x.v1", {}).id for _ in range(2)]
        other = self.client.create("pylistx.a.v1", {}).id
        self.client.cancel(a[1])
        pages, cursor = [], None
        while True:
            page = self.client.list(type_prefix="pylist.a.", limit=2, after=cursor)
            pages.append([r.id for r in page.runs])
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        self.assertEqual(pages, [a[0:2], a[2:4], a[4:5]])
        # The cursor has the Go SDK's shape: base64url (no padding) of the
        # last run's creation time (RFC 3339, UTC) and its id.
        first = self.client.list(type_prefix="pylist.a.", limit=2)
        raw = base64.urlsafe_b64decode(first.next_cursor + "=" * (-len(first.next_cursor) % 4)).decode()
        at, _, last_id = raw.partition("|")
        self.assertEqual(last_id, a[1])
        self.assertRegex(at, r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
        self.assertNotIn("=", first.next_cursor)
        self.assertEqual(datetime.fromisoformat(at.replace("Z", "+00:00")), self.client.get(a[1]).created_at)
        # Filters: a literal prefix ('_' is no wildcard), statuses, every type.
        self.assertEqual([r.id for r in self.client.list(type_prefix="pylist.b_").runs], b)
        self.assertEqual([r.id for r in self.client.list(type_prefix="pylist._").runs], [])
        self.assertEqual([r.id for r in self.client.list(statuses=["cancelled"]).runs], [a[1]])
        self.assertEqual([r.id for r in self.client.list(statuses="cancelled").runs], [a[1]])
        self.assertEqual(
            [r.id for r in self.client.list(type_prefix="pylist.a.", statuses=["pending"]).runs],
            [a[0], *a[2:]],
        )
        everything = self.client.list()
        self.assertEqual([r.id for r in everything.runs], a + b + [other])
        self.assertIsNone(everything.next_cursor)
        self.assertEqual(everything.runs[0].payload, {"n": 0})
        self.assertEqual(everything.runs[0], self.client.get(a[0]))
        # Deleted runs are left out.
        self.sql("update workflow.workflow_run set deleted_at = now() where id = %s", (other,))
        self.assertNotIn(other, [r.id for r in self.client.list().runs])
        for bad in [
            {"limit": 0},
            {"limit": 1001},
            {"after": "not a cursor"},
            {"after": "%%%"},
            {"after": base64.urlsafe_b64encode(b"2024-01-01T00:00:00Z|nope").decode().rstrip("=")},
        ]:
            with self.assertRaises(InvalidInputError, msg=str(bad)):
                self.client.list(**bad)

    def test_get_reads_the_run_view(self):
        res = self.client.create(
            "pyget.job.v1",
            {"a": 1},
            retry_base_delay=timedelta(seconds=2),
            retry_max_delay=timedelta(minutes=1),
            idempotency_key="g1",
            priority=7,
        )
        run = self.client.get(res.id)
        self.assertEqual(
            (run.type, run.payload, run.priority, run.idempotency_key, run.status),
            ("pyget.job.v1", {"a": 1}, 7, "g1", "pending"),
        )
        self.assertEqual(
            (run.retry_base_delay, run.retry_max_delay), (timedelta(seconds=2), timedelta(minutes=1))
        )
        self.assertIsNone(run.started_at)
        self.assertIsNone(run.deleted_at)
        with self.assertRaises(InvalidInputError):
            self.client.get("not-a-uuid")
        self.assertEqual(self.client.steps(res.id), [])
        self.assertEqual([e.type for e in self.client.events(res.id)], ["created"])
        self.client.close()  # owns nothing: a no-op
        self.assertEqual(self.client.get(res.id).id, res.id)

    def test_poller_claims_again_after_a_notification(self):
        # A producer that commits while another transaction announces the same
        # type sends no notification of its own; the poller claims once more
        # WAKE_FOLLOW_UP after the other one's. The run falls due a second after
        # it is recorded, so only that follow-up claim can find it before the
        # poll interval (a minute).
        from simpleworkflow import poller as poller_module

        saved = poller_module.WAKE_FOLLOW_UP
        poller_module.WAKE_FOLLOW_UP = 2.0
        self.addCleanup(setattr, poller_module, "WAKE_FOLLOW_UP", saved)
        started = []
        poller, _, _ = self.start_poller(type_prefixes=["follow."], worker_id="py-follow", poll_interval=60)
        poller.handle("follow.up.v1", lambda run: started.append(run.id))
        wait_listening(self)
        key = "hashtext('workflow_run_created:' || %s), hashtext(%s)"
        with psycopg.connect(self.url, autocommit=True) as holder:
            holder.execute(f"select pg_advisory_lock({key})", ("follow.up.v1", "follow.up.v1"))
            res = self.client.create(
                "follow.up.v1", {}, run_at=datetime.now(timezone.utc) + timedelta(seconds=1)
            )
            holder.execute(
                f"select pg_notify('workflow_run_created', %s), pg_advisory_unlock({key})",
                ("follow.up.v1", "follow.up.v1", "follow.up.v1"),
            )
        wait_for(lambda: started == [res.id], timeout=20, what="the follow-up claim to start the run")

    def test_signal_in_the_callers_transaction(self):
        run = self.client.create("outbox.wait.v1", {})
        with psycopg.connect(self.url) as conn:
            self.client.signal(run.id, "approve", {"n": 1}, idempotency_key="rolled-back", conn=conn)
            conn.rollback()
            self.client.signal(run.id, "approve", {"n": 2}, idempotency_key="committed", conn=conn)
            conn.commit()
        keys = self.sql("select idempotency_key from workflow.workflow_signal where run_id = %s", (run.id,))
        self.assertEqual(keys, [("committed",)])


class PollerConfigTest(unittest.TestCase):
    def test_names_defaults_and_config(self):
        import simpleworkflow as sw

        self.assertFalse(hasattr(sw, "IntentPoller") or hasattr(sw, "RunContext"), "former names are gone")
        cfg = sw.Poller("postgres://unused").config()
        self.assertEqual(
            (
                cfg.lease_duration,
                cfg.concurrency,
                cfg.poll_interval,
                cfg.claim_batch_size,
                cfg.shutdown_grace_period,
                cfg.reap_interval,
                cfg.heartbeat_interval,
                cfg.runtime,
            ),
            (30, 10, 1, 100, 20, 5, 10, "python"),
        )
        self.assertEqual(
            (
                sw.DEFAULT_LEASE_SECONDS,
                sw.DEFAULT_CONCURRENCY,
                sw.DEFAULT_POLL_INTERVAL_SECONDS,
                sw.DEFAULT_CLAIM_BATCH_SIZE,
                sw.DEFAULT_SHUTDOWN_GRACE_SECONDS,
                sw.DEFAULT_REAP_INTERVAL_SECONDS,
            ),
            (30, 10, 1, 100, 20, 5),
        )
        cfg = sw.Poller(
            "postgres://unused",
            ["a."],
            lease_duration=6,
            worker_id="w",
            concurrency=3,
            claim_batch_size=7,
            heartbeat_interval=1.5,
        ).config()
        self.assertEqual(
            cfg,
            sw.PollerConfig(
                type_prefixes=("a.",),
                lease_duration=6,
                worker_id="w",
                runtime="python",
                concurrency=3,
                heartbeat_interval=1.5,
                poll_interval=1,
                shutdown_grace_period=20,
                reap_interval=5,
                claim_batch_size=7,
            ),
        )
        for bad in [
            {"lease_duration": 0.5},
            {"concurrency": 0},
            {"claim_batch_size": 0},
            {"claim_batch_size": 1001},
            {"heartbeat_interval": 30},
            {"runtime": "ruby"},
            {"type_prefixes": ["%"]},
            {"type_prefixes": [""]},
            {"worker_id": "w" * 201},
            {"poll_interval": -1},
        ]:
            with self.assertRaises(InvalidInputError, msg=str(bad)):
                sw.Poller("postgres://unused", **bad)
        with self.assertRaises(InvalidInputError):
            sw.Poller()


class PollerTest(InboxTest):
    def test_runs_a_handler_with_the_same_trail_as_go(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."], worker_id="py-1")
        poller.handle("py.echo.v1", lambda run: dict(run.payload))
        res = self.client.create("py.echo.v1", {"a": 1})
        run = wait_for(lambda: (r := self.client.get(res.id)).status == "succeeded" and r, what="success")
        self.assertEqual(run.result, {"a": 1})
        self.assertEqual(run.leased_by, "py-1")
        self.assertEqual(self.trail(res.id), ["created", "started", "succeeded"])

    def test_claims_only_the_types_it_has_handlers_for(self):
        # A v2 run reaching an old worker is not claimed.
        poller, _, _ = self.start_poller(type_prefixes=["pyroll."], worker_id="py-roll")
        poller.handle("pyroll.job.v1", lambda run: None)
        v2 = self.client.create("pyroll.job.v2", {})
        v1 = self.client.create("pyroll.job.v1", {})
        wait_for(lambda: self.client.get(v1.id).status == "succeeded", what="the handled run")
        run = self.client.get(v2.id)
        self.assertEqual((run.status, run.attempt), ("pending", 0))

    def test_retries_after_the_backoff_then_fails_for_good(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."], poll_interval=0.1)

        def flaky(run):
            if run.attempt < 2:
                raise RuntimeError(f"attempt {run.attempt} failed")
            return {"attempt": run.attempt}

        poller.handle("py.flaky.v1", flaky)
        poller.handle("py.doomed.v1", lambda run: (_ for _ in ()).throw(PermanentError("bad input")))
        ok = self.client.create("py.flaky.v1", {}, retry_base_delay=timedelta(hours=1))
        # The failed first attempt makes the run pending again after its
        # backoff, on the database clock: attempt² × base plus up to 10 %.
        retried = wait_for(
            lambda: (r := self.client.get(ok.id)).status == "pending" and r.attempt == 1 and r,
            what="the first attempt to fail",
        )
        backoff = retried.run_at - self.clock_now()
        self.assertTrue(timedelta(minutes=59) < backoff <= timedelta(hours=1.1), f"backoff {backoff}")
        # Within the backoff the poller claims a newer run and leaves this one
        # (an older claimable run would be claimed first); a permanent error
        # fails that run for good at once.
        doomed = self.client.create("py.doomed.v1", {}, max_attempts=5)
        run = self.wait_status(doomed.id, "failed")
        self.assertEqual(run.attempt, 1)
        self.assertEqual(run.last_error, "bad input")
        run = self.client.get(ok.id)
        self.assertEqual((run.status, run.attempt), ("pending", 1), "retried before its backoff ended")
        self.advance_clock(retried.run_at - self.clock_now())
        run = self.wait_status(ok.id, "succeeded")
        self.assertEqual(run.attempt, 2)
        self.assertEqual(self.trail(ok.id), ["created", "started", "retried", "started", "succeeded"])

    def test_cancellation_reaches_the_handler(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."], lease_duration=3)
        seen = {}
        started = threading.Event()

        def long(run):
            started.set()
            t0 = time.monotonic()
            run.cancelled.wait(60)
            seen["after"] = time.monotonic() - t0
            seen["reason"] = run.reason
            seen["is_cancelled"] = run.is_cancelled()

        poller.handle("py.long.v1", long)
        res = self.client.create("py.long.v1", {})
        self.assertTrue(started.wait(10))
        at = time.monotonic()
        self.client.cancel(res.id)
        wait_for(lambda: "reason" in seen, what="the handler to stop")
        self.assertLess(
            time.monotonic() - at, 1.5, "not stopped within one heartbeat (1s) and its round trip"
        )
        self.assertEqual(seen["reason"], "run cancelled")
        self.assertTrue(seen["is_cancelled"])
        time.sleep(0.3)
        self.assertEqual(self.client.get(res.id).status, "cancelled")

    def test_graceful_shutdown_hands_runs_back(self):
        poller, thread, stop = self.start_poller(type_prefixes=["py."], shutdown_grace_period=0.5)
        started = threading.Event()

        def long(run):
            started.set()
            if run.wait(60):
                raise RuntimeError(f"interrupted: {run.reason}")

        poller.handle("py.long.v1", long)
        res = self.client.create("py.long.v1", {})
        self.assertTrue(started.wait(10))
        stop()
        run = self.client.get(res.id)
        self.assertEqual((run.status, run.attempt), ("pending", 0))
        self.assertEqual(self.client.events(res.id)[-1].data.get("reason"), "released")

    def test_success_after_the_grace_period_is_completed(self):
        # Finished work is recorded, not handed back and redone.
        poller, thread, stop = self.start_poller(type_prefixes=["py."], shutdown_grace_period=0.2)
        started = threading.Event()
        calls = []

        def stubborn(run):
            calls.append(run.attempt)
            started.set()
            run.wait(60)
            time.sleep(0.1)  # finishes its work regardless
            return {"done": True}

        poller.handle("py.stubborn.v1", stubborn)
        res = self.client.create("py.stubborn.v1", {})
        self.assertTrue(started.wait(10))
        stop()
        run = self.client.get(res.id)
        self.assertEqual((run.status, run.result, calls), ("succeeded", {"done": True}, [1]))

    def test_poison_outcomes_affect_only_their_run(self):
        # A result Postgres cannot store fails its run for
        # good; an error text with NUL is cleaned and says so.
        poller, _, _ = self.start_poller(type_prefixes=["pypoison."])
        poller.handle("pypoison.result.v1", lambda run: {"s": "a\u0000b"})

        def nul_error(run):
            raise PermanentError("bad\x00byte")

        poller.handle("pypoison.error.v1", nul_error)
        poller.handle("pypoison.fine.v1", lambda run: {"ok": True})
        bad = self.client.create("pypoison.result.v1", {})
        nul = self.client.create("pypoison.error.v1", {})
        fine = self.client.create("pypoison.fine.v1", {})
        self.assertEqual(self.wait_status(fine.id, "succeeded").result, {"ok": True})
        run = self.wait_status(bad.id, "failed")
        self.assertEqual(run.attempt, 1)
        self.assertIn("result could not be stored", run.last_error)
        run = self.wait_status(nul.id, "failed")
        self.assertEqual(run.last_error, "badbyte [cleaned: NUL bytes removed, invalid UTF-8 replaced]")

    def test_runtime_routing_follows_the_registry(self):
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                "insert into workflow.workflow_registry (workflow_name, runtime) values ('py.go_only.v1', 'go')"
            )
        poller, _, _ = self.start_poller(type_prefixes=["py."])
        poller.handle("py.go_only.v1", lambda run: {})
        poller.handle("py.any.v1", lambda run: {})
        go_only = self.client.create("py.go_only.v1", {})
        anyrun = self.client.create("py.any.v1", {})
        wait_for(
            lambda: self.client.get(anyrun.id).status == "succeeded", what="the unregistered type to run"
        )
        self.assertEqual(self.client.get(go_only.id).status, "pending")

    def test_example_worker_process_stops_gracefully_on_sigterm(self):
        worker = subprocess.Popen(
            [
                sys.executable,
                os.path.join(support.ROOT, "sdk", "python", "examples", "example_worker.py"),
                "--database-url",
                self.url,
                "--worker-id",
                "py-proc",
                "--shutdown-grace-period",
                "0.5",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.addCleanup(lambda: worker.poll() is None and worker.kill())
        echo = self.client.create("demo.echo.v1", {"x": 1})
        wait_for(lambda: self.client.get(echo.id).status == "succeeded", what="demo.echo.v1")
        fail = self.client.create(
            "demo.fail.v1", {"failTimes": 1}, retry_base_delay=timedelta(milliseconds=100)
        )
        wait_for(lambda: self.client.get(fail.id).status == "succeeded", what="demo.fail.v1")
        self.assertEqual(self.client.get(fail.id).attempt, 2)
        sleep = self.client.create("demo.sleep.v1", {"seconds": 60})
        wait_for(lambda: self.client.get(sleep.id).status == "leased", what="demo.sleep.v1 to start")
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=20)
        self.assertEqual(worker.returncode, 0, out)
        run = self.client.get(sleep.id)
        self.assertEqual((run.status, run.attempt), ("pending", 0), out)
        self.assertIn('"msg": "Run handed back"', out)

        # What the handlers logged through task.logger is kept with their
        # runs, per attempt (that of a run handed back too), and in the
        # worker's own log with the run's id.
        def logged(run_id):
            return [(line.attempt, line.level, line.message) for line in self.client.logs(run_id)]

        self.assertEqual(logged(echo.id), [(1, "info", "echoing 1 keys")])
        self.assertEqual(
            logged(fail.id),
            [(1, "warn", "failing as planned: attempt 1 of 1"), (2, "info", "succeeding at attempt 2")],
        )
        self.assertEqual(
            logged(sleep.id),
            [(1, "info", "sleeping 60 seconds"), (1, "warn", "sleep interrupted: worker shutting down")],
        )
        self.assertIn(
            f'{{"msg": "echoing 1 keys", "worker_id": "py-proc", "run_id": "{echo.id}", '
            '"type": "demo.echo.v1", "attempt": 1}',
            out,
        )


if __name__ == "__main__":
    unittest.main()
