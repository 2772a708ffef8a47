"""A bad value fails only its own run: hostile JSON through every Python input path, with bystanders."""

import json

import psycopg

from simpleworkflow import MAX_JSON_DEPTH, InvalidInputError, PermanentError

from .support import InboxTest, wait_for


def deep_list(n):
    """A list nested n levels: [[...[]...]]."""
    v = []
    for _ in range(n - 1):
        v = [v]
    return v


def deep_text(n):
    return "[" * n + "]" * n


class HostileValuesTest(InboxTest):
    def _bypass_checks(self, conn):
        """Write as the owner around the database's checks, as a row stored before them."""
        conn.execute("set session_replication_role = replica")
        for table, name in conn.execute(
            "select conrelid::regclass::text, conname from pg_constraint "
            "where connamespace = 'workflow'::regnamespace and conname like '%%_depth'"
        ).fetchall():
            conn.execute(f'alter table {table} drop constraint "{name}"')

    def finished(self, run_id):
        """Wait for the run to finish; its (status, attempt, last_error, result is null), read without decoding."""

        def row():
            rows = self.sql(
                "select status, attempt, last_error, result is null from workflow.workflow_run where id = %s",
                (run_id,),
            )
            return rows and rows[0][0] in ("succeeded", "failed", "cancelled") and rows[0]

        return wait_for(row, timeout=30, what=f"run {run_id} to finish")

    def test_undecodable_runs_fail_alone_in_a_claimed_batch(self):
        # A payload or journal the worker cannot decode
        # (nested 5,000 levels; an integer of 5,000 digits, which Python's
        # int() refuses) failed the whole claim, leaving the neighbours
        # leased; each now fails alone, at once, and the rest run.
        bystanders = [self.client.create("pyhostile.a.v1", {"n": i}).id for i in range(6)]
        with psycopg.connect(self.url, autocommit=True) as conn:
            self._bypass_checks(conn)
            # With the triggers off (replica), a row names its type's namespace
            # itself, as workflow_run_inserting would.
            deep = conn.execute(
                "insert into workflow.workflow_run (type, payload, namespace, type_namespace) "
                "values ('pyhostile.a.v1', %s::jsonb, 'default', 'default') returning id::text",
                ('{"v":' + deep_text(5000) + "}",),
            ).fetchone()[0]
            digits = conn.execute(
                "insert into workflow.workflow_run (type, payload, namespace, type_namespace) "
                "values ('pyhostile.a.v1', %s::jsonb, 'default', 'default') returning id::text",
                ('{"v":1' + "0" * 5000 + "}",),
            ).fetchone()[0]
            journal = conn.execute(
                "insert into workflow.workflow_run (type, payload, namespace, type_namespace) "
                "values ('pyhostile.a.v1', '{}', 'default', 'default') returning id::text"
            ).fetchone()[0]
            conn.execute(
                "insert into workflow.workflow_step (run_id, name, position, kind, outcome, output, attempt, "
                "started_at, finished_at) values (%s, 'approve', 0, 'signal', 'ok', %s::jsonb, 1, now(), now())",
                (journal, deep_text(5000)),
            )
        bystanders += [self.client.create("pyhostile.a.v1", {"n": i}).id for i in range(6, 12)]
        poller, thread, _ = self.start_poller(type_prefixes=["pyhostile."], concurrency=8)
        poller.handle("pyhostile.a.v1", lambda run: {"ok": True})
        for run_id in bystanders:
            run = self.wait_status(run_id, "succeeded", timeout=30)
            self.assertEqual(run.attempt, 1)
        for run_id, why in ((deep, "RecursionError"), (digits, "ValueError"), (journal, "RecursionError")):
            status, attempt, error, _ = self.finished(run_id)
            self.assertEqual((status, attempt), ("failed", 1), error)
            self.assertIn("cannot be decoded", error)
            self.assertIn(why, error)
        self.assertTrue(thread.is_alive(), "the worker died")
        after = self.client.create("pyhostile.a.v1", {})
        self.wait_status(after.id, "succeeded", timeout=30)

    def test_a_journal_too_large_to_load_fails_its_run_alone(self):
        # The database hands over a journal past workflow_settings.max_journal_bytes
        # as a sentence, not an aggregate that could fail the whole claim.
        self.sql("update workflow.workflow_settings set max_journal_bytes = 1048576")
        bystanders = [self.client.create("pybigj.a.v1", {"n": i}).id for i in range(4)]
        big = self.client.create("pybigj.a.v1", {}).id
        for i in range(3):
            self.sql(
                "insert into workflow.workflow_step (run_id, name, position, kind, outcome, output, attempt, "
                "started_at, finished_at) values (%s, %s, %s, 'step', 'ok', to_jsonb(repeat('x', 409600)), 1, "
                "now(), now())",
                (big, f"s{i}", i),
            )
        poller, thread, _ = self.start_poller(type_prefixes=["pybigj."], concurrency=8)
        poller.handle("pybigj.a.v1", lambda run: {"ok": True})
        for run_id in bystanders:
            self.wait_status(run_id, "succeeded", timeout=30)
        status, attempt, error, _ = self.finished(big)
        self.assertEqual((status, attempt), ("failed", 1), error)
        self.assertIn("a claim loads at most 1048576", error)
        self.assertTrue(thread.is_alive())

    def test_producers_get_a_clear_error_and_store_nothing(self):
        # Hostile JSON through the producers' paths: create, create_many, signal.
        target = self.client.create("pyhostile.target.v1", {}).id
        too_deep = {"v": deep_list(MAX_JSON_DEPTH)}
        python_cannot = {"v": deep_list(5000)}
        for value in (too_deep, python_cannot):
            with self.assertRaises(InvalidInputError):
                self.client.create("pyhostile.p.v1", value)
            with self.assertRaises(InvalidInputError):
                self.client.create_many(
                    [{"type": "pyhostile.p.v1"}, {"type": "pyhostile.p.v1", "payload": value}]
                )
            with self.assertRaises(InvalidInputError):
                self.client.signal(target, "poke", value)
        with self.assertRaises(InvalidInputError):
            self.client.create("pyhostile.p.v1", {"v": "a\u0000b"})
        with self.assertRaises(InvalidInputError):
            self.client.create("pyhostile.p.v1", {"v": float("nan")})
        self.assertEqual(
            self.sql("select count(*) from workflow.workflow_run where type = 'pyhostile.p.v1'"), [(0,)]
        )
        self.assertEqual(self.sql("select count(*) from workflow.workflow_signal"), [(0,)])
        # At the bound, and duplicate keys (the last wins, as jsonb keeps it).
        ok = self.client.create("pyhostile.p.v1", {"v": deep_list(MAX_JSON_DEPTH - 1)})
        self.assertEqual(self.client.get(ok.id).payload["v"], deep_list(MAX_JSON_DEPTH - 1))
        self.sql(
            "insert into workflow.workflow_run (type, payload) values ('pyhostile.p.v1', '{\"k\":1,\"k\":2}')"
        )
        self.assertEqual(
            self.sql("select payload->>'k' from workflow.workflow_run where payload ? 'k'"), [("2",)]
        )

    def test_worker_paths_fail_only_their_run(self):
        # Hostile JSON through the worker's paths: a result, a step output and a
        # child's payload that the database refuses (too deep, NUL) or that
        # Python cannot encode fail their own run for good; the bystanders
        # of the same batches succeed.
        values = {
            "deep": {"v": deep_list(MAX_JSON_DEPTH)},
            "python": {"v": deep_list(5000)},
            "nul": {"v": "a\u0000b"},
            "big": {"v": "x" * (2 << 20)},
        }
        poller, thread, _ = self.start_poller(type_prefixes=["pyworker."], concurrency=8)

        def result(run):
            return values[run.payload["value"]]

        def step(run):
            run.step("hostile", lambda: values[run.payload["value"]])
            return {"ok": True}

        def child(run):
            run.start_child("kid", "pyworker.by.v1", values[run.payload["value"]])
            return {"ok": True}

        poller.handle("pyworker.result.v1", result)
        poller.handle("pyworker.step.v1", step)
        poller.handle("pyworker.child.v1", child)
        poller.handle("pyworker.by.v1", lambda run: {"ok": True})
        bystanders, hostile = [], []
        for name in values:
            bystanders += [self.client.create("pyworker.by.v1", {}).id for _ in range(2)]
            for path in ("result", "step", "child"):
                hostile.append((name, path, self.client.create(f"pyworker.{path}.v1", {"value": name}).id))
        for run_id in bystanders:
            self.assertEqual(self.wait_status(run_id, "succeeded", timeout=30).attempt, 1)
        for name, path, run_id in hostile:
            status, attempt, error, _ = self.finished(run_id)
            self.assertEqual((status, attempt), ("failed", 1), f"{name} via {path}: {error}")
            self.assertTrue(error, f"{name} via {path}")
        self.assertTrue(thread.is_alive(), "the worker died")

    def test_a_refused_result_is_reported_as_failed(self):
        # The database refuses a result past the bound; the run fails for good
        # with its reason (complete_runs does it, so the rest of a batch stands).
        poller, _, _ = self.start_poller(type_prefixes=["pyrefused."])
        poller.handle("pyrefused.a.v1", lambda run: {"v": deep_list(MAX_JSON_DEPTH)})
        status, attempt, error, no_result = self.finished(self.client.create("pyrefused.a.v1", {}).id)
        self.assertEqual((status, attempt, no_result), ("failed", 1, True))
        self.assertIn("nests deeper than 64 levels", error)

    def test_signal_payloads_survive_json_round_trip(self):
        # Signals at the bound reach the handler whole.
        poller, _, _ = self.start_poller(type_prefixes=["pysig."])
        seen = {}

        def waiter(run):
            payload, ok = run.wait_for_signal("go", timeout=30)
            seen["v"] = payload
            return {"ok": ok}

        poller.handle("pysig.a.v1", waiter)
        res = self.client.create("pysig.a.v1", {})
        self.client.signal(res.id, "go", {"v": deep_list(MAX_JSON_DEPTH - 1)})
        self.wait_status(res.id, "succeeded", timeout=30)
        self.assertEqual(json.dumps(seen["v"]), json.dumps({"v": deep_list(MAX_JSON_DEPTH - 1)}))


__all__ = ["HostileValuesTest", "PermanentError"]


class DeadlineFloodTest(InboxTest):
    def test_a_flood_of_overdue_runs_is_logged_per_batch(self):
        # Runs with deadlines decades in the past are expired
        # in batches, one log line a batch, not one a run.
        self.sql(
            "insert into workflow.workflow_run (type, payload, deadline_at) "
            "select 'pyflood.other.v1', '{}', now() - interval '30 years' from generate_series(1, 1200)"
        )
        with self.assertLogs("simpleworkflow", level="INFO") as logs:
            poller, _, _ = self.start_poller(
                type_prefixes=["pyflood.mine."], reap_interval=0.1, lease_duration=1.5
            )
            poller.handle("pyflood.mine.v1", lambda run: {})
            wait_for(
                lambda: self.sql("select count(*) from workflow.workflow_run where status = 'pending'")
                == [(0,)],
                timeout=30,
                what="the flood to expire",
            )
        per_run = [m for m in logs.output if "Run failed: deadline exceeded" in m]
        batches = [m for m in logs.output if "Runs failed: deadline exceeded" in m]
        self.assertEqual(per_run, [])
        self.assertTrue(1 <= len(batches) <= 3, batches)
