"""What the poller's background writers share (Go: retry.go and the batching of its writers).

A connection opened on first use and again after it broke (:class:`_Conn`), a
queue drained in batches (:class:`_BatchQueue`), one write retried through a
database outage while the leases may still hold (:func:`with_retry`), and the
error a value the database refuses raises (:class:`_Refused`).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Generic, List, Optional, Sequence, Tuple, TypeVar

import psycopg

from .client import _REFUSED_STATES, _primary_message
from .durable import REASON_SHUTDOWN
from .errors import StoppedError

#: The most steps, and outcomes, written in one call (as the Go SDK).
_MAX_WRITE_BATCH = 1000


class _Refused(Exception):
    """The database refused a value of a write (a NUL escape, a value past a limit): a retry cannot help."""


def _is_refused(e: psycopg.Error) -> bool:
    return getattr(e, "sqlstate", None) in _REFUSED_STATES or isinstance(e, psycopg.DataError)


T = TypeVar("T")


class _Conn:
    """One connection of a background thread (a writer, the heartbeat, the reaper), opened on first use
    and again after it broke."""

    def __init__(self, open_conn: Callable[[], psycopg.Connection[Any]]) -> None:
        self._open = open_conn
        self._conn: Optional[psycopg.Connection[Any]] = None

    def get(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self._open()
        return self._conn

    def reset(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    close = reset


class _BatchQueue(Generic[T]):
    """A queue a background thread drains in batches: whatever accumulated while the previous batch was
    being written goes in the next one. After close, put raises StoppedError and the thread ends once
    the queue is empty."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._queue: "queue.Queue[Optional[T]]" = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False

    def put(self, item: T) -> None:
        with self._lock:
            if self._closed:
                raise StoppedError(f"{self._what}: {REASON_SHUTDOWN}", REASON_SHUTDOWN)
            self._queue.put(item)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(None)

    def batches(self) -> Any:
        """Yield batches until closed and drained."""
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            last = False
            while len(batch) < _MAX_WRITE_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    last = True
                    break
                batch.append(item)
            yield batch
            if last:
                return


def with_retry(
    conn: _Conn, query: str, params: Sequence[Any], lease_duration: float
) -> List[Tuple[Any, ...]]:
    """Run one write, reconnecting through a database outage while the leases may still hold.

    Every write is fenced by the lease tokens, so a retry after a write
    that did land changes nothing. A value the database refuses raises
    _Refused at once.
    """
    return in_retry(conn, lambda c: c.execute(query, params).fetchall(), lease_duration)


def in_retry(conn: _Conn, write: Callable[[psycopg.Connection[Any]], T], lease_duration: float) -> T:
    """with_retry for any write made on the connection (several statements in one transaction, say)."""
    deadline = time.monotonic() + max(lease_duration, 5.0)
    backoff = 0.1
    while True:
        try:
            return write(conn.get())
        except psycopg.OperationalError:
            conn.reset()
            if time.monotonic() + backoff > deadline:
                raise
            time.sleep(backoff)
            backoff = min(backoff * 2, 2.0)
        except psycopg.Error as e:
            if _is_refused(e):
                raise _Refused(_primary_message(e)) from None
            raise
