package kubectlworkflow

import (
	"testing"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

func TestCancel(t *testing.T) {
	e := newEnv(t)
	e.createRun("long-1", "demo.sleep.v1")
	e.setStatus("long-1", func(s *workflowv1alpha1.WorkflowRunStatus) { s.Phase = workflowv1alpha1.PhaseRunning })

	r := e.plugin("cancel", "long-1", "-n", e.ns)
	wantCode(t, r, 0)
	if r.stdout != "workflowrun.workflow.simpleworkflow.dev/long-1 cancel requested\n" {
		t.Errorf("cancel: %s", r)
	}
	if !e.run("long-1").Spec.Cancel {
		t.Fatal("cancel did not set spec.cancel")
	}
	before := e.run("long-1").ResourceVersion
	r = e.plugin("cancel", "long-1", "-n", e.ns)
	wantCode(t, r, 0)
	if r.stdout != "workflowrun.workflow.simpleworkflow.dev/long-1 cancel already requested\n" || e.run("long-1").ResourceVersion != before {
		t.Errorf("cancel again: %s", r)
	}

	// A finished run is refused, as admission would refuse it.
	e.createRun("done-1", "demo.echo.v1")
	e.setStatus("done-1", func(s *workflowv1alpha1.WorkflowRunStatus) { s.Phase = workflowv1alpha1.PhaseSucceeded })
	r = e.plugin("cancel", "done-1", "-n", e.ns)
	wantCode(t, r, 1)
	wantIn(t, "stderr of cancel of a finished run", r.stderr,
		"error: workflowrun "+e.ns+"/done-1 already finished (phase Succeeded): nothing to cancel")
	if e.run("done-1").Spec.Cancel {
		t.Error("cancel of a finished run set spec.cancel")
	}
}
