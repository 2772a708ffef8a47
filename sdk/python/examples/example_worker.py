#!/usr/bin/env python3
"""A Python worker built only from the simpleworkflow SDK, serving the same
demo.*.v1 types as the Go example worker:

  demo.echo.v1   result = payload
  demo.sleep.v1  {"seconds": N}: sleeps N seconds, stops promptly when cancelled
  demo.fail.v1   {"failTimes": N}: fails its first N attempts, then succeeds
  demo.order.v1  {"orderId", "amount", "sleepSeconds", "approveTimeoutSeconds",
                 "counters"?, "holdAfterChargeSeconds"?}: durable steps reserve
                 and charge, a durable sleep "cool-off", a wait for the
                 "approve" signal (rejected on timeout), then the step ship

Each handler logs a line or two through its task's logger: kept with the
run, per attempt (client.logs(run_id)), and in this worker's own log.

Flags have environment fallbacks (see --help). SIGTERM stops it gracefully.
"""

import argparse
import json
import logging
import os
import socket
import sys
import threading
from decimal import Decimal
from typing import Any, Callable, Dict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import psycopg  # noqa: E402

from simpleworkflow import (  # noqa: E402
    DEFAULT_CONCURRENCY,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_SHUTDOWN_GRACE_SECONDS,
    PermanentError,
    Poller,
    Task,
)

log = logging.getLogger("example-worker")

#: The table that counts step executions of demo.order.v1 runs with counters.
COUNTER_DDL = """create table if not exists public.demo_step_counter (
    run_id uuid not null, step text not null, n integer not null, primary key (run_id, step))"""


def echo(run: Task) -> Dict[str, Any]:
    run.logger.info("echoing %d keys", len(run.payload))
    return dict(run.payload)


def sleep(run: Task) -> Dict[str, Any]:
    seconds = run.payload.get("seconds", 0)
    if not isinstance(seconds, (int, float)) or not 0 <= seconds <= 86400:
        raise PermanentError(f"seconds must be between 0 and 86400, got {seconds!r}")
    run.logger.info("sleeping %s seconds", seconds)
    if run.wait(seconds):
        run.logger.warning("sleep interrupted: %s", run.reason)
        raise RuntimeError(f"sleep interrupted: {run.reason}")
    return {"sleptSeconds": seconds}


def fail_times(run: Task) -> Dict[str, Any]:
    n = run.payload.get("failTimes", 0)
    if run.attempt <= n:
        run.logger.warning("failing as planned: attempt %d of %d", run.attempt, n)
        raise RuntimeError(f"planned failure {run.attempt} of {n}")
    run.logger.info("succeeding at attempt %d", run.attempt)
    return {"attempts": run.attempt}


def go_g(x: float) -> str:
    """x formatted like Go's %g: the shortest digits, an exponent below 1e-4 and from 1e6 on."""
    x = float(x)
    if x == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(abs(x))).normalize().as_tuple()
    ds = "".join(map(str, digits))
    exp = len(ds) + exponent - 1  # type: ignore[operator]
    neg = "-" if x < 0 else ""
    if exp < -4 or exp >= 6:
        mantissa = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{neg}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{neg}0.{'0' * (-exp - 1)}{ds}"
    if len(ds) <= exp + 1:
        return neg + ds + "0" * (exp + 1 - len(ds))
    return f"{neg}{ds[:exp + 1]}.{ds[exp + 1:]}"


