"""Namespaces, the inbox's tenants: a poller serves one, the client records into one, and a database
login acts only on the namespaces the schema's owner bound it to (workflow.grant_namespace), with the
roles of internal/engine/sql/roles.sql applied and row-level security keeping it inside them."""

import os
import threading
import time
import unittest
import uuid
from urllib.parse import quote, urlparse, urlunparse

import psycopg
from psycopg import sql

from tests import support
from tests.support import InboxTest

from simpleworkflow import (  # noqa: E402  (support puts the SDK on sys.path)
    DEFAULT_NAMESPACE,
    Client,
    InvalidInputError,
    PermissionDeniedError,
    Poller,
)

ROLES_SQL = os.path.join(support.ROOT, "internal", "engine", "sql", "roles.sql")

#: The seed's cancel UPDATE, verbatim (internal/engine/roles_test.go, DESIGN.md "The inbox contract").
SEED_CANCEL = (
    "update workflow.workflow_run set status = 'cancelled', updated_at = now() "
    "where id = %s and status in ('pending', 'leased')"
)


class NamespaceSettingsTest(unittest.TestCase):
    """The poller's namespace setting, checked before anything connects."""

    def test_insert_notifications_wake_their_namespace_only(self):
        """workflow_run_created names the type's namespace (Go: TestInsertNotificationsWakeTheirNamespaceOnly)."""
        from simpleworkflow._claim import wakes

        cases = [
            ("team-a", ["billing."], "team-a/billing.charge.v1", True),
            ("team-a", ["billing."], "team-b/billing.charge.v1", False),
            ("team-a", [], "team-b/billing.charge.v1", False),
            ("team-a", [], "team-a/any.job.v1", True),
            ("team-a", ["billing."], "team-a/shipping.label.v1", False),
            ("default", ["billing."], "billing.charge.v1", True),
            ("default", ["billing."], "default/billing.charge.v1", True),
            ("default", ["billing."], "/billing.charge.v1", True),
        ]
        for ns, prefixes, payload, want in cases:
            with self.subTest(namespace=ns, payload=payload):
                self.assertEqual(wakes(ns, prefixes, payload), want)

    def test_default_namespace(self):
        self.assertEqual(DEFAULT_NAMESPACE, "default")
        self.assertEqual(Poller("postgres://unused").namespace, "default")
        self.assertEqual(Poller("postgres://unused").config().namespace, "default")
        self.assertEqual(Poller("postgres://unused", namespace=None).config().namespace, "default")
        self.assertEqual(Poller("postgres://unused", namespace="team-a").config().namespace, "team-a")
        self.assertIn("namespace='team-a'", repr(Poller("postgres://unused", namespace="team-a").config()))

    def test_kubernetes_namespace_names_only(self):
        for good in ("a", "0", "team-a", "a-0-b", "x" * 63):
            with self.subTest(namespace=good):
                self.assertEqual(Poller("postgres://unused", namespace=good).namespace, good)
        for bad in ("", "Team-a", "team_a", "-a", "a-", "a.b", "a b", "x" * 64, "tëam"):
            with self.subTest(namespace=bad):
                with self.assertRaises(ValueError) as cm:
                    Poller("postgres://unused", namespace=bad)
                self.assertIsInstance(cm.exception, InvalidInputError)
                self.assertIn("namespace", str(cm.exception))
        with self.assertRaises(InvalidInputError):
            Poller("postgres://unused", namespace=5)  # type: ignore[arg-type]

    def test_client_checks_names_before_a_round_trip(self):
        client = Client("postgres://unused")  # never connects: the names are refused first
        for kw in ({"namespace": "Team-B"}, {"namespace": "x" * 64}, {"type_namespace": "team_a"}):
            with self.subTest(**kw):
                with self.assertRaises(InvalidInputError):
                    client.create("ns.job.v1", {}, **kw)
                with self.assertRaises(InvalidInputError):
                    client.create_many([{"type": "ns.job.v1"}], **kw)
        with self.assertRaisesRegex(InvalidInputError, "an argument of create_many"):
            client.create_many([{"type": "ns.job.v1", "namespace": "team-b"}])


def _run_poller(poller):
    """Run poller in a thread; return (thread, box) where box["error"] is what run() raised, if anything."""
    box = {}

    def target():
        try:
            poller.run(install_signal_handlers=False)
        except BaseException as e:  # noqa: BLE001 - the test reads it
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


