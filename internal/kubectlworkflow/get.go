package kubectlworkflow

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// getOptions are the flags of `get`.
type getOptions struct {
	output string
}

func newGetCommand(cfg *configFlags, streams IOStreams) *cobra.Command {
	o := &getOptions{}
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a WorkflowRun; a DAG run's steps as a tree",
		Long: `Show a WorkflowRun: its phase, attempts, what it waits for, its error and
result, its signals and conditions. A DAG run shows its steps as a tree with
each step's phase; the dependencies come from the WorkflowRegistry declaring
the type, when it can be read (else the steps are listed under the run).
-o json|yaml prints the object as the API server returns it, -o wide its
row of list -o wide.`,
		Example: `  kubectl workflow get order-7
  kubectl workflow get order-7 -n shop -o yaml`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output, outputJSON, outputYAML, outputName, outputWide); err != nil {
				return err
			}
			rs, err := cfg.runsOfNamespace()
			if err != nil {
				return err
			}
			u, run, err := rs.get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			switch o.output {
			case outputJSON, outputYAML:
				return printObject(streams.Out, o.output, u.Object)
			case outputName:
				_, err := fmt.Fprintln(streams.Out, qualifiedName(run.Name))
				return err
			case outputWide:
				// One row of list -o wide, as kubectl get NAME -o wide.
				return writeRunTable(streams.Out, []*workflowv1alpha1.WorkflowRun{run}, false, true, time.Now())
			}
			var d describer
			if len(run.Status.DAGSteps) > 0 {
				d.defs, d.noDefs = stepDefinitions(cmd.Context(), rs.dc, run)
			}
			return d.write(streams.Out, run)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json, yaml, wide (a table row) or name.")
	return cmd
}
