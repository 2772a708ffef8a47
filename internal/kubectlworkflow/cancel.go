package kubectlworkflow

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

func newCancelCommand(cfg *configFlags, streams IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel NAME",
		Short: "Cancel a WorkflowRun",
		Long: `Cancel a WorkflowRun by setting spec.cancel: the operator cancels the run in
the inbox and its worker stops it (watch it end with kubectl workflow watch).
A run that already finished is refused (exit code 1); a run whose cancel is
already asked for is left as it is (exit code 0). A run cancelled this way
cannot be retried: create a new WorkflowRun.`,
		Example: `  kubectl workflow cancel order-7
  kubectl workflow cancel order-7 -n shop && kubectl workflow watch order-7 -n shop`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			rs, err := cfg.runsOfNamespace()
			if err != nil {
				return err
			}
			patched, err := rs.patch(cmd.Context(), args[0], func(_ *unstructured.Unstructured, run *workflowv1alpha1.WorkflowRun) ([]patchOp, error) {
				switch {
				case run.Spec.Cancel:
					return nil, nil
				case run.Status.Phase.Finished():
					return nil, fmt.Errorf("workflowrun %s/%s already finished (phase %s): nothing to cancel",
						run.Namespace, run.Name, run.Status.Phase)
				}
				return []patchOp{{Op: "add", Path: "/spec/cancel", Value: true}}, nil
			})
			if err != nil {
				return err
			}
			msg := "cancel requested"
			if !patched {
				msg = "cancel already requested"
			}
			_, err = fmt.Fprintf(streams.Out, "%s %s\n", qualifiedName(args[0]), msg)
			return err
		},
	}
}
