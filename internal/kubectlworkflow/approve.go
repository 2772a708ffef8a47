package kubectlworkflow

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

func newApproveCommand(cfg *configFlags, streams IOStreams) *cobra.Command {
	o := &signalOptions{}
	cmd := &cobra.Command{
		Use:   "approve NAME",
		Short: "Send a waiting WorkflowRun the signal it waits for",
		Long: `Send the signal a WorkflowRun waits for (status.waitingFor.signal), with
--payload if given. It refuses, with exit code 1, a run that waits for no
signal, and sends nothing twice: when that signal is already in spec.signals
and not yet delivered, it says so and exits 0.`,
		Example: `  kubectl workflow approve order-7
  kubectl workflow approve order-7 --payload '{"by":"alice","ticket":"OPS-12"}'`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			payload, err := o.payloadJSON()
			if err != nil {
				return err
			}
			rs, err := cfg.runsOfNamespace()
			if err != nil {
				return err
			}
			var awaited string
			err = sendSignal(cmd.Context(), rs, args[0], "", payload, func(run *workflowv1alpha1.WorkflowRun) (string, error) {
				wf := run.Status.WaitingFor
				if run.Status.Phase != workflowv1alpha1.PhaseWaiting || wf == nil || wf.Kind != "signal" || wf.Signal == "" {
					return "", fmt.Errorf("workflowrun %s/%s waits for no signal (%s): nothing to approve",
						run.Namespace, run.Name, state(run))
				}
				awaited = wf.Signal
				if i := pendingSignal(run, wf.Signal); i >= 0 {
					return "", &alreadySentError{signal: wf.Signal, index: i}
				}
				return wf.Signal, nil
			})
			var sent *alreadySentError
			switch {
			case errors.As(err, &sent):
				_, err = fmt.Fprintf(streams.Out, "%s already approved: %v\n", qualifiedName(args[0]), sent)
				return err
			case err != nil:
				return err
			}
			_, err = fmt.Fprintf(streams.Out, "%s approved (signal %s sent)\n", qualifiedName(args[0]), awaited)
			return err
		},
	}
	o.addFlags(cmd)
	return cmd
}

// alreadySentError stops approve without a write: the awaited signal is
// already in spec.signals, not yet handled by the operator.
type alreadySentError struct {
	signal string
	index  int
}

func (e *alreadySentError) Error() string {
	return fmt.Sprintf("signal %q is spec.signals[%d], not yet delivered", e.signal, e.index)
}

// pendingSignal returns the index of an entry of spec.signals named name
// that the operator has not handled yet (past status.signalsSent), or -1.
func pendingSignal(run *workflowv1alpha1.WorkflowRun, name string) int {
	for i := int(run.Status.SignalsSent); i < len(run.Spec.Signals); i++ {
		if i >= 0 && run.Spec.Signals[i].Name == name {
			return i
		}
	}
	return -1
}

// state says where a run is, for messages: its phase, and what it waits
// for when it is Waiting.
func state(run *workflowv1alpha1.WorkflowRun) string {
	phase := string(run.Status.Phase)
	if phase == "" {
		phase = "not set yet"
	}
	s := "phase " + phase
	if wf := run.Status.WaitingFor; wf != nil {
		s += ", waiting for " + waitingShort(wf)
	}
	return s
}
