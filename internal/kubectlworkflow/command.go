package kubectlworkflow

import (
	"context"
	"io"

	"github.com/spf13/cobra"
)

// IOStreams are where a command writes: Out takes the output, ErrOut the
// errors and notices (such as "No resources found").
type IOStreams struct {
	Out    io.Writer
	ErrOut io.Writer
}

// Main runs the plugin with args (without the program name) and returns the
// process's exit code: 0 on success, 1 on an error or a refusal, and what
// `watch` documents for a run that ended badly or a timeout.
func Main(ctx context.Context, args []string, streams IOStreams) int {
	root := NewCommand(streams)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	if ctx.Err() != nil {
		// Interrupted (Ctrl-C, SIGTERM): no error of the command's own, the
		// shells' exit status for a process a signal ended.
		return ExitInterrupted
	}
	return reportError(streams.ErrOut, cmd, err)
}

// ExitInterrupted is the exit status of a command interrupted by Ctrl-C
// or SIGTERM (128 + SIGINT's number, as a shell reports it), apart from
// watch's 1 for a run that failed.
const ExitInterrupted = 130

// NewCommand returns the root command, `kubectl workflow`, with its
// subcommands.
func NewCommand(streams IOStreams) *cobra.Command {
	cfg := newConfigFlags()
	root := &cobra.Command{
		Use: "kubectl-workflow",
		// kubectl runs kubectl-workflow for `kubectl workflow`; usage lines
		// and hints read as the user typed them.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl workflow"},
		Short:       "List, show, signal, approve, cancel, retry, watch WorkflowRuns and print their logs",
		Long: `kubectl workflow works with simple-workflow's WorkflowRuns through the API
server, with your kubeconfig: it needs get, list, watch and patch on
workflowruns.workflow.simpleworkflow.dev in the namespace, and get on
workflowrunlogs.logs.simpleworkflow.dev for logs, nothing else.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// A bare `kubectl workflow` prints the help, as kubectl does.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cfg.addFlags(root.PersistentFlags())
	root.AddCommand(
		newListCommand(cfg, streams),
		newGetCommand(cfg, streams),
		newSignalCommand(cfg, streams),
		newApproveCommand(cfg, streams),
		newCancelCommand(cfg, streams),
		newRetryCommand(cfg, streams),
		newWatchCommand(cfg, streams),
		newLogsCommand(cfg, streams),
	)
	return root
}
