"""Run logs (Go: run_log.go): what a handler logs through ``Task.logger``, kept with its run per attempt.

Each attempt's logger (:class:`_RunLogger`, a ``logging.Logger`` of its own,
never registered with the ``logging`` module, so that none is left behind
per run) hands its records to one handler (:class:`_RunLogHandler`): those
at or above the poller's ``run_log_level`` go to the attempt's buffer
(:class:`_RunLog`), unless the handler is replaying its journal, and every
record goes to the worker's own logger too, with the run's id. The buffer
holds at most ``MAX_BUFFERED_LOG_LINES`` lines or ``MAX_BUFFERED_LOG_BYTES``
between two sends; past them the oldest lines are dropped and counted (the
database's own limits per attempt, workflow_settings.max_log_lines and
max_log_bytes, are the owner's, and usually lower).

What is buffered is sent with ``workflow.append_run_logs`` (:func:`send_logs`),
the lines of many attempts in one call: every ``log_flush_interval`` seconds
(:func:`log_loop`), before the outcomes of a batch are written and before a
wait parks its run. One send at a time, so that an attempt's lines reach the
database in the order they were logged; an attempt that logged nothing
costs no call. Lines taken for a call stay the buffer's until it returns
(they are in flight): the send before an outcome or a park waits for a call
still carrying the attempt's lines, so that none arrive after the lease has
ended. The lines of a call that failed are counted as dropped, and that
count goes with the next call.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import deque
from datetime import datetime, timezone
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Deque,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Set,
    Tuple,
    TypeVar,
)

import psycopg

from ._writes import _Conn

if TYPE_CHECKING:
    from .durable import Task
    from .poller import Poller

log = logging.getLogger("simpleworkflow")

#: The most lines, and octets of messages, a worker holds of one attempt's log between two sends.
MAX_BUFFERED_LOG_LINES = 2000
MAX_BUFFERED_LOG_BYTES = 2 << 20
#: The most octets of one message a run log keeps (the database cuts a longer one; so does the worker).
MAX_LOG_MESSAGE_BYTES = 8192
#: The most attempts, and lines, one workflow.append_run_logs call takes.
MAX_LOG_ATTEMPTS_PER_CALL = 1000
MAX_LOG_LINES_PER_CALL = 10000

#: The run log's levels, by the least logging level each stands for (checked from the top).
_LEVELS = ((logging.ERROR, "error"), (logging.WARNING, "warn"), (logging.INFO, "info"))

_APPEND_RUN_LOGS = (
    "select id::text, kept from workflow.append_run_logs(%s, %s::uuid[], %s::bigint[], "
    "%s::bigint[], %s::uuid[], %s::timestamptz[], %s::text[], %s::text[])"
)

#: A run of UTF-16 surrogates: a str's code points that are no UTF-8 (lone surrogates, and the
#: bytes a surrogateescape decode could not read).
_SURROGATES = re.compile("[\ud800-\udfff]+")

#: A buffered line: when, level, message, the message's octets.
_Line = Tuple[datetime, str, str, int]

_L = TypeVar("_L", bound="_RunLogger")


def level_of(levelno: int) -> str:
    """The run log's level of a logging level: debug (below INFO), info, warn or error (ERROR and CRITICAL)."""
    for least, name in _LEVELS:
        if levelno >= least:
            return name
    return "debug"


def _clean(msg: str) -> Tuple[str, int]:
    """log_text, with the octets of the text returned."""
    if "\x00" in msg:
        msg = msg.replace("\x00", "\ufffd")
    if msg.isascii():
        if len(msg) <= MAX_LOG_MESSAGE_BYTES:
            return msg, len(msg)
        note = f" [cut: {len(msg)} bytes]"
        cut = msg[: MAX_LOG_MESSAGE_BYTES - len(note)] + note
        return cut, len(cut)
    try:
        raw = msg.encode("utf-8")
    except UnicodeEncodeError:
        msg = _SURROGATES.sub("\ufffd", msg)
        raw = msg.encode("utf-8")
    if len(raw) <= MAX_LOG_MESSAGE_BYTES:
        return msg, len(raw)
    note = f" [cut: {len(raw)} bytes]"
    end = MAX_LOG_MESSAGE_BYTES - len(note)
    while end > 0 and raw[end] & 0xC0 == 0x80:  # not inside a character
        end -= 1
    cut = raw[:end].decode("utf-8") + note
    return cut, end + len(note)


def log_text(msg: str) -> str:
    """msg as the run log keeps it (Go: logText): text Postgres can hold, NUL characters and runs of
    surrogates (what is no UTF-8) replaced by U+FFFD, at most MAX_LOG_MESSAGE_BYTES octets of UTF-8: a
    longer one is cut at a character and ends with " [cut: N bytes]", N its length."""
    return _clean(msg)[0]


