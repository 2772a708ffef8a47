"""OpenTelemetry spans of a Python worker, named and attributed as the Go worker's (docs/traces.md).

The integration is optional: these tests run where the opentelemetry packages (API and SDK) are
installed and are skipped otherwise; without them the worker traces nothing.
"""

import logging
import os
import sys
import threading
import unittest
from datetime import timedelta

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from simpleworkflow import tracing  # noqa: E402
from tests import support  # noqa: E402
from tests.support import InboxTest, wait_for  # noqa: E402

try:
    from opentelemetry import trace as otel_trace
except ImportError:
    otel_trace = None
try:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
except ImportError:
    TracerProvider = None

logging.basicConfig(level=logging.WARNING)

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
RETRY_FAST = timedelta(milliseconds=100)


def tearDownModule():
    support.stop_server()


@unittest.skipIf(otel_trace is not None, "opentelemetry is installed")
class WithoutOpenTelemetryTest(unittest.TestCase):
    def test_nothing_is_traced(self):
        t = tracing.Tracing()
        self.assertFalse(tracing.available())
        self.assertFalse(t.enabled)
        self.assertIsNone(t.start_attempt("id", "a.v1", 1, 3, "w", 1, 0, TP))
        with t.use(None), t.step(None, "step", "s", "id", 1) as span:
            span.set("k", "v")
        t.end_attempt(None, tracing.OUTCOME_SUCCEEDED)


class LeaseFenceTest(InboxTest):
    def test_the_fence_a_span_carries_is_the_one_the_database_keeps(self):
        for token in (1, -1, 2**62 + 5, -(2**63), 2**63 - 1):
            self.assertEqual(
                tracing.lease_fence(token),
                self.sql("select workflow.lease_fence(%s::bigint)", (token,))[0][0],
            )


