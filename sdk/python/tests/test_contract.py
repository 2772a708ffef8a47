"""The client contract (testdata/contract/*.json) against the Python SDK and a real database.

The Go SDK reads the same files (pkg/simpleworkflow/contract_test.go); both must give the same
answer for every case. Every file of the directory is read: a file this test does not know fails it.
"""

import contextlib
import dataclasses
import inspect
import json
import logging
import os
import sys
import threading
import unittest
from collections import defaultdict
from datetime import timedelta
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import simpleworkflow  # noqa: E402
import simpleworkflow.client as sw_client  # noqa: E402
import psycopg  # noqa: E402

from simpleworkflow import (  # noqa: E402
    Client,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    Poller,
    RunFinishedError,
    Task,
)
from simpleworkflow._error_codes import ERRORS  # noqa: E402
from tests import support  # noqa: E402
from tests.support import InboxTest, wait_for  # noqa: E402

logging.basicConfig(level=logging.WARNING)

CONTRACT = os.path.join(support.ROOT, "testdata", "contract")
#: The files this test checks, each by the test of the same name.
FILES = {
    "types.json",
    "names.json",
    "traceparents.json",
    "payloads.json",
    "defaults.json",
    "replay.json",
    "parity.json",
    "errors.json",
}


def load(name):
    with open(os.path.join(CONTRACT, name), encoding="utf-8") as f:
        return json.load(f)


def tearDownModule():
    support.stop_server()


def nested(levels):
    """An object nested ``levels`` levels below the top object: {"a": {"a": ... {} ...}}."""
    value = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def of_bytes(n):
    """An object whose JSON text (as the SDK sends it and as the database measures it) is n bytes."""
    value = {"s": "x" * (n - len('{"s": ""}'))}
    assert len(json.dumps(value).encode()) == n
    return value


def payload_of(case):
    """The payload a payloads.json case describes."""
    if "json" in case:
        return json.loads(case["json"])
    if "nested" in case:
        return nested(case["nested"])
    if "bytes" in case:
        return of_bytes(case["bytes"])
    raise AssertionError(f"payloads.json: a case without json, nested or bytes: {case}")


class ContractFilesTest(unittest.TestCase):
    def test_every_file_is_checked(self):
        present = {n for n in os.listdir(CONTRACT) if n.endswith(".json")}
        self.assertEqual(present - FILES, set(), "contract files this test does not check")
        self.assertEqual(FILES - present, set(), "contract files missing")


def sendable(value):
    """Whether psycopg can send value as text: it refuses a NUL itself, so the database never sees one."""
    return "\x00" not in value


