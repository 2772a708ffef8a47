"""The trace context a producer stores with a run, as a Python handler sees it."""

import logging
import os
import sys
import threading

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from simpleworkflow import InvalidInputError  # noqa: E402
from tests import support  # noqa: E402
from tests.support import InboxTest, wait_for  # noqa: E402

logging.basicConfig(level=logging.WARNING)

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TP2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


def tearDownModule():
    support.stop_server()


class TraceParentTest(InboxTest):
    def test_handler_sees_the_stored_traceparent(self):
        single = self.client.create("pytrace.job.v1", {"n": 1}, traceparent=TP)
        many = self.client.create_many(
            [
                {"type": "pytrace.job.v1", "payload": {"n": 2}, "traceparent": TP2},
                {"type": "pytrace.job.v1", "payload": {"n": 3}},
            ]
        )
        # A plain SQL producer fills the column itself.
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(
                "insert into workflow.workflow_run (type, payload, traceparent)"
                " values ('pytrace.job.v1', '{\"n\": 4}', %s) returning id::text",
                (TP,),
            ).fetchone()
        assert row is not None
        self.assertEqual(self.client.get(single.id).traceparent, TP)
        self.assertIsNone(self.client.get(many[1].id).traceparent)

        seen = {}
        lock = threading.Lock()

        def handler(run):
            with lock:
                seen[run.id] = run.traceparent
            return {}

        poller, _, _ = self.start_poller(type_prefixes=["pytrace."], worker_id="py-trace")
        poller.handle("pytrace.job.v1", handler)
        wait_for(lambda: len(seen) == 4, timeout=10, what="the four runs to be handled")
        self.assertEqual(seen, {single.id: TP, many[0].id: TP2, many[1].id: None, row[0]: TP})

    def test_bad_traceparents_are_refused(self):
        for bad in [
            TP.upper(),
            "ff" + TP[2:],
            TP + "\n",
            TP[:-1],
            "00-" + "0" * 32 + TP[35:],
            TP[:36] + "0" * 16 + TP[52:],
            TP + "x" * 100000,
            42,
        ]:
            with self.assertRaises(InvalidInputError) as cm:
                self.client.create("pytrace.job.v1", {}, traceparent=bad)  # type: ignore[arg-type]
            self.assertIn("W3C traceparent", str(cm.exception))
            with self.assertRaises(InvalidInputError) as cm:
                self.client.create_many(
                    [{"type": "pytrace.job.v1"}, {"type": "pytrace.job.v1", "traceparent": bad}]
                )
            self.assertIn("row 2", str(cm.exception))
        self.assertEqual(self.sql("select count(*) from workflow.workflow_run")[0][0], 0)
        # An empty one is no trace context, as in the Go client.
        res = self.client.create("pytrace.job.v1", {}, traceparent="")
        self.assertEqual(
            self.sql("select traceparent from workflow.workflow_run where id = %s", (res.id,))[0][0], None
        )