@unittest.skipIf(otel_trace is None, "opentelemetry is not installed")
@unittest.skipIf(TracerProvider is None, "opentelemetry is not installed (the opentelemetry-sdk package)")
class SpansTest(InboxTest):
    def setUp(self):
        super().setUp()
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.addCleanup(self.provider.shutdown)

    def spans(self, name):
        return [s for s in self.exporter.get_finished_spans() if s.name == name]

    def test_each_attempt_is_a_span_linked_to_its_producer(self):
        handler_spans = []
        lock = threading.Lock()
        tracer = otel_trace.get_tracer("test", tracer_provider=self.provider)

        def handler(task):
            with tracer.start_as_current_span("handler.own") as own:
                with lock:
                    handler_spans.append(own.get_span_context())
            task.step("charge", lambda: 1)
            if task.attempt == 1:
                raise RuntimeError("retry me")
            return {"ok": True}

        poller, _, _ = self.start_poller(
            type_prefixes=["pyspan."], worker_id="py-spans", tracer_provider=self.provider
        )
        poller.handle("pyspan.job.v1", handler)
        res = self.client.create("pyspan.job.v1", {}, traceparent=TP, retry_base_delay=RETRY_FAST)
        self.wait_status(res.id, "succeeded")
        attempts = wait_for(
            lambda: len(a := self.spans("simpleworkflow.attempt pyspan.job.v1")) == 2 and a,
            what="two attempt spans",
        )
        first, second = sorted(attempts, key=lambda s: s.attributes[tracing.ATTR_ATTEMPT])
        for span, attempt in ((first, 1), (second, 2)):
            self.assertEqual(span.kind, otel_trace.SpanKind.CONSUMER)
            self.assertIsNone(span.parent, "an attempt starts a new trace")
            self.assertEqual(len(span.links), 1)
            link = span.links[0].context
            self.assertEqual((link.trace_id, link.span_id), (int(TP[3:35], 16), int(TP[36:52], 16)))
            self.assertNotEqual(span.context.trace_id, link.trace_id)
            attrs = dict(span.attributes)
            self.assertEqual(
                {
                    k: attrs[k]
                    for k in (
                        "messaging.system",
                        "messaging.operation.type",
                        "messaging.destination.name",
                        "messaging.message.id",
                        tracing.ATTR_RUN_ID,
                        tracing.ATTR_RUN_TYPE,
                        tracing.ATTR_ATTEMPT,
                        tracing.ATTR_MAX_ATTEMPTS,
                        tracing.ATTR_WORKER_ID,
                        tracing.ATTR_JOURNAL,
                    )
                },
                {
                    "messaging.system": "simpleworkflow",
                    "messaging.operation.type": "process",
                    "messaging.destination.name": "pyspan.job.v1",
                    "messaging.message.id": res.id,
                    "simpleworkflow.run.id": res.id,
                    "simpleworkflow.run.type": "pyspan.job.v1",
                    "simpleworkflow.run.attempt": attempt,
                    "simpleworkflow.run.max_attempts": 3,
                    "simpleworkflow.worker.id": "py-spans",
                    "simpleworkflow.run.journal_entries": attempt - 1,
                },
            )
            self.assertIsInstance(attrs[tracing.ATTR_LEASE_FENCE], int)
            self.assertNotIn("simpleworkflow.lease.token", attrs)
        self.assertEqual(first.attributes["simpleworkflow.outcome"], "retrying")
        self.assertIs(first.attributes["simpleworkflow.retry"], True)
        self.assertRegex(first.attributes["simpleworkflow.next_attempt_at"], r"^\d{4}-\d\d-\d\dT[\d:.]+Z$")
        self.assertEqual(first.status.status_code, otel_trace.StatusCode.ERROR)
        self.assertIn("exception", [e.name for e in first.events])
        self.assertEqual(second.attributes["simpleworkflow.outcome"], "succeeded")
        self.assertEqual(second.status.status_code, otel_trace.StatusCode.OK)

        # The durable calls and the handler's own spans are children of the attempt.
        steps = sorted(
            self.spans("simpleworkflow.step charge"), key=lambda s: s.attributes[tracing.ATTR_ATTEMPT]
        )
        self.assertEqual(len(steps), 2)
        for step, attempt, replayed in ((steps[0], first, False), (steps[1], second, True)):
            self.assertEqual(step.parent.span_id, attempt.context.span_id)
            self.assertEqual(step.context.trace_id, attempt.context.trace_id)
            self.assertEqual(step.kind, otel_trace.SpanKind.INTERNAL)
            self.assertEqual(
                {
                    k: step.attributes[k]
                    for k in (
                        "simpleworkflow.step.name",
                        "simpleworkflow.step.kind",
                        "simpleworkflow.step.position",
                        "simpleworkflow.step.replayed",
                        "simpleworkflow.run.id",
                    )
                },
                {
                    "simpleworkflow.step.name": "charge",
                    "simpleworkflow.step.kind": "step",
                    "simpleworkflow.step.position": 0,
                    "simpleworkflow.step.replayed": replayed,
                    "simpleworkflow.run.id": res.id,
                },
            )
        own = self.spans("handler.own")
        self.assertEqual(
            sorted(s.parent.span_id for s in own), sorted(a.context.span_id for a in (first, second))
        )

    def test_a_parked_attempt_and_its_sleep(self):
        poller, _, _ = self.start_poller(type_prefixes=["pyspan."], tracer_provider=self.provider)
        poller.handle("pyspan.nap.v1", lambda task: task.sleep("nap", 0.3) or {"slept": True})
        res = self.client.create("pyspan.nap.v1", {})
        self.wait_status(res.id, "succeeded")
        attempts = wait_for(
            lambda: len(a := self.spans("simpleworkflow.attempt pyspan.nap.v1")) == 2 and a,
            what="two attempt spans",
        )
        self.assertEqual(
            sorted(a.attributes["simpleworkflow.outcome"] for a in attempts), ["parked", "succeeded"]
        )
        sleeps = self.spans("simpleworkflow.sleep nap")
        parked = [s for s in sleeps if s.attributes.get("simpleworkflow.step.parked")]
        self.assertEqual(len(parked), 1)
        self.assertIn("simpleworkflow.step.wake_at", parked[0].attributes)
        self.assertNotEqual(parked[0].status.status_code, otel_trace.StatusCode.ERROR)
        self.assertIn(True, [s.attributes.get("simpleworkflow.step.replayed") for s in sleeps])


if __name__ == "__main__":
    unittest.main()
