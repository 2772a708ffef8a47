"""The Python poller's woken claim (Go: internal/engine/wake_claim_test.go): it takes its worker bucket, and
claims nothing while another woken claim holds it."""

import logging
import os
import sys
import unittest

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from simpleworkflow import Poller  # noqa: E402
from simpleworkflow._claim import CLAIM_RUNS, claim_params  # noqa: E402
from tests.support import InboxTest  # noqa: E402

logging.basicConfig(level=logging.WARNING)

KEY = "pyw.|pyw.job.v1"


class WokenClaimTest(InboxTest):
    def bucket_rows(self):
        return self.sql(
            "select count(*) from workflow.workflow_claimer "
            "where namespace = 'default' and bucket = hashtext(%s) & 255",
            (KEY,),
        )[0][0]

    def test_the_poller_claim_takes_its_bucket_and_skips_while_another_holds_it(self):
        for _ in range(3):
            self.client.create("pyw.job.v1", {})
        poller = Poller(self.url, type_prefixes=["pyw."], worker_id="pyw-1")
        poller.handle("pyw.job.v1", lambda run: None)
        self.assertEqual(self.bucket_rows(), 0)
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(CLAIM_RUNS, claim_params(poller, 1, None, True)).fetchall()
            self.assertEqual(len(rows), 1)
            self.assertEqual(self.bucket_rows(), 1, "the woken claim did not take its bucket")
            with psycopg.connect(self.url) as holder:
                holder.execute(
                    "select 1 from workflow.workflow_claimer "
                    "where namespace = 'default' and bucket = hashtext(%s) & 255 for update",
                    (KEY,),
                )
                self.assertEqual(
                    conn.execute(CLAIM_RUNS, claim_params(poller, 5, None, True)).fetchall(),
                    [],
                    "a woken claim went ahead beside another",
                )
                self.assertEqual(
                    len(conn.execute(CLAIM_RUNS, claim_params(poller, 5, None, False)).fetchall()),
                    2,
                    "a claim that was not woken was held back",
                )
                holder.rollback()


if __name__ == "__main__":
    unittest.main()