class ContractTest(InboxTest):
    """Each invalid case is refused three ways: through the SDK; by the SDK's early checks alone (a client
    that fails the test if it connects); and by the database alone (those checks switched off). The
    database is the authority, the early checks a quicker, clearer refusal that must agree with it."""

    def runs(self):
        return self.sql("select count(*) from workflow.workflow_run")[0][0]

    def offline(self):
        """A client whose every connection fails the test: what it refuses, it refuses by itself."""

        def connect():
            raise AssertionError("the SDK's checks let the value reach the database")

        return Client(connect=connect)

    @contextlib.contextmanager
    def database_alone(self):
        """The SDK's own checks of types, step and signal names and traceparents switched off."""
        with mock.patch.object(sw_client, "validate_type", lambda workflow_type: None), mock.patch.object(
            sw_client, "traceparent_problem", lambda traceparent: None
        ), mock.patch.object(sw_client, "step_name_problem", lambda name: None):
            with self.assertRaisesRegex(AssertionError, "reach the database", msg="the checks are still on"):
                self.offline().create("Not a type", {})
            yield

    def assertRefused(self, call, what):
        before = self.runs()
        with self.assertRaises(InvalidInputError, msg=what):
            call()
        self.assertEqual(self.runs(), before, f"{what}: something was recorded")

    def test_errors(self):
        """The inbox says its errors itself (class SW, errors.json): the SDK maps each code to the error the
        table names, and a value the early checks would have refused reaches the caller as the rule's
        sentence, the same the Go SDK returns."""
        classes = {
            "InvalidInputError": InvalidInputError,
            "PermissionDeniedError": PermissionDeniedError,
            "NotFoundError": NotFoundError,
            "RunFinishedError": RunFinishedError,
        }
        table = load("errors.json")["codes"]
        self.assertEqual(
            dict(ERRORS), {c["code"]: classes[c["python"]] if c["python"] else None for c in table}
        )
        with self.database_alone():
            with self.assertRaises(InvalidInputError) as refused:
                self.client.create("Not a type", {})
            self.assertTrue(
                str(refused.exception).startswith("type must be dot-separated lowercase segments")
            )
            with self.assertRaises(InvalidInputError) as refused:
                self.client.create("contract.errors.v1", {}, traceparent="00-zz")
            self.assertIn("W3C traceparent", str(refused.exception))
        # A plain statement meets the rule too: its SQLSTATE, its name, its sentence.
        with psycopg.connect(self.url, autocommit=True) as conn:
            with self.assertRaises(psycopg.Error) as raw:
                conn.execute(
                    "insert into workflow.workflow_run (type, priority) values ('contract.errors.v1', -1)"
                )
        self.assertEqual(raw.exception.sqlstate, "SW001")
        self.assertEqual(raw.exception.diag.constraint_name, "workflow_run_priority_range")
        self.assertEqual(raw.exception.diag.message_primary, "priority must be between 0 and 1000000")
        with self.assertRaises(NotFoundError):
            self.client.signal("00000000-0000-0000-0000-000000000000", "go")
        run = self.client.create("contract.errors.v1", {})
        self.assertTrue(self.client.cancel(run.id))
        with self.assertRaises(RunFinishedError):
            self.client.signal(run.id, "go")
        self.assertEqual(self.runs(), 1)

    def test_types(self):
        cases = load("types.json")
        for t in cases["valid"]:
            with self.subTest(type=t):
                res = self.client.create(t, {})
                self.assertTrue(res.created)
                self.assertEqual(self.client.get(res.id).type, t)
                (many,) = self.client.create_many([{"type": t}])
                self.assertEqual(self.client.get(many.id).type, t)
        offline = self.offline()
        for case in cases["invalid"]:
            with self.subTest(type=case["why"]):
                self.assertRefused(lambda: self.client.create(case["value"], {}), case["why"])
                self.assertRefused(lambda: self.client.create_many([{"type": case["value"]}]), case["why"])
            with self.subTest(type=case["why"], by="the SDK alone"):
                self.assertRaises(InvalidInputError, offline.create, case["value"], {})
                self.assertRaises(InvalidInputError, offline.create_many, [{"type": case["value"]}])
            if sendable(case["value"]):
                with self.subTest(type=case["why"], by="the database alone"), self.database_alone():
                    self.assertRefused(lambda: self.client.create(case["value"], {}), case["why"])
                    self.assertRefused(
                        lambda: self.client.create_many([{"type": case["value"]}]), case["why"]
                    )

    def test_traceparents(self):
        cases = load("traceparents.json")
        for tp in cases["valid"]:
            with self.subTest(traceparent=tp):
                res = self.client.create("contract.trace.v1", {}, traceparent=tp)
                self.assertEqual(self.client.get(res.id).traceparent, tp)
                (many,) = self.client.create_many([{"type": "contract.trace.v1", "traceparent": tp}])
                self.assertEqual(self.client.get(many.id).traceparent, tp)
        offline = self.offline()

        def refused(case):
            self.assertRefused(
                lambda: self.client.create("contract.trace.v1", {}, traceparent=case["value"]), case["why"]
            )
            self.assertRefused(
                lambda: self.client.create_many(
                    [{"type": "contract.trace.v1", "traceparent": case["value"]}]
                ),
                case["why"],
            )

        for case in cases["invalid"]:
            with self.subTest(traceparent=case["why"]):
                refused(case)
            with self.subTest(traceparent=case["why"], by="the SDK alone"):
                with self.assertRaises(InvalidInputError):
                    offline.create("contract.trace.v1", {}, traceparent=case["value"])
                with self.assertRaises(InvalidInputError):
                    offline.create_many([{"type": "contract.trace.v1", "traceparent": case["value"]}])
            if sendable(case["value"]):
                with self.subTest(traceparent=case["why"], by="the database alone"), self.database_alone():
                    refused(case)

    def test_names(self):
        cases = load("names.json")
        run = self.client.create("contract.names.v1", {})

        def signals():
            return self.sql("select count(*) from workflow.workflow_signal")[0][0]

        for name in cases["valid"]:
            with self.subTest(name=name):
                sent = self.client.signal(run.id, name, {"name": name})
                self.assertFalse(sent.duplicate)
                self.assertEqual(
                    self.sql("select name from workflow.workflow_signal where id = %s", (sent.signal_id,)),
                    [(name,)],
                )
        self.assertEqual(signals(), len(cases["valid"]))
        offline = self.offline()
        for case in cases["invalid"]:
            with self.subTest(name=case["why"]):
                with self.assertRaises(InvalidInputError):
                    self.client.signal(run.id, case["value"])
                self.assertEqual(signals(), len(cases["valid"]), f"{case['why']}: a signal was recorded")
            with self.subTest(name=case["why"], by="the SDK alone"):
                with self.assertRaises(InvalidInputError):
                    offline.signal(run.id, case["value"])
            if sendable(case["value"]):
                with self.subTest(name=case["why"], by="the database alone"), self.database_alone():
                    with self.assertRaises(InvalidInputError):
                        self.client.signal(run.id, case["value"])
                    self.assertEqual(signals(), len(cases["valid"]), f"{case['why']}: a signal was recorded")

    def test_payloads(self):
        cases = load("payloads.json")
        for case in cases["recorded"]:
            with self.subTest(payload=case["why"]):
                res = self.client.create("contract.payload.v1", payload_of(case))
                run = self.client.get(res.id)
                if "stored" in case:
                    self.assertEqual(run.payload, case["stored"])
                if "nested" in case:
                    self.assertEqual(run.payload, nested(case["nested"]))
        for case in cases["refused"]:
            with self.subTest(payload=case["why"]):
                self.assertRefused(
                    lambda: self.client.create("contract.payload.v1", payload_of(case)), case["why"]
                )

    def test_defaults(self):
        defaults = load("defaults.json")
        self.assertEqual(set(defaults), {"run", "worker"})
        run = self.client.get(self.client.create("contract.defaults.v1").id)
        for key, want in defaults["run"].items():
            with self.subTest(run=key):
                self.assertTrue(hasattr(run, key), f"Run has no {key}")
                self.assertEqual(getattr(run, key), want)
        # The contract's keys, and the Poller's settings and constants they are.
        worker = {
            "lease_seconds": ("lease_duration", simpleworkflow.DEFAULT_LEASE_SECONDS),
            "concurrency": ("concurrency", simpleworkflow.DEFAULT_CONCURRENCY),
            "poll_interval_seconds": ("poll_interval", simpleworkflow.DEFAULT_POLL_INTERVAL_SECONDS),
            "claim_batch_size": ("claim_batch_size", simpleworkflow.DEFAULT_CLAIM_BATCH_SIZE),
            "shutdown_grace_seconds": (
                "shutdown_grace_period",
                simpleworkflow.DEFAULT_SHUTDOWN_GRACE_SECONDS,
            ),
            "reap_interval_seconds": ("reap_interval", simpleworkflow.DEFAULT_REAP_INTERVAL_SECONDS),
        }
        self.assertEqual(
            set(defaults["worker"]) - set(worker), set(), "worker defaults this test does not know"
        )
        config = Poller(self.url).config()
        for key, want in defaults["worker"].items():
            with self.subTest(worker=key):
                field, constant = worker[key]
                self.assertEqual(getattr(config, field), want)
                self.assertEqual(constant, want)

    def test_replay(self):
        scenarios = load("replay.json")
        ran = defaultdict(list)
        lock = threading.Lock()

        def handler_of(scenario):
            def handler(task):
                names = scenario["first"] if task.attempt == 1 else scenario["second"]
                for name in names:

                    def body(name=name):
                        with lock:
                            ran[(task.id, task.attempt)].append(name)
                        return name

                    self.assertEqual(task.step(name, body), name)
                if task.attempt == 1:
                    raise RuntimeError("first attempt fails after its steps")
                return {"ok": True}

            return handler

        poller, _, _ = self.start_poller(type_prefixes=["contract.replay"], poll_interval=0.1)
        runs = []
        for i, scenario in enumerate(scenarios):
            wtype = f"contract.replay{i}.v1"
            poller.handle(wtype, handler_of(scenario))
            runs.append(self.client.create(wtype, {}, max_attempts=5, retry_base_delay=timedelta(hours=1)).id)
        # Every first attempt fails; the second comes once the database clock
        # passes the backoff (an hour, plus up to 10 %).
        for run_id in runs:
            wait_for(
                lambda: (r := self.client.get(run_id)).status == "pending" and r.attempt == 1,
                timeout=30,
                what=f"the first attempt of run {run_id} to fail",
            )
        self.advance_clock(timedelta(hours=2))
        for run_id, scenario in zip(runs, scenarios):
            with self.subTest(scenario=scenario["name"]):
                if scenario["expect"] == "succeeded":
                    run = self.wait_status(run_id, "succeeded", timeout=30)
                    self.assertEqual(run.attempt, 2)
                    with lock:
                        self.assertEqual(ran[(run_id, 2)], scenario["ran_again"])
                elif scenario["expect"] == "nondeterministic":
                    run = self.wait_status(run_id, "failed", timeout=30)
                    self.assertEqual(
                        run.attempt, 2, "failed for good at the replay, not for lack of attempts"
                    )
                    self.assertEqual(run.last_error, scenario["message"])
                else:
                    self.fail(f"replay.json: unknown expectation {scenario['expect']!r}")
                with lock:
                    self.assertEqual(ran[(run_id, 1)], scenario["first"], "the first attempt ran its steps")