class _RunLog:
    """The lines one attempt's handler logged, until the worker sends them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: Deque[_Line] = deque()
        self._bytes = 0
        self._dropped = 0
        # Calls under way with lines (or a dropped count) taken from here.
        self._in_flight = 0
        # Set once the lease is gone: lines are no longer kept.
        self._closed = False

    def add(self, at: datetime, level: str, msg: str) -> None:
        """Keep a line, dropping (and counting) the oldest past the buffer's bounds."""
        text, size = _clean(msg)
        with self._lock:
            if self._closed:
                return
            self._lines.append((at, level, text, size))
            self._bytes += size
            while len(self._lines) > MAX_BUFFERED_LOG_LINES or (
                self._bytes > MAX_BUFFERED_LOG_BYTES and len(self._lines) > 1
            ):
                self._bytes -= self._lines.popleft()[3]
                self._dropped += 1

    def take(self, max_lines: int) -> Tuple[List[_Line], int]:
        """Return and forget at most max_lines lines, the oldest first, and the count dropped so far (once).
        When either is something, they are in flight until settle is called for them."""
        with self._lock:
            lines = [self._lines.popleft() for _ in range(min(len(self._lines), max_lines))]
            self._bytes -= sum(line[3] for line in lines)
            dropped, self._dropped = self._dropped, 0
            if lines or dropped:
                self._in_flight += 1
            return lines, dropped

    def settle(self, lost: int) -> None:
        """The call that carried what one take returned is over; lost (its lines and dropped count when
        the call failed, else 0) is counted as dropped, and sent with the next call."""
        with self._lock:
            self._in_flight -= 1
            if not self._closed:
                self._dropped += lost

    def pending(self) -> bool:
        """Whether there is anything to send, or a call is still carrying lines taken from here."""
        with self._lock:
            return bool(self._lines) or self._dropped > 0 or self._in_flight > 0

    def close(self) -> None:
        """Stop keeping lines (the lease is gone) and forget what is held."""
        with self._lock:
            self._closed = True
            self._lines.clear()
            self._bytes = self._dropped = 0


class _RunLogHandler(logging.Handler):
    """The one handler of an attempt's logger: each record at or above the run log level goes to the
    attempt's log (its message, with the exception's traceback when it has one) unless the handler
    replays its journal, and every record the worker's logger takes goes to it as a line of its own
    (JSON, as the worker's: msg, worker_id, run_id, type, attempt; also set as the record's attributes
    run_id, workflow_type and attempt)."""

    def __init__(
        self,
        run_log: _RunLog,
        level: int,
        replaying: Callable[[], bool],
        worker: logging.Logger,
        fields: Mapping[str, Any],
    ) -> None:
        super().__init__()
        self._log = run_log
        self._level = level
        self._replaying = replaying
        self._worker = worker
        self._fields = dict(fields)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if record.levelno >= self._level and not self._replaying():
                self._log.add(
                    datetime.fromtimestamp(record.created, timezone.utc),
                    level_of(record.levelno),
                    self.format(record),
                )
            if self._worker.isEnabledFor(record.levelno):
                self._worker.handle(self._forwarded(record))
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - as every logging handler: reported, never raised at the caller
            self.handleError(record)

    def _forwarded(self, record: logging.LogRecord) -> logging.LogRecord:
        """The record as the worker's logger gets it."""
        attrs: Dict[str, Any] = dict(record.__dict__)
        attrs.update(
            name=self._worker.name,
            msg=json.dumps({"msg": record.getMessage(), **self._fields}),
            args=None,
            run_id=self._fields["run_id"],
            workflow_type=self._fields["type"],
            attempt=self._fields["attempt"],
        )
        attrs.pop("message", None)
        return logging.makeLogRecord(attrs)


class _RunLogger(logging.Logger):
    """An attempt's logger (Task.logger). Not registered with the logging module (logging.getLogger
    does not know it): it goes with its Task. A record is made when the run log or the worker's logger
    takes its level (or, when set, this logger's own level does not refuse it); getChild makes a
    child of the same kind, whose records go through this logger's handlers."""

    def __init__(
        self, name: str, run_level: int, worker: logging.Logger, handler: Optional[logging.Handler] = None
    ) -> None:
        super().__init__(name)
        self._run_level = run_level
        self._worker = worker
        if handler is not None:
            self.addHandler(handler)
            self.propagate = False

    def isEnabledFor(self, level: int) -> bool:
        if self.disabled or self.manager.disable >= level:
            return False
        own = self.getEffectiveLevel()
        if own and level < own:
            return False
        return level >= self._run_level or self._worker.isEnabledFor(level)

    def getChild(self: _L, suffix: str) -> _L:
        child = type(self)(f"{self.name}.{suffix}", self._run_level, self._worker)
        child.parent = self
        return child


