"""Run logs: what a handler logs through task.logger is kept with its run, per attempt (Go: run_log_test.go),
against a real Postgres and a real poller; and the worker's side of it alone (cleaning, bounds)."""

import json
import logging
import threading
import unittest
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import psycopg

from simpleworkflow import AttemptLog, InvalidInputError, Poller, Task
from simpleworkflow._run_log import (
    MAX_BUFFERED_LOG_BYTES,
    MAX_BUFFERED_LOG_LINES,
    MAX_LOG_MESSAGE_BYTES,
    _RunLog,
    log_text,
    send_logs,
)

from .support import InboxTest, wait_for

RETRY_FAST = timedelta(milliseconds=50)


class RunLogTest(InboxTest):
    def messages(self, run_id):
        """The run's whole log as "attempt level message" lines."""
        return [
            f"{line.attempt} {line.level} {line.message}" for line in self.client.logs(run_id, limit=10000)
        ]

    def test_lines_are_kept_per_attempt_across_a_retry(self):
        # Attempt 1 logs and fails, attempt 2 logs and succeeds: each keeps
        # its own lines, in order, at the levels they were logged at; a
        # record below the run log level reaches the worker's log only.
        poller, _, _ = self.start_poller(type_prefixes=["pylogs."], poll_interval=0.05)

        def flaky(task):
            log = task.logger
            log.info("charging %s", "12.50")
            log.debug("not kept: below the run log level")
            if task.attempt == 1:
                log.warning("card declined")
                raise RuntimeError("declined")
            try:
                raise ValueError("boom")
            except ValueError:
                log.exception("second try")
            log.getChild("card").critical("a child logger's line")
            return {"ok": True}

        poller.handle("pylogs.flaky.v1", flaky)
        with self.assertLogs("simpleworkflow", level="DEBUG") as worker_log:
            run = self.client.create("pylogs.flaky.v1", {}, max_attempts=2, retry_base_delay=RETRY_FAST)
            self.assertEqual(self.wait_status(run.id, "succeeded", timeout=30).attempt, 2)

        got = self.messages(run.id)
        self.assertEqual(
            got[:3], ["1 info charging 12.50", "1 warn card declined", "2 info charging 12.50"], got
        )
        self.assertEqual(len(got), 5, got)
        self.assertTrue(got[3].startswith("2 error second try\nTraceback (most recent call last):"), got[3])
        self.assertTrue(got[3].endswith("ValueError: boom"), got[3])
        self.assertEqual(got[4], "2 error a child logger's line")
        lines = self.client.logs(run.id)
        self.assertEqual(
            [(line.attempt, line.seq) for line in lines], [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3)]
        )
        self.assertTrue(all(line.at.tzinfo is not None for line in lines))
        # Read on from a line.
        self.assertEqual(
            [
                (line.attempt, line.seq)
                for line in self.client.logs(run.id, after_attempt=1, after_seq=2, limit=2)
            ],
            [(2, 1), (2, 2)],
        )
        with self.assertRaises(InvalidInputError):
            self.client.logs(run.id, limit=0)
        with self.assertRaises(InvalidInputError):
            self.client.logs("not-a-uuid")

        def octets(attempt):
            return sum(len(line.message.encode()) for line in lines if line.attempt == attempt)

        self.assertEqual(
            self.client.log_attempts(run.id),
            [
                AttemptLog(attempt=1, lines=2, bytes=octets(1), dropped=0, first_seq=1),
                AttemptLog(attempt=2, lines=3, bytes=octets(2), dropped=0, first_seq=1),
            ],
        )

        # The worker's own log has every record, the debug one too, with the run's id.
        forwarded = [r for r in worker_log.records if getattr(r, "run_id", None) == run.id]
        said = [json.loads(r.getMessage()) for r in forwarded]
        self.assertIn(
            {
                "msg": "not kept: below the run log level",
                "worker_id": poller.worker_id,
                "run_id": run.id,
                "type": "pylogs.flaky.v1",
                "attempt": 1,
            },
            said,
        )
        self.assertEqual(
            [(r.levelname, r.attempt) for r in forwarded if "charging" in r.getMessage()],
            [("INFO", 1), ("INFO", 2)],
        )
        self.assertTrue(any(r.exc_info is not None for r in forwarded), "the traceback was not forwarded")

    def test_a_durable_sleep_does_not_keep_lines_twice(self):
        # The lines logged before the wait are sent before it parks the run
        # (its lease then ends); the claim that wakes it replays the handler
        # up to the nap, and what it logs on the way is not kept again.
        poller, _, _ = self.start_poller(type_prefixes=["pylogs."], poll_interval=0.05)
        claims = []

        def sleepy(task):
            claims.append(task.lease_token)
            task.logger.info("before the step, attempt %d", task.attempt)
            task.step("prepare", lambda: 1)
            task.logger.info("before the nap")
            task.sleep("nap", 0.2)
            task.logger.info("after the nap")
            return {}

        poller.handle("pylogs.sleepy.v1", sleepy)
        run = self.client.create("pylogs.sleepy.v1", {})
        self.wait_status(run.id, "succeeded", timeout=30)
        self.assertEqual(len(claims), 2, "the run was not parked and claimed again")
        self.assertEqual(
            self.messages(run.id),
            ["1 info before the step, attempt 1", "1 info before the nap", "1 info after the nap"],
        )
        self.assertEqual(
            [(a.attempt, a.lines, a.dropped) for a in self.client.log_attempts(run.id)], [(1, 3, 0)]
        )

    def test_lines_are_sent_while_the_handler_runs(self):
        # Every log_flush_interval, not only with the outcome: the line is
        # readable while the handler still holds the run.
        poller, _, _ = self.start_poller(type_prefixes=["pylogs."], log_flush_interval=0.05)
        release = threading.Event()
        self.addCleanup(release.set)

        def long(task):
            task.logger.info("working")
            release.wait(30)
            task.logger.info("done")
            return {}

        poller.handle("pylogs.long.v1", long)
        run = self.client.create("pylogs.long.v1", {})
        wait_for(
            lambda: self.messages(run.id) == ["1 info working"],
            timeout=15,
            what="the line of a running handler",
        )
        self.assertEqual(self.client.get(run.id).status, "leased")
        release.set()
        self.wait_status(run.id, "succeeded")
        self.assertEqual(self.messages(run.id), ["1 info working", "1 info done"])

    def test_a_line_in_flight_is_kept_before_the_outcome(self):
        # The periodic send has taken the handler's last line and its call
        # is still under way when the handler fails with a retry left: the
        # outcome waits for that call (fail_runs would end the lease, and
        # the line, arriving after, be dropped), and attempt 1 keeps it.
        in_flight, go, failed = threading.Event(), threading.Event(), threading.Event()
        self.addCleanup(go.set)
        first = []

        class Slow(psycopg.Connection):
            def execute(self, query, params=None, **kw):
                if "append_run_logs" in str(query) and not first:
                    first.append(query)
                    in_flight.set()
                    go.wait(30)
                cur = super().execute(query, params, **kw)
                if "fail_runs" in str(query):
                    failed.set()
                return cur

        poller, _, _ = self.start_poller(
            type_prefixes=["pyflight."],
            poll_interval=0.05,
            log_flush_interval=0.02,
            connect=lambda: Slow.connect(self.url, autocommit=True),
        )
        sends = poller._log_send
        contended = threading.Event()

        class Watched:
            """The poller's send lock, saying when a send waits for another."""

            def __enter__(self):
                if not sends.acquire(blocking=False):
                    contended.set()
                    sends.acquire()
                return self

            def __exit__(self, *exc):
                sends.release()

        poller._log_send = Watched()

        def failing(task):
            if task.attempt == 1:
                task.logger.error("card declined")
                in_flight.wait(30)  # the periodic send carries the line
                raise RuntimeError("declined")
            return {}

        poller.handle("pyflight.fail.v1", failing)
        with self.assertLogs(
            "simpleworkflow", level="WARNING"
        ):  # the handler's error, in the worker's log too
            run = self.client.create("pyflight.fail.v1", {}, max_attempts=2, retry_base_delay=RETRY_FAST)
            self.assertTrue(in_flight.wait(15), "the periodic send took no line")
            # The outcome's send now waits for the call in flight (or, were
            # it not to, fail_runs goes first): then the call returns.
            wait_for(lambda: contended.is_set() or failed.is_set(), what="the outcome to be written or wait")
            go.set()
            self.assertEqual(self.wait_status(run.id, "succeeded").attempt, 2)
        self.assertEqual(self.messages(run.id), ["1 error card declined"])
        self.assertEqual(
            [(a.attempt, a.lines, a.dropped) for a in self.client.log_attempts(run.id)], [(1, 1, 0)]
        )

    def test_a_failed_call_counts_its_lines_as_dropped(self):
        # The periodic send's call is refused once: its line is counted as
        # dropped, and the count goes with the next call (the outcome's).
        refused = threading.Event()

        class RefusingOnce(psycopg.Connection):
            def execute(self, query, params=None, **kw):
                if "append_run_logs" in str(query) and not refused.is_set():
                    refused.set()
                    raise psycopg.OperationalError("refused for the test")
                return super().execute(query, params, **kw)

        poller, _, _ = self.start_poller(
            type_prefixes=["pyrefused."],
            poll_interval=0.05,
            log_flush_interval=0.02,
            connect=lambda: RefusingOnce.connect(self.url, autocommit=True),
        )

        def handler(task):
            task.logger.info("lost in the refused call")
            refused.wait(30)
            task.logger.info("sent with the outcome")
            return {}

        poller.handle("pyrefused.run.v1", handler)
        with self.assertLogs("simpleworkflow", level="WARNING") as worker_log:
            run = self.client.create("pyrefused.run.v1", {})
            self.wait_status(run.id, "succeeded")
        self.assertTrue(refused.is_set())
        self.assertTrue(
            any("counted as dropped" in r.getMessage() for r in worker_log.records), worker_log.output
        )
        self.assertEqual(self.messages(run.id), ["1 info sent with the outcome"])
        self.assertEqual(
            [(a.attempt, a.lines, a.dropped) for a in self.client.log_attempts(run.id)], [(1, 1, 1)]
        )

    def test_runs_that_log_nothing_cost_no_call(self):
        # Neither the periodic send nor the outcome's calls append_run_logs
        # for attempts with nothing to send (a logger used below the run log
        # level included); one line is one call.
        calls = []

        class Counting(psycopg.Connection):
            def execute(self, query, params=None, **kw):
                if "append_run_logs" in str(query):
                    calls.append(query)
                return super().execute(query, params, **kw)

        poller, _, _ = self.start_poller(
            type_prefixes=["pyquiet."],
            log_flush_interval=0.02,
            concurrency=6,
            connect=lambda: Counting.connect(self.url, autocommit=True),
        )

        def quiet(task):
            task.wait(0.3)  # several periodic sends go by
            task.logger.debug("below the run log level")
            return {}

        def loud(task):
            task.logger.info("one line")
            return {}

        poller.handle("pyquiet.quiet.v1", quiet)
        poller.handle("pyquiet.loud.v1", loud)
        quiet_runs = [self.client.create("pyquiet.quiet.v1", {}).id for _ in range(5)]
        for run_id in quiet_runs:
            self.wait_status(run_id, "succeeded")
        self.assertEqual(calls, [])
        self.assertEqual([self.client.log_attempts(r) for r in quiet_runs], [[]] * 5)
        loud_run = self.client.create("pyquiet.loud.v1", {}).id
        self.wait_status(loud_run, "succeeded")
        self.assertEqual(len(calls), 1)
        self.assertEqual(self.messages(loud_run), ["1 info one line"])

    def test_the_run_log_level_is_the_pollers(self):
        poller, _, _ = self.start_poller(type_prefixes=["pylevel."], run_log_level="debug")

        def chatty(task):
            task.logger.log(5, "below debug")
            task.logger.debug("a debug line")
            task.logger.info("an info line")
            return {}

        poller.handle("pylevel.chatty.v1", chatty)
        run = self.client.create("pylevel.chatty.v1", {})
        self.wait_status(run.id, "succeeded")
        self.assertEqual(self.messages(run.id), ["1 debug a debug line", "1 info an info line"])
        self.assertEqual(
            (poller.config().run_log_level, poller.config().log_flush_interval), (logging.DEBUG, 1.0)
        )

    def test_a_hostile_handler_harms_no_other_run(self):
        # A handler logs 200,000 lines, a 1 MiB line, a NUL and a lone
        # surrogate: its run keeps the newest lines within the owner's limit,
        # counts exactly what it dropped (the worker's drops and the
        # database's), and stores the odd lines cleaned and cut; the ten
        # bystanders beside it, on the same worker, keep every line and succeed.
        self.sql("update workflow.workflow_settings set max_log_lines = 100")
        flood = 200_000
        poller, thread, _ = self.start_poller(type_prefixes=["pynoisy."], concurrency=8, poll_interval=0.05)

        def hostile(task):
            log = task.logger
            for i in range(flood):
                log.info("x i=%d", i)
            log.info("y" * (1 << 20))
            log.info("nul\x00byte")
            log.info("bad \ud800 utf-8")
            return {}

        def calm(task):
            for i in range(3):
                task.logger.info("calm i=%d", i)
            return {}

        poller.handle("pynoisy.flood.v1", hostile)
        poller.handle("pynoisy.calm.v1", calm)
        noisy = self.client.create("pynoisy.flood.v1", {}).id
        bystanders = [self.client.create("pynoisy.calm.v1", {}).id for _ in range(10)]
        for run_id in bystanders:
            self.assertEqual(self.wait_status(run_id, "succeeded", timeout=60).attempt, 1)
            self.assertEqual(self.messages(run_id), ["1 info calm i=0", "1 info calm i=1", "1 info calm i=2"])
        self.wait_status(noisy, "succeeded", timeout=120)
        got = self.messages(noisy)
        self.assertEqual(len(got), 100, "the flood kept other than its newest 100 lines")
        self.assertEqual(got[0], f"1 info x i={flood - 97}")
        self.assertEqual(got[96], f"1 info x i={flood - 1}")
        cut = got[97]
        self.assertTrue(cut.startswith("1 info yyy") and cut.endswith(f" [cut: {1 << 20} bytes]"), cut[-40:])
        self.assertLessEqual(len(cut.encode()) - len("1 info "), MAX_LOG_MESSAGE_BYTES)
        self.assertEqual(got[98:], ["1 info nul\ufffdbyte", "1 info bad \ufffd utf-8"])
        (attempt,) = self.client.log_attempts(noisy)
        self.assertEqual((attempt.attempt, attempt.lines, attempt.dropped), (1, 100, flood + 3 - 100))
        self.assertEqual(
            [line.seq for line in self.client.logs(noisy)],
            list(range(attempt.first_seq, attempt.first_seq + 100)),
        )
        self.assertTrue(thread.is_alive(), "the worker died")


