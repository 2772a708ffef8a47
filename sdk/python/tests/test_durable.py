"""Durable execution in the Python SDK against a real Postgres and a real poller: the step journal,
parking (sleeps, signals, children), the lease fence, non-determinism, limits and deadlines."""

import logging
import os
import signal
import subprocess
import sys
import threading
import unittest
from datetime import timedelta

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from simpleworkflow import (  # noqa: E402
    ChildFailed,
    InvalidInputError,
    NonDeterministicError,
    NotFoundError,
    PermanentError,
    RunFinishedError,
    StoppedError,
    Task,
)
from tests import support  # noqa: E402
from tests.support import InboxTest, wait_for  # noqa: E402

logging.basicConfig(level=logging.WARNING)

RETRY_FAST = timedelta(milliseconds=100)


def journal(client, run_id):
    return [(s.name, s.position, s.kind, s.outcome, s.output) for s in client.steps(run_id)]


class StepTest(InboxTest):
    def test_steps_replay_after_a_failed_attempt(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."])
        calls = {"one": 0, "two": 0, "three": 0}

        def body(name, value):
            def fn():
                calls[name] += 1
                return value

            return fn

        def handler(run):
            one = run.step("one", body("one", {"n": 1}))
            two = run.step("two", body("two", (1, 2)))
            if run.attempt == 1:
                raise RuntimeError("crash after step two")
            three = run.step("three", body("three", "x"))
            return {"one": one, "two": two, "three": three, "attempt": run.attempt}

        poller.handle("py.steps.v1", handler)
        res = self.client.create("py.steps.v1", {}, retry_base_delay=RETRY_FAST)
        run = self.wait_status(res.id, "succeeded")
        self.assertEqual(run.result, {"one": {"n": 1}, "two": [1, 2], "three": "x", "attempt": 2})
        self.assertEqual(calls, {"one": 1, "two": 1, "three": 1}, "a journaled step ran again")
        self.assertEqual(
            [(s.name, s.position, s.kind, s.outcome, s.attempt) for s in self.client.steps(res.id)],
            [("one", 0, "step", "ok", 1), ("two", 1, "step", "ok", 1), ("three", 2, "step", "ok", 2)],
        )

    def test_a_lost_lease_cannot_record(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."])
        seen = {}

        def handler(run):
            def steal():
                # Another worker claims the run meanwhile: a new token.
                self.sql(
                    "update workflow.workflow_run set leased_by = 'thief', "
                    "lease_token = lease_token + 1 where id = %s",
                    (run.id,),
                )
                return "mine"

            try:
                run.step("charge", steal)
            except StoppedError as e:
                seen.update(error=e, reason=run.reason, cancelled=run.is_cancelled())
            return {"discarded": True}

        poller.handle("py.stolen.v1", handler)
        res = self.client.create("py.stolen.v1", {})
        wait_for(lambda: "error" in seen, what="the step to find its lease lost")
        self.assertEqual(seen["error"].reason, "lease lost")
        self.assertEqual((seen["reason"], seen["cancelled"]), ("lease lost", True))
        wait_for(lambda: not poller._active, what="the slot to be freed")
        run = self.client.get(res.id)
        self.assertEqual((run.status, run.leased_by, run.result), ("leased", "thief", None))
        self.assertEqual(self.client.steps(res.id), [])
        self.assertNotIn("succeeded", self.trail(res.id))

    def test_two_writers_of_one_step_first_wins(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."])

        def handler(run):
            with psycopg.connect(self.url, autocommit=True) as conn:

                def same_lease():
                    return Task(
                        run.id,
                        run.type,
                        run.payload,
                        run.attempt,
                        run.max_attempts,
                        run.worker_id,
                        lease_token=run.lease_token,
                        journal=[],
                        connect=lambda: conn,
                    )

                # A second writer holding the same lease (say, a write retried
                # after its answer was lost) records the step first.
                twin = same_lease()
                seen = {}

                def mine():
                    seen["twin"] = twin.step("pick", lambda: {"by": "twin"})
                    return {"by": "main"}

                seen["main"] = run.step("pick", mine)
                late = same_lease()
                seen["late"] = late.step("pick", lambda: {"by": "late"})
            return seen

        poller.handle("py.twins.v1", handler)
        res = self.client.create("py.twins.v1", {})
        run = self.wait_status(res.id, "succeeded")
        self.assertEqual(run.result, {"twin": {"by": "twin"}, "main": {"by": "twin"}, "late": {"by": "twin"}})
        self.assertEqual(journal(self.client, res.id), [("pick", 0, "step", "ok", {"by": "twin"})])

    def test_limits_and_misuse_give_permanent_errors(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."])

        def handler(run):
            calls = {
                "name": lambda: run.step("no spaces", lambda: 1),
                "long": lambda: run.step("x" * 129, lambda: 1),
                "size": lambda: run.step("big", lambda: "x" * 1048576),
                "json": lambda: run.step("set", lambda: {1, 2}),
                "nested": lambda: run.step("outer", lambda: run.step("inner", lambda: 1)),
                "signal": lambda: run.wait_for_signal("a/b"),
                "await": lambda: run.await_child("nobody"),
                "child": lambda: run.start_child("kid", "NotAType", {}),
            }
            errors = {}
            for label, call in calls.items():
                try:
                    call()
                    errors[label] = None
                except PermanentError as e:
                    errors[label] = str(e)
            errors["fine"] = run.step("fine", lambda: "x" * 1000)[:3]
            return errors

        poller.handle("py.limits.v1", handler)
        res = self.client.create("py.limits.v1", {})
        errors = self.wait_status(res.id, "succeeded").result
        self.assertEqual(
            errors["name"],
            'invalid input: step name "no spaces" may contain only letters, digits and . _ : -',
        )
        self.assertEqual(errors["long"], "invalid input: step name must be 1 to 128 characters, got 129")
        self.assertEqual(
            errors["size"], 'step "big": invalid input: output is 1048578 bytes; the limit is 1048576 (1 MiB)'
        )
        self.assertIn('step "set": invalid input: output is not JSON-serialisable', errors["json"])
        self.assertIn("one after another", errors["nested"])
        self.assertIn('step name "a/b" may contain only', errors["signal"])
        self.assertEqual(
            errors["await"], 'await child: invalid input: no child run was started at step "nobody"'
        )
        self.assertIn("type 'NotAType'", errors["child"])
        self.assertEqual(errors["fine"], "xxx")
        names = [s.name for s in self.client.steps(res.id)]
        self.assertEqual(names, ["fine"], "nothing but the valid step was journaled")


class SleepTest(InboxTest):
    def test_a_sleep_parks_frees_the_slot_and_wakes_when_the_clock_reaches_it(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."], concurrency=1, poll_interval=0.1)
        executions = []

        def sleeper(run):
            executions.append(run.attempt)
            try:
                run.sleep("nap", timedelta(hours=1))
            except Exception:  # Parked is a BaseException: this does not swallow it
                return {"swallowed": True}
            return {"slept": True}

        poller.handle("py.sleeper.v1", sleeper)
        poller.handle("py.quick.v1", lambda run: {"quick": True})
        res = self.client.create("py.sleeper.v1", {})
        parked = wait_for(
            lambda: (r := self.client.get(res.id)).wait is not None and r, what="the sleeper to park"
        )
        self.assertEqual(
            (parked.status, parked.attempt, parked.wait.kind, parked.wait.step),
            ("pending", 0, "sleep", "nap"),
        )
        self.assertIsNotNone(parked.wait.until)
        # The only slot is free while the sleeper is parked.
        quick = self.client.create("py.quick.v1", {})
        self.wait_status(quick.id, "succeeded", timeout=1.0)
        # A minute before its time the sleeper stays parked: the poller claims
        # a newer run and leaves it (an older due run would be claimed first).
        self.advance_clock(parked.wait.until - self.clock_now() - timedelta(minutes=1))
        quick = self.client.create("py.quick.v1", {})
        self.wait_status(quick.id, "succeeded")
        self.assertIsNotNone(self.client.get(res.id).wait, "the sleeper woke early")
        self.assertEqual(executions, [1])
        self.advance_clock(timedelta(minutes=1))
        done = self.wait_status(res.id, "succeeded")
        self.assertGreaterEqual(done.finished_at, parked.wait.until)
        self.assertEqual(done.result, {"slept": True})
        self.assertEqual((done.attempt, executions), (1, [1, 1]))
        self.assertEqual(
            self.trail(res.id), ["created", "started", "waiting", "woken", "started", "succeeded"]
        )
        self.assertEqual(journal(self.client, res.id), [("nap", 0, "sleep", "ok", None)])

    def test_the_worker_that_parks_a_sleep_wakes_it_on_time(self):
        # Real time on purpose: the worker that parks a sleep sets a timer of
        # its own, on the machine's clock, to claim the run when it is due;
        # moving the database clock cannot fire it. A poll interval of a
        # minute leaves that timer the only thing that claims the run again.
        poller, _, _ = self.start_poller(type_prefixes=["py."], poll_interval=60)

        def sleeper(run):
            run.sleep("nap", 0.3)
            return {"slept": True}

        poller.handle("py.sleeper.v1", sleeper)
        res = self.client.create("py.sleeper.v1", {})
        parked = wait_for(
            lambda: (r := self.client.get(res.id)).wait is not None and r, what="the sleeper to park"
        )
        done = self.wait_status(res.id, "succeeded", timeout=10)
        late = (done.finished_at - parked.wait.until).total_seconds()
        self.assertGreaterEqual(late, 0)
        self.assertLess(late, 1.0, "woke more than a second after its time")
        self.assertEqual(done.result, {"slept": True})

    def test_a_sleeping_run_cancelled_with_plain_sql_stays_cancelled(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."], poll_interval=0.1)
        executions = []

        def sleeper(run):
            executions.append(run.attempt)
            run.sleep("nap", timedelta(hours=1))
            return {}

        poller.handle("py.sleeper.v1", sleeper)
        poller.handle("py.quick.v1", lambda run: {"quick": True})
        res = self.client.create("py.sleeper.v1", {})
        wait_for(lambda: self.client.get(res.id).wait is not None, what="the sleeper to park")
        self.sql("update workflow.workflow_run set status = 'cancelled' where id = %s", (res.id,))
        run = self.client.get(res.id)
        self.assertEqual(run.status, "cancelled")
        self.assertIsNone(run.wait)
        self.assertIsNotNone(run.finished_at)
        # Past the sleep's time the poller claims a newer run and not the
        # cancelled one (an older claimable run would be claimed first).
        self.advance_clock(timedelta(hours=2))
        quick = self.client.create("py.quick.v1", {})
        self.wait_status(quick.id, "succeeded")
        self.assertEqual(self.client.get(res.id).status, "cancelled")
        self.assertEqual(executions, [1])
        self.assertEqual(self.trail(res.id)[-2:], ["waiting", "cancelled"])


class SignalTest(InboxTest):
    def test_a_signal_sent_before_the_wait_is_received(self):
        res = self.client.create("py.approve.v1", {})
        sent = self.client.signal(res.id, "approve", {"by": "alice"})
        self.assertEqual((sent.duplicate, sent.delivered), (False, False))
        poller, _, _ = self.start_poller(type_prefixes=["py."])

        def handler(run):
            payload, received = run.wait_for_signal("approve", timeout=30)
            return {"payload": payload, "received": received}

        poller.handle("py.approve.v1", handler)
        run = self.wait_status(res.id, "succeeded")
        self.assertEqual(run.result, {"payload": {"by": "alice"}, "received": True})
        self.assertNotIn("waiting", self.trail(res.id))
        self.assertEqual(journal(self.client, res.id), [("approve", 0, "signal", "ok", {"by": "alice"})])

    def test_a_duplicate_signal_is_delivered_once_and_a_later_wait_times_out(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."])

        def handler(run):
            first = run.wait_for_signal("go")
            second = run.wait_for_signal("go", timeout=0.5)
            return {"first": first, "second": second}

        poller.handle("py.go.v1", handler)
        res = self.client.create("py.go.v1", {})
        parked = wait_for(
            lambda: (r := self.client.get(res.id)).wait is not None and r, what="the wait to park"
        )
        self.assertEqual(
            (parked.wait.kind, parked.wait.step, parked.wait.signal, parked.wait.until),
            ("signal", "go", "go", None),
        )
        one = self.client.signal(res.id, "go", 1, idempotency_key="k")
        two = self.client.signal(res.id, "go", 2, idempotency_key="k")
        self.assertEqual((one.duplicate, one.delivered), (False, True))
        self.assertEqual((two.signal_id, two.duplicate, two.delivered), (one.signal_id, True, False))
        run = self.wait_status(res.id, "succeeded")
        self.assertEqual(run.result, {"first": [1, True], "second": [None, False]})
        self.assertEqual(
            journal(self.client, res.id),
            [("go", 0, "signal", "ok", 1), ("go:2", 1, "signal", "timeout", None)],
        )

    def test_signal_errors(self):
        with self.assertRaises(NotFoundError):
            self.client.signal("00000000-0000-0000-0000-000000000000", "approve")
        res = self.client.create("py.approve.v1", {})
        with self.assertRaises(InvalidInputError):
            self.client.signal(res.id, "not a name")
        with self.assertRaises(InvalidInputError):
            self.client.signal(res.id, "approve", "x" * 262144)
        self.client.cancel(res.id)
        with self.assertRaises(RunFinishedError):
            self.client.signal(res.id, "approve")


class ChildTest(InboxTest):
    def test_a_child_started_again_in_a_replay_exists_once_and_wakes_the_parent(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."])
        ids = []
        release = threading.Event()

        def parent(run):
            child = run.start_child("kid", "py.kid.v1", {"n": 2})
            ids.append(child)
            if run.attempt == 1:
                raise RuntimeError("crash after starting the child")
            return {"child": child, "result": run.await_child("kid")}

        def kid(run):
            release.wait(10)
            return {"double": run.payload["n"] * 2}

        poller.handle("py.parent.v1", parent)
        poller.handle("py.kid.v1", kid)
        res = self.client.create("py.parent.v1", {}, retry_base_delay=RETRY_FAST)
        parked = wait_for(
            lambda: (r := self.client.get(res.id)).wait is not None and r, what="the parent to park"
        )
        self.assertEqual((parked.wait.kind, parked.wait.step, parked.attempt), ("child", "kid", 1))
        release.set()
        run = self.wait_status(res.id, "succeeded")
        self.assertEqual(len(set(ids)), 1, ids)
        self.assertEqual(len(ids), 3, "attempt 1, attempt 2 (parks), and the wake-up")
        self.assertEqual(run.result, {"child": ids[0], "result": {"double": 4}})
        children = self.sql(
            "select id::text, parent_step from workflow.workflow_run where parent_id = %s", (res.id,)
        )
        self.assertEqual(children, [(ids[0], "kid")])
        child = self.client.get(ids[0])
        self.assertEqual((child.parent_id, child.parent_step, child.status), (res.id, "kid", "succeeded"))
        self.assertIn("woken", self.trail(res.id))

    def test_a_failed_child_raises_child_failed(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."])

        def parent(run):
            child = run.start_child("kid", "py.bad.v1")
            try:
                run.await_child("kid")
            except ChildFailed as e:
                return {"child": child, "error": str(e), "message": e.message, "id": e.child_id}
            return {"unexpected": True}

        poller.handle("py.parent.v1", parent)
        poller.handle("py.bad.v1", lambda run: (_ for _ in ()).throw(PermanentError("out of stock")))
        res = self.client.create("py.parent.v1", {})
        result = self.wait_status(res.id, "succeeded").result
        self.assertEqual(result["message"], "out of stock")
        self.assertEqual(result["id"], result["child"])
        self.assertEqual(result["error"], f"child run {result['child']} (step kid) failed: out of stock")

    def test_cancelling_the_parent_cancels_the_child(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."])

        def parent(run):
            run.start_child("kid", "elsewhere.kid.v1", {}, deadline=60)
            return run.await_child("kid")

        poller.handle("py.parent.v1", parent)
        res = self.client.create("py.parent.v1", {})
        wait_for(lambda: self.client.get(res.id).wait is not None, what="the parent to park")
        (child_id,) = [s.child_id for s in self.client.steps(res.id)]
        child = self.client.get(child_id)
        self.assertEqual(child.status, "pending")
        self.assertIsNotNone(child.deadline_at)
        self.assertTrue(self.client.cancel(res.id))
        self.assertEqual(self.client.get(child_id).status, "cancelled")
        self.assertEqual(self.client.get(res.id).status, "cancelled")


class NonDeterminismTest(InboxTest):
    def test_another_step_at_a_known_position_fails_the_run_for_good(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."])
        seen = {}

        def handler(run):
            run.step("a", lambda: 1)
            if run.attempt == 1:
                run.step("b", lambda: 2)
                raise RuntimeError("retry me")
            try:
                run.step("c", lambda: 3)
            except Exception as e:  # swallowed: the run fails all the same
                seen["error"] = e
            try:
                run.step("d", lambda: 4)
            except Exception as e:
                seen["later"] = e
            return {"swallowed": True}

        poller.handle("py.drift.v1", handler)
        res = self.client.create("py.drift.v1", {}, max_attempts=5, retry_base_delay=RETRY_FAST)
        run = self.wait_status(res.id, "failed")
        want = 'non-deterministic: expected step "b" at position 1, got "c"'
        ((sql_message,),) = self.sql("select workflow.nondeterminism_message('step', 'b', 1, 'step', 'c')")
        self.assertEqual(sql_message, want)
        self.assertEqual((run.attempt, run.last_error, run.result), (2, want, None))
        self.assertIsInstance(seen["error"], NonDeterministicError)
        self.assertIs(seen["later"], seen["error"], "durable calls after the failure fail the same way")

    def test_kind_changes_and_repeated_names(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."])

        def kind(run):
            run.step("a", lambda: 1)
            if run.attempt == 1:
                run.sleep("b", 0)  # due at once: resolved without parking
                raise RuntimeError("retry me")
            run.step("b", lambda: 2)

        def repeat(run):
            run.step("x", lambda: 1)
            run.step("y", lambda: 2)
            run.step("x", lambda: 3)

        poller.handle("py.kind.v1", kind)
        poller.handle("py.repeat.v1", repeat)
        k = self.client.create("py.kind.v1", {}, retry_base_delay=RETRY_FAST)
        r = self.client.create("py.repeat.v1", {})
        self.assertEqual(
            self.wait_status(k.id, "failed").last_error,
            'non-deterministic: expected sleep "b" at position 1, got step "b"',
        )
        self.assertEqual(
            self.wait_status(r.id, "failed").last_error,
            'non-deterministic: step "x" is recorded at position 0, reached again at position 2',
        )
        self.assertEqual(self.client.get(r.id).attempt, 1)


class DeadlineTest(InboxTest):
    def test_a_deadline_while_leased_cancels_the_handler(self):
        poller, _, _ = self.start_poller(type_prefixes=["py."], lease_duration=3)  # heartbeat every second
        seen = {}

        def handler(run):
            seen["deadline_at"] = run.deadline_at
            run.cancelled.wait(30)
            seen["reason"] = run.reason
            return {"late": True}

        poller.handle("py.slow.v1", handler)
        res = self.client.create("py.slow.v1", {}, deadline=1.0)
        created = self.client.get(res.id)
        self.assertAlmostEqual((created.deadline_at - created.created_at).total_seconds(), 1.0, delta=0.05)
        wait_for(lambda: "reason" in seen, timeout=5, what="the handler to be cancelled")
        self.assertEqual(seen["reason"], "deadline exceeded")
        self.assertEqual(seen["deadline_at"], created.deadline_at)
        wait_for(lambda: not poller._active, what="the slot to be freed")
        run = self.client.get(res.id)
        self.assertEqual((run.status, run.last_error, run.result), ("failed", "deadline exceeded", None))
        last = self.client.events(res.id)[-1]
        self.assertEqual((last.type, last.data.get("reason")), ("failed", "deadline_exceeded"))
        with self.assertRaises(InvalidInputError):
            self.client.create("py.slow.v1", {}, deadline=0)


class ExampleOrderTest(InboxTest):
    def worker(self, name):
        proc = subprocess.Popen(
            [
                sys.executable,
                os.path.join(support.ROOT, "sdk", "python", "examples", "example_worker.py"),
                "--database-url",
                self.url,
                "--worker-id",
                name,
                "--shutdown-grace-period",
                "0.5",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

        def stop():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
            elif proc.stdout is not None:
                proc.stdout.close()

        self.addCleanup(stop)
        return proc

    def test_demo_order_resumes_in_a_new_process_without_repeating_steps(self):
        first = self.worker("py-order-1")
        order = self.client.create(
            "demo.order.v1",
            {
                "orderId": "o-1",
                "amount": 12.5,
                "sleepSeconds": 0.5,
                "approveTimeoutSeconds": 30,
                "counters": True,
                "holdAfterChargeSeconds": 1.5,
            },
        )
        wait_for(lambda: "charge" in [s.name for s in self.client.steps(order.id)], what="the charge step")
        first.kill()  # SIGKILL while it holds the lease after charging
        first.communicate()
        # Its lease runs out (sooner than waiting for it) and the approval arrives meanwhile.
        self.sql(
            "update workflow.workflow_run set lease_until = now() - interval '1 second' "
            "where id = %s and status = 'leased'",
            (order.id,),
        )
        self.sql("select workflow.reap_expired_leases(10)")
        self.assertFalse(self.client.signal(order.id, "approve", {"by": "bob"}).delivered)
        self.worker("py-order-2")
        rejected = self.client.create(
            "demo.order.v1", {"orderId": "o-2", "amount": 1, "approveTimeoutSeconds": 0.5}
        )
        run = self.wait_status(order.id, "succeeded", timeout=20)
        self.assertEqual(
            run.result,
            {
                "orderId": "o-1",
                "reserve": {"reserved": True, "orderId": "o-1", "by": "python"},
                "charge": {"charged": 12.5, "by": "python"},
                "approval": {"by": "bob"},
                "ship": {"shipped": True, "by": "python"},
            },
        )
        self.assertEqual((run.attempt, run.leased_by), (2, "py-order-2"))
        counts = dict(self.sql("select step, n from public.demo_step_counter where run_id = %s", (order.id,)))
        self.assertEqual(counts, {"reserve": 1, "charge": 1, "ship": 1})
        self.assertEqual(
            [s.name for s in self.client.steps(order.id)],
            ["reserve", "charge", "cool-off", "approve", "ship"],
        )
        failed = self.wait_status(rejected.id, "failed")
        self.assertEqual(
            (failed.attempt, failed.last_error), (1, "order o-2 rejected: not approved within 0.5s")
        )


if __name__ == "__main__":
    unittest.main()
