"""Test support: a real Postgres with the inbox schema, one database per test class."""

import glob
import os
import subprocess
import tempfile
import uuid
from urllib.parse import urlparse, urlunparse

import psycopg

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
            check=True, capture_output=True, text=True, env={**os.environ, "PG_FSYNC": "off"},
        )
        _server["url"], _server["state"] = out.stdout.strip(), state
    return _server["url"]


def stop_server() -> None:
    if "state" in _server:
        subprocess.run(["bash", os.path.join(ROOT, "hack", "pg.sh"), "stop", _server.pop("state")], check=False)
        _server.pop("url", None)


def with_database(url: str, name: str) -> str:
    u = urlparse(url)
    return urlunparse(u._replace(path="/" + name))


def create_database() -> str:
    """A new database with the inbox schema applied from internal/engine/migrations."""
    base = server_url()
    name = "sw_py_" + uuid.uuid4().hex[:10]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    url = with_database(base, name)
    with psycopg.connect(url, autocommit=True) as conn:
        for path in sorted(glob.glob(os.path.join(ROOT, "internal", "engine", "migrations", "*.sql"))):
            with open(path) as f:
                conn.execute(f.read())
    return url


def drop_database(url: str) -> None:
    name = urlparse(url).path.lstrip("/")
    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')
