"""A cancellation notification is only a hint: any database login may send one (pg_notify), for any run
id. The poller confirms it with the database (an immediate heartbeat of the runs it names that the
poller holds) before it cancels a handler, and a flood of them costs at most one such call every 0.1s."""

import logging
import os
import sys
import threading
import time
import uuid
from urllib.parse import quote, urlparse, urlunparse

import psycopg
from psycopg import sql

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tests import support  # noqa: E402
from tests.support import InboxTest, wait_for  # noqa: E402

logging.basicConfig(level=logging.WARNING)

#: The seed's cancel UPDATE (internal/engine/roles_test.go).
SEED_CANCEL = (
    "update workflow.workflow_run set status = 'cancelled', updated_at = now() "
    "where id = %s and status in ('pending', 'leased')"
)


def tearDownModule():
    support.stop_server()


class ForgedCancelTest(InboxTest):
    def plain_login(self):
        """A connection as a new login role granted nothing (no inbox role, no namespace)."""
        (can_create,) = self.sql(
            "select rolsuper or rolcreaterole from pg_roles where rolname = current_user"
        )[0]
        if not can_create:
            self.skipTest("the test server's user may not create roles")
        name, password = "sw_py_plain_" + uuid.uuid4().hex[:12], uuid.uuid4().hex
        self.sql(
            sql.SQL("create role {} login password {}").format(sql.Identifier(name), sql.Literal(password))
        )
        self.addCleanup(self.sql, sql.SQL("drop role {}").format(sql.Identifier(name)))
        u = urlparse(self.url)
        host = u.netloc.rpartition("@")[2]
        conn = psycopg.connect(
            urlunparse(u._replace(netloc=f"{quote(name, safe='')}:{quote(password, safe='')}@{host}")),
            autocommit=True,
        )
        self.addCleanup(conn.close)  # before the role is dropped
        self.assertEqual(conn.execute("select current_user").fetchone()[0], name)
        return conn

    @staticmethod
    def forge(conn, times, *ids):
        # Each in its own transaction: within one, Postgres folds equal notifications.
        for _ in range(times):
            for run_id in ids:
                conn.execute("select pg_notify('workflow_run_cancelled', %s)", (run_id,))

    def heartbeats(self, run_id):
        return self.sql("select heartbeat_count from workflow.workflow_run where id = %s", (run_id,))[0][0]

    def start_waiting_handler(self, wtype):
        """A poller (heartbeat every 10s) whose handler of wtype runs until released or cancelled."""
        poller, _, _ = self.start_poller(type_prefixes=[wtype.split(".")[0] + "."], lease_duration=30)
        started, release = threading.Event(), threading.Event()
        seen = {}

        def handler(run):
            started.set()
            t0 = time.monotonic()
            while not release.is_set():
                if run.wait(0.01):
                    seen.update(reason=run.reason, at=time.monotonic())
                    raise RuntimeError(f"stopped: {run.reason}")
            seen.update(released_after=time.monotonic() - t0)
            return {"ok": True}

        poller.handle(wtype, handler)
        res = self.client.create(wtype, {})
        self.assertTrue(started.wait(30), "the handler did not start")
        return res, release, seen

    def test_a_forged_cancellation_does_not_stop_the_handler(self):
        """(a) 200 forged notifications for the run (and for ids the poller does not hold) from a login
        granted nothing: the handler runs on, the run succeeds, its trail has no cancellation and no lost
        lease, and the poller asked the database at most once every 0.1s."""
        forger = self.plain_login()
        res, release, seen = self.start_waiting_handler("pyforged.wait.v1")
        other = self.client.create("elsewhere.idle.v1", {})
        self.assertEqual(self.heartbeats(res.id), 0)
        at = time.monotonic()
        self.forge(forger, 200, res.id, other.id, str(uuid.UUID(int=0)), "not a uuid")
        # The poller asked the database (no regular heartbeat is due for 10s)...
        wait_for(
            lambda: "reason" in seen or self.heartbeats(res.id) >= 1,
            timeout=5,
            what="the poller to confirm the notification",
        )
        self.assertNotIn("reason", seen, "a forged notification stopped the handler")
        time.sleep(0.3)  # the confirmation of the flood's tail
        elapsed = time.monotonic() - at
        n = self.heartbeats(res.id)
        # ...at most once every 0.1s.
        self.assertLessEqual(
            n, 2 + int(elapsed / 0.1), f"{n} heartbeats in {elapsed:.2f}s of forged notifications"
        )
        self.assertNotIn("reason", seen, "a forged notification stopped the handler")
        release.set()
        run = self.wait_status(res.id, "succeeded")
        self.assertEqual(run.attempt, 1)
        self.assertEqual(run.result, {"ok": True})
        self.assertNotIn("reason", seen)
        self.assertEqual(self.trail(res.id), ["created", "started", "succeeded"])
        self.assertEqual(self.client.get(other.id).status, "pending")

    def test_a_real_cancel_still_stops_the_handler_at_once(self):
        """(b) The seed's cancel UPDATE stops the handler within a second (the heartbeat is 10s away),
        although forged notifications for the same run keep coming."""
        forger = self.plain_login()
        res, release, seen = self.start_waiting_handler("pyforgedreal.wait.v1")
        self.addCleanup(release.set)
        stop_forging = threading.Event()
        forging_failed = []

        def flood():
            try:
                while not stop_forging.is_set():
                    self.forge(forger, 1, res.id)
            except psycopg.Error as e:
                forging_failed.append(e)

        flooder = threading.Thread(target=flood, daemon=True)
        flooder.start()
        try:
            time.sleep(0.3)
            self.assertNotIn("reason", seen, "forged notifications stopped the handler")
            at = time.monotonic()
            self.sql(SEED_CANCEL, (res.id,))
            wait_for(lambda: "reason" in seen, timeout=5, what="the handler to stop")
            self.assertLess(seen["at"] - at, 1.0, "the handler stopped more than 1s after the cancel")
            self.assertEqual(seen["reason"], "run cancelled")
        finally:
            stop_forging.set()
            flooder.join(10)
        self.assertEqual(forging_failed, [])
        time.sleep(0.3)
        self.assertEqual(self.client.get(res.id).status, "cancelled")
        self.assertEqual(self.trail(res.id), ["created", "started", "cancelled"])
