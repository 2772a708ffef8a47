package kubectlworkflow

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// maxRetries is the most spec.retries may count (the CRD's maximum).
const maxRetries = 1000

func newRetryCommand(cfg *configFlags, streams IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "retry NAME",
		Short: "Retry a failed or cancelled WorkflowRun from where it stopped",
		Long: `Retry a Failed or Cancelled WorkflowRun from where it stopped by raising
spec.retries by one: a durable run keeps its journal, a DAG keeps the steps
that succeeded, and the run gets fresh attempts. As the API server does, it
refuses (exit code 1) a run in any other phase and a run cancelled through
spec.cancel (create a new WorkflowRun instead). A retry asked for and not
yet carried out by the operator is not asked for twice (exit code 0).`,
		Example: `  kubectl workflow retry order-7
  kubectl workflow retry order-7 && kubectl workflow watch order-7`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			rs, err := cfg.runsOfNamespace()
			if err != nil {
				return err
			}
			var asked int32
			patched, err := rs.patch(cmd.Context(), args[0], func(_ *unstructured.Unstructured, run *workflowv1alpha1.WorkflowRun) ([]patchOp, error) {
				if err := retryRefusal(run); err != nil {
					return nil, err
				}
				if run.Spec.Retries > run.Status.Retries {
					asked = run.Spec.Retries
					return nil, nil
				}
				asked = run.Spec.Retries + 1
				return []patchOp{{Op: "add", Path: "/spec/retries", Value: asked}}, nil
			})
			if err != nil {
				return err
			}
			msg := fmt.Sprintf("retry requested (spec.retries %d)", asked)
			if !patched {
				msg = fmt.Sprintf("retry already requested (spec.retries %d, not yet carried out)", asked)
			}
			_, err = fmt.Fprintf(streams.Out, "%s %s\n", qualifiedName(args[0]), msg)
			return err
		},
	}
}

// retryRefusal says why run cannot be retried, with the rules the API
// server applies to spec.retries, or returns nil.
func retryRefusal(run *workflowv1alpha1.WorkflowRun) error {
	id := run.Namespace + "/" + run.Name
	switch {
	case run.Spec.Cancel:
		return fmt.Errorf("workflowrun %s cannot be retried: it was cancelled through spec.cancel; create a new WorkflowRun", id)
	case run.Status.Phase != workflowv1alpha1.PhaseFailed && run.Status.Phase != workflowv1alpha1.PhaseCancelled:
		return fmt.Errorf("workflowrun %s cannot be retried: only a Failed or Cancelled run can be (%s)", id, state(run))
	case run.Spec.Retries >= maxRetries:
		return fmt.Errorf("workflowrun %s cannot be retried: spec.retries is at its maximum, %d", id, maxRetries)
	}
	return nil
}