class Counters:
    """Counts step executions in public.demo_step_counter, one connection per handler thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.local = threading.local()

    def setup(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(COUNTER_DDL)
        except psycopg.Error as e:
            log.warning(
                json.dumps(
                    {
                        "msg": "Cannot create the demo step counter table; "
                        "demo.order.v1 runs with counters will fail",
                        "error": str(e),
                    }
                )
            )

    def count(self, run_id: str, step: str) -> None:
        conn = getattr(self.local, "conn", None)
        if conn is None or conn.closed:
            conn = psycopg.connect(self.url, autocommit=True)
            self.local.conn = conn
        conn.execute(
            "insert into public.demo_step_counter (run_id, step, n) values (%s, %s, 1) "
            "on conflict (run_id, step) do update set n = demo_step_counter.n + 1",
            (run_id, step),
        )


def _number(payload: Any, key: str) -> float:
    v = payload.get(key, 0)
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise PermanentError(f"{key} must be a number, got {v!r}")
    return float(v)


def order_handler(counters: Counters) -> Callable[[Task], Any]:
    """demo.order.v1: reserve, charge, a durable sleep, a wait for the approve signal, ship.

    Each step's output lands in the journal, so a retried or resumed run skips
    what it already did, whichever runtime (Go or Python) resumes it.
    """

    def order(run: Task) -> Dict[str, Any]:
        p = run.payload
        order_id = p.get("orderId", "")
        amount = p.get("amount", 0)
        sleep_s = _number(p, "sleepSeconds")
        approve_s = _number(p, "approveTimeoutSeconds")
        hold_s = _number(p, "holdAfterChargeSeconds")
        if not (0 <= sleep_s <= 7 * 24 * 3600 and approve_s >= 0 and 0 <= hold_s <= 3600):
            raise PermanentError(
                f"order {order_id}: sleepSeconds, approveTimeoutSeconds and "
                "holdAfterChargeSeconds must be non-negative and bounded"
            )
        with_counters = bool(p.get("counters"))

        def step(name: str, out: Dict[str, Any]) -> Any:
            def body() -> Dict[str, Any]:
                if with_counters:
                    counters.count(run.id, name)
                out["by"] = "python"
                return out

            return run.step(name, body)

        # Logged once: a replay of the journal (after the sleep, the signal
        # or a retry) does not keep it again.
        run.logger.info("order %s: reserving and charging %s", order_id, amount)
        reserve = step("reserve", {"reserved": True, "orderId": order_id})
        charge = step("charge", {"charged": amount})
        # Holds the lease (not durably) on the first attempt only.
        if hold_s > 0 and run.attempt == 1 and run.wait(hold_s):
            raise RuntimeError(f"order {order_id}: interrupted: {run.reason}")
        if sleep_s > 0:
            run.sleep("cool-off", sleep_s)
        approval, ok = run.wait_for_signal("approve", timeout=approve_s or None)
        if not ok:
            run.logger.warning("order %s: not approved in time", order_id)
            raise PermanentError(f"order {order_id} rejected: not approved within {go_g(approve_s)}s")
        run.logger.info("order %s approved; shipping", order_id)
        ship = step("ship", {"shipped": True})
        return {"orderId": order_id, "reserve": reserve, "charge": charge, "approval": approval, "ship": ship}

    return order


def main() -> None:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--database-url", default=env("DATABASE_URL", ""), help="Postgres URL (env DATABASE_URL)")
    p.add_argument(
        "--type-prefixes", default=env("TYPE_PREFIXES", "demo."), help="comma-separated (env TYPE_PREFIXES)"
    )
    p.add_argument(
        "--namespace",
        default=env("NAMESPACE", "default"),
        help="namespace whose runs it claims (env NAMESPACE)",
    )
    p.add_argument("--runtime", default=env("RUNTIME", "python"), help="runtime declared (env RUNTIME)")
    p.add_argument("--worker-id", default=env("WORKER_ID", socket.gethostname()), help="env WORKER_ID")
    p.add_argument(
        "--concurrency",
        type=int,
        default=int(env("CONCURRENCY", str(DEFAULT_CONCURRENCY))),
        help="env CONCURRENCY",
    )
    p.add_argument(
        "--lease-duration",
        type=float,
        default=float(env("LEASE_DURATION", str(DEFAULT_LEASE_SECONDS))),
        help="seconds (env LEASE_DURATION)",
    )
    p.add_argument(
        "--shutdown-grace-period",
        type=float,
        default=float(env("SHUTDOWN_GRACE_PERIOD", str(DEFAULT_SHUTDOWN_GRACE_SECONDS))),
        help="seconds",
    )
    args = p.parse_args()
    if not args.database_url:
        p.error("--database-url (or DATABASE_URL) is required")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    poller = Poller(
        args.database_url,
        type_prefixes=[s.strip() for s in args.type_prefixes.split(",") if s.strip()],
        lease_duration=args.lease_duration,
        worker_id=args.worker_id,
        runtime=args.runtime,
        namespace=args.namespace,
        concurrency=args.concurrency,
        shutdown_grace_period=args.shutdown_grace_period,
    )
    poller.handle("demo.echo.v1", echo)
    poller.handle("demo.sleep.v1", sleep)
    poller.handle("demo.fail.v1", fail_times)
    counters = Counters(args.database_url)
    counters.setup()
    poller.handle("demo.order.v1", order_handler(counters))
    poller.run()


if __name__ == "__main__":
    main()