class RunLogBufferTest(unittest.TestCase):
    """The worker's side alone: what a line becomes, and what an attempt's buffer holds."""

    def test_text_is_cleaned_and_cut_as_the_go_sdk_does(self):
        self.assertEqual(log_text("plain"), "plain")
        self.assertEqual(log_text("a\x00b\x00"), "a\ufffdb\ufffd")
        self.assertEqual(log_text("lone \ud800 surrogate"), "lone \ufffd surrogate")
        # Undecodable bytes read with surrogateescape: one replacement a run,
        # as Go's strings.ToValidUTF8.
        self.assertEqual(
            log_text(b"bad \xff\xfe utf-8".decode("utf-8", "surrogateescape")), "bad \ufffd utf-8"
        )
        at_bound = "z" * MAX_LOG_MESSAGE_BYTES
        self.assertEqual(log_text(at_bound), at_bound)
        for msg in (
            "y" * (MAX_LOG_MESSAGE_BYTES + 1),
            "\u00e9" * 5000,
            "\u20ac" * 5000,
            "a" + "\U0001f600" * 3000,
        ):
            with self.subTest(msg=msg[:3]):
                size = len(msg.encode())
                got = log_text(msg)
                note = f" [cut: {size} bytes]"
                self.assertTrue(got.endswith(note))
                self.assertLessEqual(len(got.encode()), MAX_LOG_MESSAGE_BYTES)
                self.assertGreater(len(got.encode()), MAX_LOG_MESSAGE_BYTES - len(note) - 4)
                self.assertTrue(msg.startswith(got[: -len(note)]), "not cut at a character")

    def test_the_buffer_drops_the_oldest_and_counts_them(self):
        now = datetime.now(timezone.utc)
        buf = _RunLog()
        self.assertFalse(buf.pending())
        for i in range(MAX_BUFFERED_LOG_LINES + 5):
            buf.add(now, "info", f"line {i}")
        lines, dropped = buf.take(10)
        self.assertEqual((lines[0][2], dropped), ("line 5", 5))
        buf.settle(0)
        lines, dropped = buf.take(MAX_BUFFERED_LOG_LINES)
        self.assertEqual(
            (len(lines), lines[-1][2], dropped),
            (MAX_BUFFERED_LOG_LINES - 10, f"line {MAX_BUFFERED_LOG_LINES + 4}", 0),
        )
        self.assertTrue(buf.pending(), "lines in flight are nothing to send")
        buf.settle(0)
        self.assertFalse(buf.pending())
        # By octets: 8 KiB lines, at most 2 MiB of them.
        for i in range(300):
            buf.add(now, "warn", f"{i:04d}" + "b" * 9000)
        lines, dropped = buf.take(MAX_BUFFERED_LOG_LINES)
        buf.settle(0)
        self.assertEqual(len(lines) + dropped, 300)
        self.assertLessEqual(sum(line[3] for line in lines), MAX_BUFFERED_LOG_BYTES)
        self.assertEqual(len(lines), MAX_BUFFERED_LOG_BYTES // MAX_LOG_MESSAGE_BYTES)
        self.assertEqual(lines[-1][2][:4], "0299")
        buf.add(now, "info", "kept")
        buf.close()
        buf.add(now, "info", "after the lease")
        self.assertFalse(buf.pending())

    def test_lines_are_in_flight_until_their_call_returns(self):
        # Taken lines keep the buffer pending until their call is settled;
        # a failed call's lines, and the count it carried, are dropped and
        # counted, reported with the next take.
        now = datetime.now(timezone.utc)
        buf = _RunLog()
        self.assertEqual(buf.take(10), ([], 0))
        self.assertFalse(buf.pending(), "an empty take is no call")
        for i in range(MAX_BUFFERED_LOG_LINES + 3):
            buf.add(now, "info", f"line {i}")
        lines, dropped = buf.take(MAX_BUFFERED_LOG_LINES)
        self.assertEqual((len(lines), dropped), (MAX_BUFFERED_LOG_LINES, 3))
        self.assertTrue(buf.pending())
        buf.add(now, "info", "meanwhile")
        self.assertEqual([line[2] for line in buf.take(10)[0]], ["meanwhile"])
        buf.settle(len(lines) + dropped)  # the first call failed
        self.assertTrue(buf.pending())
        buf.settle(0)  # the second went through
        self.assertTrue(buf.pending(), "the failed call's count is still to send")
        self.assertEqual(buf.take(10), ([], MAX_BUFFERED_LOG_LINES + 3))
        buf.settle(0)
        self.assertFalse(buf.pending())
        # Once the lease is gone, a failed call counts nothing.
        buf.add(now, "info", "x")
        buf.take(10)
        buf.close()
        self.assertTrue(buf.pending())
        buf.settle(1)
        self.assertFalse(buf.pending())
        self.assertEqual(buf.take(10), ([], 0))

    def test_a_call_names_each_attempt_once(self):
        # A handler that logs while its lines are taken: what it logs then
        # goes with the next send, not a second time in the same call (the
        # database refuses a run id twice); a failed call's lines go as a
        # count with the next. Two attempts of one run are two calls.
        now = datetime.now(timezone.utc)

        class Busy(_RunLog):
            def take(self, max_lines):
                got = super().take(max_lines)
                self.add(now, "info", "meanwhile")
                return got

        calls = []
        refuse = []

        class Cursor:
            def __init__(self, rows):
                self.rows = rows

            def fetchall(self):
                return self.rows

        class Conn:
            def execute(self, query, params):
                calls.append(params)
                if refuse:
                    refuse.pop()
                    raise psycopg.OperationalError("refused for the test")
                return Cursor([(run_id, True) for run_id in params[1]])

        class Holder:
            def get(self):
                return Conn()

            def reset(self):
                pass

        poller = SimpleNamespace(worker_id="w", _log_send=threading.Lock())
        a = SimpleNamespace(id="a", lease_token=1, _run_log=Busy())
        b = SimpleNamespace(id="b", lease_token=2, _run_log=_RunLog())
        b_old = SimpleNamespace(id="b", lease_token=1, _run_log=_RunLog())
        for t in (a, b, b_old):
            t._run_log.add(now, "info", f"{t.id}{t.lease_token}")
        send_logs(poller, Holder(), [a, b, a, b_old])
        self.assertEqual([c[1] for c in calls], [["a", "b"], ["b"]])
        self.assertEqual(
            [(c[1], c[3], c[4], c[7]) for c in calls],
            [(["a", "b"], [0, 0], ["a", "b"], ["a1", "b2"]), (["b"], [0], ["b"], ["b1"])],
        )
        self.assertTrue(a._run_log.pending())
        self.assertFalse(b._run_log.pending() or b_old._run_log.pending())
        calls.clear()
        refuse.append(True)
        with self.assertLogs("simpleworkflow", level="WARNING"):
            send_logs(poller, Holder(), [a, b])
        self.assertEqual([(c[1], c[3], c[7]) for c in calls], [(["a"], [0], ["meanwhile"])])
        calls.clear()
        send_logs(poller, Holder(), [a, b])
        self.assertEqual([(c[1], c[3], c[7]) for c in calls], [(["a"], [1], ["meanwhile"])])

    def test_attempt_loggers_are_not_left_behind(self):
        # Each attempt's logger, and its children, are the Task's alone:
        # the logging module registers none of them.
        poller = Poller("postgres://unused")
        before = set(logging.Logger.manager.loggerDict)
        for i in range(50):
            task = Task(f"00000000-0000-0000-0000-{i:012d}", "pylogs.unit.v1", {}, 1, 3, "w")
            poller._start_run_log(task)
            task.logger.info("x")
            task.logger.getChild("sub").info("y")
            self.assertIs(task.logger, task.logger)
            self.assertEqual([line[2] for line in task._run_log.take(10)[0]], ["x", "y"])
        self.assertEqual(set(logging.Logger.manager.loggerDict) - before, set())
        with self.assertRaises(InvalidInputError):
            Poller("postgres://unused", run_log_level="loud")
        with self.assertRaises(InvalidInputError):
            Poller("postgres://unused", log_flush_interval=0)


if __name__ == "__main__":
    unittest.main()