def new_run_logger(p: Poller, task: Task, run_log: _RunLog) -> logging.Logger:
    """The logger a handler gets for one attempt (Go: newRunLogger)."""
    fields = {"worker_id": p.worker_id, "run_id": task.id, "type": task.type, "attempt": task.attempt}
    handler = _RunLogHandler(run_log, p.run_log_level, task._replaying, log, fields)
    return _RunLogger(f"simpleworkflow.run.{task.id}", p.run_log_level, log, handler)


def log_loop(p: Poller) -> None:
    """Every log_flush_interval until the poller closes, send what the running handlers logged."""
    conn = _Conn(p._open)
    try:
        while not p._closed.wait(p.log_flush_interval):
            with p._lock:
                tasks = [t for t in p._active.values() if not t.done]
            send_logs(p, conn, tasks)
    finally:
        conn.close()


def send_logs(p: Poller, conn: _Conn, tasks: Iterable[Task]) -> None:
    """Send what the attempts' handlers logged, in calls within the database's bounds; an attempt whose
    lease is gone keeps nothing more. Sends are one at a time (p._log_send), each attempt's lines in
    order, an attempt at most once a call; a failed call's lines are counted as dropped, and the worker's
    log says so. Nothing to send: no call. An attempt whose lines another send is carrying counts as
    something to send: this one waits for that call to end (and then, having nothing, makes none)."""
    due: List[Task] = []
    seen: Set[int] = set()
    for t in tasks:
        if t._run_log is not None and id(t) not in seen and t._run_log.pending():
            seen.add(id(t))
            due.append(t)
    if not due:
        return  # most runs log nothing: no call, no wait
    with p._log_send:
        batch: List[Tuple[Task, List[_Line], int]] = []
        # The attempts in the batch by run id, and its lines.
        runs: Dict[str, Task] = {}
        lines = 0

        def send() -> None:
            nonlocal lines
            try:
                if batch:
                    _append(p, conn, batch, lines)
            finally:
                batch.clear()
                runs.clear()
                lines = 0

        try:
            for t in due:
                run_log = t._run_log
                assert run_log is not None
                if runs.get(t.id, t) is not t:
                    # Two attempts of one run (the older lost its lease): the
                    # database tells the attempts of a call apart by run id.
                    send()
                # At most a buffer's worth an attempt a send: a handler that keeps
                # logging holds no other attempt's lines, or an outcome, back.
                budget = MAX_BUFFERED_LOG_LINES
                while budget > 0:
                    if len(batch) == MAX_LOG_ATTEMPTS_PER_CALL or lines == MAX_LOG_LINES_PER_CALL:
                        send()
                    want = min(budget, MAX_LOG_LINES_PER_CALL - lines)
                    taken, dropped = run_log.take(want)
                    if taken or dropped:
                        batch.append((t, taken, dropped))
                        runs[t.id] = t
                        lines += len(taken)
                        budget -= len(taken)
                    if len(taken) < want:
                        # The buffer is empty: what is logged from now on goes
                        # with the next send (taking it into this call would
                        # name the attempt twice).
                        break
            send()
        finally:
            # Taken but never sent (an error on the way): counted as dropped.
            for t, taken, dropped in batch:
                assert t._run_log is not None
                t._run_log.settle(len(taken) + dropped)


def _append(p: Poller, conn: _Conn, batch: List[Tuple[Task, List[_Line], int]], lines: int) -> None:
    """One workflow.append_run_logs call; the attempts whose lease is gone stop keeping lines. Settles
    what the batch took, whatever happens: a failed call's lines are counted as dropped."""
    sent = False
    try:
        line_runs: List[str] = []
        ats: List[datetime] = []
        levels: List[str] = []
        messages: List[str] = []
        for t, taken, _ in batch:
            for at, level, message, _size in taken:
                line_runs.append(t.id)
                ats.append(at)
                levels.append(level)
                messages.append(message)
        try:
            rows = (
                conn.get()
                .execute(
                    _APPEND_RUN_LOGS,
                    (
                        p.worker_id,
                        [t.id for t, _, _ in batch],
                        [t.lease_token for t, _, _ in batch],
                        [d for _, _, d in batch],
                        line_runs,
                        ats,
                        levels,
                        messages,
                    ),
                )
                .fetchall()
            )
        except psycopg.Error as e:
            if isinstance(e, psycopg.OperationalError):
                conn.reset()
            log.warning(
                json.dumps(
                    {
                        "msg": "Sending run logs failed; their lines are counted as dropped",
                        "error": str(e),
                        "runs": len(batch),
                        "lines": lines,
                    }
                )
            )
            return
        sent = True
        lost = {run_id for run_id, kept in rows if not kept}
        for t, _, _ in batch:
            if t.id in lost and t._run_log is not None:
                t._run_log.close()
    finally:
        for t, taken, dropped in batch:
            assert t._run_log is not None
            t._run_log.settle(0 if sent else len(taken) + dropped)