class NamespaceTest(InboxTest):
    """As the schema's owner (the test server's user), who acts on every namespace."""

    def namespace_of(self, run_id):
        return self.sql(
            "select namespace::text, type_namespace::text from workflow.workflow_run where id = %s", (run_id,)
        )[0]

    def test_poller_claims_only_its_namespace(self):
        """(a) A poller serving team-a claims and completes team-a's runs; a run of the same type in
        team-b stays pending, untouched (never leased, no event but 'created')."""
        bystander = self.client.create("ns.job.v1", {"who": "b"}, namespace="team-b").id
        mine = [
            self.client.create("ns.job.v1", {"who": "a", "i": i}, namespace="team-a").id for i in range(3)
        ]
        seen = []
        lock = threading.Lock()
        poller, _, _ = self.start_poller(type_prefixes=["ns."], namespace="team-a", poll_interval=0.1)
        self.assertEqual(poller.config().namespace, "team-a")

        def handle(task):
            with lock:
                seen.append(task.id)
            return {"served": "team-a", "who": task.payload["who"]}

        poller.handle("ns.job.v1", handle)
        for run_id in mine:
            run = self.wait_status(run_id, "succeeded")
            self.assertEqual(run.result, {"served": "team-a", "who": "a"})
            self.assertEqual((run.namespace, run.type_namespace), ("team-a", "team-a"))
        # More runs of team-a after the first claims: the poller claims again and again, and
        # still leaves team-b's alone.
        later = self.client.create("ns.job.v1", {"who": "a"}, namespace="team-a").id
        self.wait_status(later, "succeeded")
        time.sleep(0.5)  # a few more polls (every 0.1 s) with the bystander runnable
        with lock:
            self.assertEqual(sorted(seen), sorted(mine + [later]))
        run = self.client.get(bystander)
        self.assertEqual(run.status, "pending")
        self.assertEqual(run.attempt, 0)
        self.assertIsNone(run.leased_by)
        self.assertIsNone(run.started_at)
        self.assertEqual((run.namespace, run.type_namespace), ("team-b", "team-b"))
        self.assertEqual(self.trail(bystander), ["created"])

    def test_poller_of_the_default_namespace(self):
        """A poller that names no namespace serves 'default', where runs recorded without one land."""
        default = self.client.create("ns.job.v1").id
        other = self.client.create("ns.job.v1", namespace="team-a").id
        self.assertEqual(self.namespace_of(default), ("default", "default"))
        poller, _, _ = self.start_poller(type_prefixes=["ns."])
        poller.handle("ns.job.v1", lambda task: {"ok": True})
        self.wait_status(default, "succeeded")
        time.sleep(0.5)
        self.assertEqual(self.client.get(other).status, "pending")

    def test_client_records_in_a_namespace(self):
        """(b) Runs recorded with namespace='team-b' (create and create_many, on the client's own
        connection and inside the caller's transaction) belong to team-b and run team-b's type."""
        one = self.client.create("ns.job.v1", {"n": 1}, namespace="team-b", idempotency_key="b:1")
        self.assertTrue(one.created)
        self.assertEqual(self.namespace_of(one.id), ("team-b", "team-b"))
        again = self.client.create("ns.job.v1", {"n": 1}, namespace="team-b", idempotency_key="b:1")
        self.assertEqual((again.id, again.created), (one.id, False))

        many = self.client.create_many(
            [{"type": "ns.job.v1", "payload": {"n": i}} for i in range(3)]
            + [{"type": "ns.other.v1", "idempotency_key": "b:2"}],
            namespace="team-b",
        )
        self.assertEqual(len(many), 4)
        for res in many:
            self.assertTrue(res.created)
            self.assertEqual(self.namespace_of(res.id), ("team-b", "team-b"))
            run = self.client.get(res.id)
            self.assertEqual((run.namespace, run.type_namespace), ("team-b", "team-b"))

        with psycopg.connect(self.url) as conn:
            in_tx = self.client.create("ns.job.v1", namespace="team-b", conn=conn).id
            in_tx_many = self.client.create_many([{"type": "ns.job.v1"}], namespace="team-b", conn=conn)[0].id
            conn.commit()
        self.assertEqual(self.namespace_of(in_tx), ("team-b", "team-b"))
        self.assertEqual(self.namespace_of(in_tx_many), ("team-b", "team-b"))

        plain = self.client.create("ns.job.v1").id
        plain_many = self.client.create_many([{"type": "ns.job.v1"}])[0].id
        self.assertEqual(self.namespace_of(plain), ("default", "default"))
        self.assertEqual(self.namespace_of(plain_many), ("default", "default"))
        listed = {r.id: r.namespace for r in self.client.list(type_prefix="ns.", limit=1000).runs}
        self.assertEqual(listed[one.id], "team-b")
        self.assertEqual(listed[plain], "default")
        self.assertEqual(
            self.sql("select count(*) from workflow.workflow_run where namespace = 'team-b'")[0][0], 7
        )

    def test_a_type_another_namespace_shares(self):
        """type_namespace: team-b's run of a type team-a's registry shares with it runs among team-a's
        workers; a type not shared is refused (PermissionDeniedError) and nothing is recorded."""
        with self.assertRaises(PermissionDeniedError):
            self.client.create("ns.shared.v1", namespace="team-b", type_namespace="team-a")
        with self.assertRaises(PermissionDeniedError):
            self.client.create_many([{"type": "ns.shared.v1"}], namespace="team-b", type_namespace="team-a")
        self.assertEqual(self.sql("select count(*) from workflow.workflow_run")[0][0], 0)
        self.sql(
            "insert into workflow.workflow_registry (namespace, workflow_name, runtime, shared_with) "
            "values ('team-a', 'ns.shared.v1', 'python', '{team-b}')"
        )
        shared = self.client.create(
            "ns.shared.v1", {"via": "create"}, namespace="team-b", type_namespace="team-a"
        ).id
        shared_many = self.client.create_many(
            [{"type": "ns.shared.v1", "payload": {"via": "create_many"}}],
            namespace="team-b",
            type_namespace="team-a",
        )[0].id
        for run_id in (shared, shared_many):
            self.assertEqual(self.namespace_of(run_id), ("team-b", "team-a"))
        # team-b's own poller does not run them; team-a's does.
        b, _, _ = self.start_poller(type_prefixes=["ns."], namespace="team-b", poll_interval=0.1)
        b.handle("ns.shared.v1", lambda task: {"by": "team-b"})
        time.sleep(0.5)
        self.assertEqual(self.client.get(shared).status, "pending")
        a, _, _ = self.start_poller(type_prefixes=["ns."], namespace="team-a", poll_interval=0.1)
        a.handle("ns.shared.v1", lambda task: {"by": "team-a"})
        for run_id in (shared, shared_many):
            run = self.wait_status(run_id, "succeeded")
            self.assertEqual(run.result, {"by": "team-a"})
            self.assertEqual((run.namespace, run.type_namespace), ("team-b", "team-a"))


