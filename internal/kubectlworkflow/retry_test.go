package kubectlworkflow

import (
	"testing"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

func TestRetry(t *testing.T) {
	e := newEnv(t)
	e.createRun("ok-1", "demo.echo.v1")
	e.setStatus("ok-1", func(s *workflowv1alpha1.WorkflowRunStatus) { s.Phase = workflowv1alpha1.PhaseSucceeded })
	r := e.plugin("retry", "ok-1", "-n", e.ns)
	wantCode(t, r, 1)
	wantIn(t, "stderr of retry of a Succeeded run", r.stderr,
		"error: workflowrun "+e.ns+"/ok-1 cannot be retried: only a Failed or Cancelled run can be (phase Succeeded)")
	if got := e.run("ok-1").Spec.Retries; got != 0 {
		t.Errorf("a refused retry set spec.retries to %d", got)
	}

	e.createRun("failed-1", "demo.fail.v1")
	e.setStatus("failed-1", func(s *workflowv1alpha1.WorkflowRunStatus) {
		s.Phase, s.LastError = workflowv1alpha1.PhaseFailed, "planned failure 3 of 5"
	})
	r = e.plugin("retry", "failed-1", "-n", e.ns)
	wantCode(t, r, 0)
	if r.stdout != "workflowrun.workflow.simpleworkflow.dev/failed-1 retry requested (spec.retries 1)\n" {
		t.Errorf("retry: %s", r)
	}
	// Not yet carried out (status.retries 0): asked for once only.
	r = e.plugin("retry", "failed-1", "-n", e.ns)
	wantCode(t, r, 0)
	if r.stdout != "workflowrun.workflow.simpleworkflow.dev/failed-1 retry already requested (spec.retries 1, not yet carried out)\n" ||
		e.run("failed-1").Spec.Retries != 1 {
		t.Errorf("retry again: %s", r)
	}
	// Carried out, and failed again: a second retry.
	e.setStatus("failed-1", func(s *workflowv1alpha1.WorkflowRunStatus) { s.Retries = 1 })
	r = e.plugin("retry", "failed-1", "-n", e.ns)
	wantCode(t, r, 0)
	if got := e.run("failed-1").Spec.Retries; got != 2 {
		t.Errorf("second retry: spec.retries %d, %s", got, r)
	}

	// A run cancelled by another cause may be retried; one cancelled
	// through spec.cancel may not.
	e.createRun("cancelled-1", "demo.sleep.v1")
	e.setStatus("cancelled-1", func(s *workflowv1alpha1.WorkflowRunStatus) { s.Phase = workflowv1alpha1.PhaseCancelled })
	wantCode(t, e.plugin("retry", "cancelled-1", "-n", e.ns), 0)
	e.createRun("cancelled-2", "demo.sleep.v1")
	wantCode(t, e.plugin("cancel", "cancelled-2", "-n", e.ns), 0)
	e.setStatus("cancelled-2", func(s *workflowv1alpha1.WorkflowRunStatus) { s.Phase = workflowv1alpha1.PhaseCancelled })
	r = e.plugin("retry", "cancelled-2", "-n", e.ns)
	wantCode(t, r, 1)
	wantIn(t, "stderr of retry of a run cancelled through spec.cancel", r.stderr,
		"cannot be retried: it was cancelled through spec.cancel; create a new WorkflowRun")
}
