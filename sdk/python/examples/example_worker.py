#!/usr/bin/env python3
"""A Python worker built only from the simpleworkflow SDK, serving the same
demo.*.v1 types as the Go example worker:

  demo.echo.v1   result = payload
  demo.sleep.v1  {"seconds": N}: sleeps N seconds, stops promptly when cancelled
  demo.fail.v1   {"failTimes": N}: fails its first N attempts, then succeeds

Flags have environment fallbacks (see --help). SIGTERM stops it gracefully.
"""

import argparse
import logging
import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from simpleworkflow import IntentPoller, PermanentError, RunContext  # noqa: E402


def echo(run: RunContext):
    return dict(run.payload)


def sleep(run: RunContext):
    seconds = run.payload.get("seconds", 0)
    if not isinstance(seconds, (int, float)) or not 0 <= seconds <= 86400:
        raise PermanentError(f"seconds must be between 0 and 86400, got {seconds!r}")
    if run.wait(seconds):
        raise RuntimeError(f"sleep interrupted: {run.reason}")
    return {"sleptSeconds": seconds}


def fail_times(run: RunContext):
    n = run.payload.get("failTimes", 0)
    if run.attempt <= n:
        raise RuntimeError(f"planned failure {run.attempt} of {n}")
    return {"attempts": run.attempt}


def main() -> None:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--database-url", default=env("DATABASE_URL", ""), help="Postgres URL (env DATABASE_URL)")
    p.add_argument("--type-prefixes", default=env("TYPE_PREFIXES", "demo."), help="comma-separated (env TYPE_PREFIXES)")
    p.add_argument("--runtime", default=env("RUNTIME", "python"), help="runtime declared (env RUNTIME)")
    p.add_argument("--worker-id", default=env("WORKER_ID", socket.gethostname()), help="env WORKER_ID")
    p.add_argument("--concurrency", type=int, default=int(env("CONCURRENCY", "4")), help="env CONCURRENCY")
    p.add_argument("--lease-duration", type=float, default=float(env("LEASE_DURATION", "30")), help="seconds (env LEASE_DURATION)")
    p.add_argument("--shutdown-grace-period", type=float, default=float(env("SHUTDOWN_GRACE_PERIOD", "20")), help="seconds")
    args = p.parse_args()
    if not args.database_url:
        p.error("--database-url (or DATABASE_URL) is required")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    poller = IntentPoller(
        args.database_url,
        type_prefixes=[s.strip() for s in args.type_prefixes.split(",") if s.strip()],
        lease_duration=args.lease_duration,
        worker_id=args.worker_id,
        runtime=args.runtime,
        concurrency=args.concurrency,
        shutdown_grace_period=args.shutdown_grace_period,
    )
    poller.handle("demo.echo.v1", echo)
    poller.handle("demo.sleep.v1", sleep)
    poller.handle("demo.fail.v1", fail_times)
    poller.run()


if __name__ == "__main__":
    main()