class ParityTest(unittest.TestCase):
    """Every Python name of parity.json exists, and every Python verb is in it.

    The verbs are the public methods of Client, Poller and Task ("Client.create")
    and the package's own: its public functions, and its classes other than
    records (dataclasses, as Go's structs) and exceptions (as Go's errors),
    whose constructors do what Go's Connect and New* functions do ("Client",
    "Poller"). A second name of one class is an alias, listed as one.
    """

    CLASSES = {"Client": Client, "Poller": Poller, "Task": Task}

    def instance(self, name):
        if name == "Client":
            return Client("postgres://unused")
        if name == "Poller":
            return Poller("postgres://unused")
        return Task("00000000-0000-0000-0000-000000000000", "contract.parity.v1", {}, 1, 3, "worker")

    def python_names(self):
        parity = load("parity.json")
        self.assertEqual(set(parity), {"verbs", "only"})
        names = [v["python"] for v in parity["verbs"]]
        names += [o["python"] for o in parity["only"] if "python" in o]
        return names

    def public_names(self):
        """The package's public names, as dir() sees them (its submodules aside)."""
        return {
            n
            for n in dir(simpleworkflow)
            if not n.startswith("_") and not inspect.ismodule(getattr(simpleworkflow, n))
        }

    def test_every_python_name_exists(self):
        missing = []
        for name in self.python_names():
            cls_name, _, member = name.partition(".")
            if not member:
                if name not in simpleworkflow.__all__:
                    missing.append(f"{name} (not in simpleworkflow.__all__)")
                continue
            cls = self.CLASSES.get(cls_name)
            if cls is None:
                missing.append(f"{name} (no class {cls_name!r} among {sorted(self.CLASSES)})")
                continue
            if not (hasattr(cls, member) or hasattr(self.instance(cls_name), member)):
                missing.append(name)
        self.assertEqual(missing, [], "names of parity.json the Python SDK lacks")

    def test_the_parity_page_shows_the_file(self):
        """docs/sdk-parity.md has a row for every verb and every one-sided name of parity.json."""
        with open(os.path.join(support.ROOT, "docs", "sdk-parity.md"), encoding="utf-8") as f:
            page = f.read()
        parity = load("parity.json")
        rows = [f"| `{v['go']}` | `{v['python']}` | {v.get('note', '')} |" for v in parity["verbs"]]
        for o in parity["only"]:
            go = f"`{o['go']}`" if "go" in o else ""
            py = f"`{o['python']}`" if "python" in o else ""
            rows.append(f"| {go} | {py} | {o['why']} |")
        self.assertEqual(
            [r for r in rows if r not in page], [], "rows of parity.json missing from docs/sdk-parity.md"
        )

    def test_every_public_method_is_in_parity(self):
        listed = set(self.python_names())
        missing = []
        for cls_name, cls in self.CLASSES.items():
            for klass in cls.__mro__:
                if klass is object:
                    continue
                for attr, member in vars(klass).items():
                    if attr.startswith("_"):
                        continue
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if not (inspect.isfunction(member) or isinstance(member, property)):
                        continue
                    if f"{cls_name}.{attr}" not in listed:
                        missing.append(f"{cls_name}.{attr}")
        self.assertEqual(
            sorted(set(missing)), [], "public methods of the Python SDK that parity.json does not list"
        )

    def test_every_package_verb_is_in_parity(self):
        self.assertEqual(
            self.public_names() ^ (set(simpleworkflow.__all__) - {"__version__"}),
            set(),
            "public names of the package that simpleworkflow.__all__ leaves out, or names it lacks",
        )
        listed = set(self.python_names())
        missing = []
        for name in sorted(simpleworkflow.__all__):
            obj = getattr(simpleworkflow, name)
            if name in listed:
                continue
            if inspect.isclass(obj) and (dataclasses.is_dataclass(obj) or issubclass(obj, BaseException)):
                continue
            if inspect.isclass(obj) or callable(obj):
                missing.append(name)
        self.assertEqual(missing, [], "functions and classes of the package that parity.json does not list")

    def test_no_object_has_two_names(self):
        """Every class and function of the package has one public name: no alias is kept."""
        by_object = defaultdict(list)
        for name in simpleworkflow.__all__:
            obj = getattr(simpleworkflow, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                by_object[id(obj)].append(name)
        self.assertEqual([sorted(n) for n in by_object.values() if len(n) > 1], [])


if __name__ == "__main__":
    unittest.main()
