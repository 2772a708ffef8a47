package kubectlworkflow

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// listOptions are the flags of `list`.
type listOptions struct {
	output        string
	allNamespaces bool
	selector      string
}

func newListCommand(cfg *configFlags, streams IOStreams) *cobra.Command {
	o := &listOptions{}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List WorkflowRuns",
		Long: `List the WorkflowRuns of the namespace (-n, else the kubeconfig context's),
or of every namespace with -A: NAME, TYPE, PHASE, ATTEMPT and AGE; -o wide
adds the DAG progress, what a waiting run waits for, the worker and the run id.`,
		Example: `  kubectl workflow list
  kubectl workflow list -A -o wide
  kubectl workflow list -n shop -l team=billing -o name`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.output, outputWide, outputJSON, outputYAML, outputName); err != nil {
				return err
			}
			ns := ""
			if !o.allNamespaces {
				var err error
				if ns, err = cfg.namespace(); err != nil {
					return err
				}
			}
			rs, err := cfg.runsIn(ns)
			if err != nil {
				return err
			}
			l, err := rs.list(cmd.Context(), o.selector)
			if err != nil {
				return err
			}
			return o.print(streams, ns, l, time.Now())
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.output, "output", "o", "", "Output format: wide, json, yaml or name.")
	fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "List the runs of every namespace.")
	fs.StringVarP(&o.selector, "selector", "l", "", "Label selector to filter on, such as key1=value1,key2=value2.")
	return cmd
}

// print writes the list in the chosen format; an empty one is reported on
// stderr as kubectl does.
func (o *listOptions) print(streams IOStreams, ns string, l *unstructured.UnstructuredList, now time.Time) error {
	switch o.output {
	case outputJSON, outputYAML:
		items := make([]map[string]any, 0, len(l.Items))
		for _, it := range l.Items {
			items = append(items, it.Object)
		}
		return printList(streams.Out, o.output, items)
	}
	if len(l.Items) == 0 {
		if ns == "" {
			fmt.Fprintln(streams.ErrOut, "No resources found")
		} else {
			fmt.Fprintf(streams.ErrOut, "No resources found in %s namespace.\n", ns)
		}
		return nil
	}
	runs := make([]*workflowv1alpha1.WorkflowRun, 0, len(l.Items))
	for i := range l.Items {
		run, err := toRun(&l.Items[i])
		if err != nil {
			return err
		}
		runs = append(runs, run)
	}
	if o.output == outputName {
		for _, run := range runs {
			fmt.Fprintln(streams.Out, qualifiedName(run.Name))
		}
		return nil
	}
	return writeRunTable(streams.Out, runs, o.allNamespaces, o.output == outputWide, now)
}

// writeRunTable writes runs as kubectl's table: NAME, TYPE, PHASE, ATTEMPT,
// AGE, then with wide PROGRESS, WAITING-FOR, WORKER and RUN-ID; with
// withNamespace a NAMESPACE column first.
func writeRunTable(w io.Writer, runs []*workflowv1alpha1.WorkflowRun, withNamespace, wide bool, now time.Time) error {
	t := newTable(w)
	if withNamespace {
		fmt.Fprint(t, "NAMESPACE\t")
	}
	fmt.Fprint(t, "NAME\tTYPE\tPHASE\tATTEMPT\tAGE")
	if wide {
		fmt.Fprint(t, "\tPROGRESS\tWAITING-FOR\tWORKER\tRUN-ID")
	}
	fmt.Fprintln(t)
	for _, run := range runs {
		if withNamespace {
			fmt.Fprintf(t, "%s\t", run.Namespace)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s", run.Name, run.Spec.Type, run.Status.Phase,
			run.Status.Attempts, age(run.CreationTimestamp, now))
		if wide {
			fmt.Fprintf(t, "\t%s\t%s\t%s\t%s", orNone(run.Status.Progress), orNone(waitingShort(run.Status.WaitingFor)),
				orNone(run.Status.LeasedBy), orNone(run.Status.RunID))
		}
		fmt.Fprintln(t)
	}
	if err := t.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// waitingShort is what a run waits for in a table cell: the kind, and the
// signal's name for a signal ("signal:approve").
func waitingShort(wf *workflowv1alpha1.WaitingFor) string {
	switch {
	case wf == nil:
		return ""
	case wf.Kind == "signal" && wf.Signal != "":
		return "signal:" + wf.Signal
	default:
		return wf.Kind
	}
}
