"""Test support: a real Postgres with the inbox schema (one database per test), a base test
case with a client and a poller, and polling helpers."""

import atexit
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid
from urllib.parse import urlparse, urlunparse

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from simpleworkflow import Client, Poller  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_server = {}


def server_url() -> str:
    """TEST_DATABASE_URL or DATABASE_URL, else a throwaway cluster from hack/pg.sh (stopped at exit)."""
    url = os.environ.get("TEST_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if url:
        return url
    if "url" not in _server:
        state = os.path.join(tempfile.mkdtemp(prefix="sw-py-pg-"), "pg")
        out = subprocess.run(
            ["bash", os.path.join(ROOT, "hack", "pg.sh"), "start", state, "--watch", str(os.getpid())],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PG_FSYNC": "off"},
        )
        _server["url"], _server["state"] = out.stdout.strip(), state
        atexit.register(stop_server)
    return _server["url"]


def stop_server() -> None:
    if "state" in _server:
        subprocess.run(
            ["bash", os.path.join(ROOT, "hack", "pg.sh"), "stop", _server.pop("state")], check=False
        )
        _server.pop("url", None)


def with_database(url: str, name: str) -> str:
    u = urlparse(url)
    return urlunparse(u._replace(path="/" + name))


def create_database() -> str:
    """A new database with the inbox schema applied from internal/engine/sql/workflow.sql."""
    base = server_url()
    name = "sw_py_" + uuid.uuid4().hex[:10]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    url = with_database(base, name)
    with psycopg.connect(url, autocommit=True) as conn:
        with open(os.path.join(ROOT, "internal", "engine", "sql", "workflow.sql")) as f:
            conn.execute(f.read())
    return url


def drop_database(url: str) -> None:
    name = urlparse(url).path.lstrip("/")
    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')


def wait_for(cond, timeout=15.0, what="condition"):
    """Poll cond until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class InboxTest(unittest.TestCase):
    """A fresh database per test, a Client on it, and pollers stopped at cleanup."""

    def setUp(self):
        self.url = create_database()
        self.addCleanup(drop_database, self.url)
        self.client = Client(self.url)

    def start_poller(self, **kw):
        kw.setdefault("poll_interval", 0.2)
        poller = Poller(self.url, **kw)
        thread = threading.Thread(target=poller.run, kwargs={"install_signal_handlers": False}, daemon=True)
        thread.start()

        def stop():
            poller.stop()
            thread.join(30)
            self.assertFalse(thread.is_alive(), "poller did not stop")

        self.addCleanup(stop)
        return poller, thread, stop

    def trail(self, run_id):
        return [e.type for e in self.client.events(run_id) if e.type != "heartbeat"]

    def wait_status(self, run_id, status, timeout=15.0):
        """Wait until the run has status, and return it."""
        return wait_for(
            lambda: (r := self.client.get(run_id)).status == status and r,
            timeout,
            what=f"run {run_id} to be {status}",
        )

    def clock_now(self):
        """The database's clock: workflow.now(), which every rule reads."""
        return self.sql("select workflow.now()")[0][0]

    def advance_clock(self, delta):
        """Move the database's clock (workflow.now()) forward by delta, a timedelta, as the schema's owner
        may: timers and retries come due, and leases and deadlines pass, without waiting."""
        self.sql("update workflow.workflow_settings set clock_offset = clock_offset + %s", (delta,))

    def expire_lease(self, run_id):
        """Move the database clock an hour on, past the run's lease, and reap it in the same
        transaction (no heartbeat renews it in between); fail unless the run's lease was reaped."""
        with psycopg.connect(self.url) as conn:
            conn.execute(
                "update workflow.workflow_settings set clock_offset = clock_offset + interval '1 hour'"
            )
            (reaped,) = conn.execute(
                "select count(*) from workflow.reap_expired_leases(100) where id = %s", (run_id,)
            ).fetchone()
            conn.commit()
        self.assertEqual(reaped, 1, "the run's lease was not reaped")

    def sql(self, query, params=()):
        """Run one statement on a short connection; return its rows (or None)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else None
