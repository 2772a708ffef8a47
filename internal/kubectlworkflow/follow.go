package kubectlworkflow

import (
	"fmt"
	"io"
	"strings"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// follower prints a line for each state of a run that differs from the
// last it printed.
type follower struct {
	out  io.Writer
	last string
}

// show prints run's state if it changed, and reports whether the run
// ended.
func (f *follower) show(run *workflowv1alpha1.WorkflowRun) bool {
	// The phase padded to the longest, Succeeded or Cancelled, so the
	// lines' details align.
	line := strings.TrimRight(fmt.Sprintf("%s   %-9s   %s", run.Name, orNone(string(run.Status.Phase)), progress(run)), " ")
	if line != f.last {
		f.last = line
		fmt.Fprintln(f.out, line)
	}
	return ended(run)
}

// ended reports whether the run has ended for good: finished, and no
// retry asked for (spec.retries above status.retries) that the operator
// has not carried out yet; a watch after `retry` follows the new attempt
// instead of reporting the failure it retries.
func ended(run *workflowv1alpha1.WorkflowRun) bool {
	return run.Status.Phase.Finished() && run.Spec.Retries <= run.Status.Retries
}

// progress is what a watch line says beside a phase: the attempt, what a
// waiting run waits for, a DAG's progress, the error of a retry or failure.
func progress(run *workflowv1alpha1.WorkflowRun) string {
	st := run.Status
	dag := len(st.DAGSteps) > 0
	switch st.Phase {
	case workflowv1alpha1.PhaseRunning:
		if dag {
			return "steps succeeded " + st.Progress
		}
		if st.Attempts != "" {
			return "attempt " + st.Attempts
		}
	case workflowv1alpha1.PhaseWaiting:
		if wf := st.WaitingFor; wf != nil {
			s := "for " + waitingShort(wf)
			if wf.Step != "" {
				s += " at step " + wf.Step
			}
			return s
		}
	case workflowv1alpha1.PhaseRetrying:
		s := "attempt " + st.Attempts + " failed"
		if st.NextAttemptAt != nil {
			s += ", next at " + st.NextAttemptAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		return s + ": " + clip(st.LastError, 120)
	case workflowv1alpha1.PhaseSucceeded:
		if dag {
			return "steps succeeded " + st.Progress
		}
	case workflowv1alpha1.PhaseFailed:
		return clip(st.LastError, 120)
	}
	return ""
}