class LoginTest(InboxTest):
    """As real LOGIN roles, members of the inbox's roles (roles.sql applied), bound to namespaces."""

    def setUp(self):
        super().setUp()
        (can_create,) = self.sql(
            "select rolsuper or rolcreaterole from pg_roles where rolname = current_user"
        )[0]
        if not can_create:
            self.skipTest("the test server's user may not create roles")
        with psycopg.connect(self.url, autocommit=True) as conn, open(ROLES_SQL, encoding="utf-8") as f:
            conn.execute(f.read())

    def login_as(self, *roles):
        """A new login role, member of roles; its URL. Dropped (with what it owns) when the test ends."""
        name = "sw_py_user_" + uuid.uuid4().hex[:12]
        password = uuid.uuid4().hex
        self.sql(
            sql.SQL("create role {} login password {} in role {}").format(
                sql.Identifier(name),
                sql.Literal(password),
                sql.SQL(", ").join(sql.Identifier(r) for r in roles),
            )
        )

        def drop():
            # In the test database (drop owned is per database), before it is dropped.
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(sql.SQL("drop owned by {}").format(sql.Identifier(name)))
                conn.execute(sql.SQL("drop role {}").format(sql.Identifier(name)))

        self.addCleanup(drop)
        u = urlparse(self.url)
        host = u.netloc.rpartition("@")[2]
        url = urlunparse(u._replace(netloc=f"{quote(name, safe='')}:{quote(password, safe='')}@{host}"))
        with psycopg.connect(url, autocommit=True) as conn:
            self.assertEqual(conn.execute("select current_user").fetchone()[0], name)
        return name, url

    def grant(self, role, namespace, capacity):
        self.sql("select workflow.grant_namespace(%s, %s, %s)", (role, namespace, capacity))

    def test_worker_login_serving_another_namespace_is_refused(self):
        """(c) A worker login bound to team-a works for team-a; its poller serving team-b (or the default
        namespace) stops at the first claim with PermissionDeniedError, and team-b's run stays pending."""
        name, url = self.login_as("workflow_worker")
        self.grant(name, "team-a", "worker")
        theirs = self.client.create("ns.job.v1", namespace="team-b").id
        ours = self.client.create("ns.job.v1", namespace="team-a").id

        for served in ("team-b", None):
            with self.subTest(namespace=served):
                poller = Poller(url, type_prefixes=["ns."], namespace=served, poll_interval=0.1)
                poller.handle("ns.job.v1", lambda task: {"ok": True})
                with self.assertLogs("simpleworkflow", "ERROR") as logs:
                    thread, box = _run_poller(poller)
                    thread.join(30)
                    if thread.is_alive():
                        poller.stop()
                        thread.join(30)
                        self.fail("the poller kept running after its claims were refused")
                self.assertTrue(any("Claim refused; stopping" in line for line in logs.output), logs.output)
                error = box.get("error")
                self.assertIsInstance(error, PermissionDeniedError, f"run() raised {error!r}")
                message = str(error)
                self.assertIn(served or "default", message)
                self.assertIn(name, message, "the database's sentence names the login")
                self.assertIn("grant_namespace", message)
                self.assertEqual(self.client.get(theirs).status, "pending")

        # The same login serving its own namespace claims and completes team-a's run.
        poller = Poller(url, type_prefixes=["ns."], namespace="team-a", poll_interval=0.1)
        poller.handle("ns.job.v1", lambda task: {"ok": True})
        thread, box = _run_poller(poller)
        self.addCleanup(lambda: (poller.stop(), thread.join(30)))
        run = self.wait_status(ours, "succeeded")
        self.assertEqual(run.result, {"ok": True})
        time.sleep(0.3)
        self.assertNotIn("error", box)
        run = self.client.get(theirs)
        self.assertEqual((run.status, run.attempt), ("pending", 0))
        self.assertEqual(self.trail(theirs), ["created"])

    def test_producer_login_is_kept_inside_its_namespace(self):
        """(d) A producer login bound to team-a reads team-a's runs and none of team-b's through plain
        SELECT (row-level security), cancels none of them with the seed's UPDATE (0 rows), records only
        in team-a, and its client says PermissionDeniedError for team-b."""
        name, url = self.login_as("workflow_producer")
        self.grant(name, "team-a", "producer")
        a = self.client.create("ns.job.v1", namespace="team-a").id
        b = self.client.create("ns.job.v1", namespace="team-b").id
        self.assertEqual(
            self.sql("select count(*) from workflow.workflow_event where workflow_id = %s", (b,))[0][0],
            1,
            "the owner sees team-b's 'created' event",
        )

        with psycopg.connect(url, autocommit=True) as conn:
            ids = {r[0] for r in conn.execute("select id::text from workflow.workflow_run").fetchall()}
            self.assertEqual(ids, {a})
            self.assertEqual(
                conn.execute("select count(*) from workflow.workflow_run where id = %s", (b,)).fetchone()[0],
                0,
            )
            self.assertEqual(
                conn.execute(
                    "select count(*) from workflow.workflow_run where namespace = 'team-b'"
                ).fetchone()[0],
                0,
            )
            self.assertEqual(
                conn.execute(
                    "select count(*) from workflow.workflow_event where workflow_id = %s", (b,)
                ).fetchone()[0],
                0,
            )
            self.assertEqual(
                conn.execute(
                    "select count(*) from workflow.workflow_event where workflow_id = %s", (a,)
                ).fetchone()[0],
                1,
            )
            self.assertEqual(conn.execute(SEED_CANCEL, (b,)).rowcount, 0)
            self.assertEqual(conn.execute(SEED_CANCEL, (a,)).rowcount, 1)
        self.assertEqual(self.client.get(b).status, "pending")
        self.assertEqual(self.client.get(a).status, "cancelled")

        producer = Client(url)
        self.assertFalse(producer.cancel(b), "cancel_run of another namespace's run")
        self.assertEqual(self.client.get(b).status, "pending")
        mine = producer.create("ns.job.v1").id  # its one producer namespace
        self.assertEqual(self.client.get(mine).namespace, "team-a")
        named = producer.create_many([{"type": "ns.job.v1"}], namespace="team-a")[0].id
        self.assertEqual(self.client.get(named).namespace, "team-a")
        with self.assertRaises(PermissionDeniedError):
            producer.create("ns.job.v1", namespace="team-b")
        with self.assertRaises(PermissionDeniedError):
            producer.create_many([{"type": "ns.job.v1"}], namespace="team-b")
        with self.assertRaises(PermissionDeniedError):
            producer.create("ns.job.v1", namespace="team-a", type_namespace="team-b")
        self.assertEqual(
            self.sql("select count(*) from workflow.workflow_run where namespace = 'team-b'")[0][0],
            1,
            "nothing was recorded in team-b",
        )

    def test_login_bound_to_no_namespace(self):
        """A producer login bound to none records nothing: PermissionDeniedError naming the binding it lacks."""
        name, url = self.login_as("workflow_producer")
        with self.assertRaisesRegex(PermissionDeniedError, "grant_namespace"):
            Client(url).create("ns.job.v1")
        with self.assertRaises(PermissionDeniedError):
            Client(url).create_many([{"type": "ns.job.v1"}])
        self.assertEqual(self.sql("select count(*) from workflow.workflow_run")[0][0], 0)


if __name__ == "__main__":
    unittest.main()
