"""The hand-off in the Python SDK (Go: pkg/simpleworkflow/hand_off_test.go): a worker that completes a
DAG step starts the next one in the completion's transaction, and a durable parent woken by its child's
end resumes on the worker that ended the child, the same way."""

import json
import logging
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from tests.support import InboxTest, wait_for  # noqa: E402

logging.basicConfig(level=logging.WARNING)

STEPS = 6


class HandOffTest(InboxTest):
    def handed_off(self, prev, nxt):
        """Whether run nxt was started by the transaction that ended run prev (the same xmin)."""
        (same,) = self.sql(
            "select (select max(e.xmin::text::bigint) from workflow.workflow_event e"
            "        where (e.workflow_id = %s or %s = any (e.run_ids)) and e.event_type = 'succeeded')"
            "     = (select max(e.xmin::text::bigint) from workflow.workflow_event e"
            "        where (e.workflow_id = %s or %s = any (e.run_ids)) and e.event_type = 'started')",
            (prev, prev, nxt, nxt),
        )[0]
        return same

    def test_a_chain_and_a_parent_go_on_on_the_worker_that_ended_the_step_before(self):
        # A poll once an hour: only wake-ups and hand-offs start anything.
        poller, _, _ = self.start_poller(type_prefixes=["pyho."], poll_interval=3600)
        calls = []
        lock = threading.Lock()

        def step(run):
            with lock:
                calls.append(run.id)
            return {"ok": True}

        def parent(run):
            run.start_child("child", "pyho.child.v1", {})
            return run.await_child("child")

        def child(run):
            # Ends once its parent waits for it, so that the parent resumes.
            wait_for(
                lambda: self.sql(
                    "select p.wait_kind = 'child' from workflow.workflow_run c "
                    "join workflow.workflow_run p on p.id = c.parent_id where c.id = %s",
                    (run.id,),
                )[0][0],
                what="the parent to wait",
            )
            return "from the child"

        poller.handle("pyho.step.v1", step)
        poller.handle("pyho.parent.v1", parent)
        poller.handle("pyho.child.v1", child)
        chain = [
            {"name": f"s{i}", "type": "pyho.step.v1", **({"dependsOn": [f"s{i - 1}"]} if i else {})}
            for i in range(STEPS)
        ]
        ((dag,),) = self.sql(
            "insert into workflow.workflow_run (type, dag) values ('pyho.chain.v1', %s) "
            "returning id::text",
            (json.dumps({"steps": chain}),),
        )
        parent_id = self.client.create("pyho.parent.v1", {}).id
        self.wait_status(dag, "succeeded")
        self.wait_status(parent_id, "succeeded")
        self.assertEqual(len(calls), STEPS)

        ids = [
            r[0]
            for r in self.sql(
                "select id::text from workflow.workflow_run where parent_id = %s " "order by created_at, id",
                (dag,),
            )
        ]
        self.assertEqual(len(ids), STEPS)
        for i in range(1, STEPS):
            self.assertTrue(
                self.handed_off(ids[i - 1], ids[i]),
                f"step s{i} was not started by the transaction that ended s{i - 1}",
            )
        ((child_id,),) = self.sql(
            "select id::text from workflow.workflow_run where parent_id = %s", (parent_id,)
        )
        self.assertTrue(
            self.handed_off(child_id, parent_id),
            "the parent did not resume in the transaction that ended its child",
        )


if __name__ == "__main__":
    unittest.main()
