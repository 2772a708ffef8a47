package kubectlworkflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// Exit codes of watch besides 0 (Succeeded).
const (
	// ExitRunEndedBadly is watch's exit code for a run that ended Failed or
	// Cancelled (and every command's for an error).
	ExitRunEndedBadly = 1
	// ExitTimeout is watch's exit code when --timeout passed before the run
	// ended.
	ExitTimeout = 2
)

// watchOptions are the flags of `watch`.
type watchOptions struct {
	timeout time.Duration
}

func newWatchCommand(cfg *configFlags, streams IOStreams) *cobra.Command {
	o := &watchOptions{}
	cmd := &cobra.Command{
		Use:   "watch NAME",
		Short: "Follow a WorkflowRun until it ends",
		Long: `Follow a WorkflowRun with a watch on the API server, printing a line each time
its phase (or what it waits for, its attempt, a DAG's progress) changes,
until it ends. Exit codes: 0 when it Succeeded, 1 when it Failed or was
Cancelled (or on an error), 2 when --timeout passed first.`,
		Example: `  kubectl workflow watch order-7
  kubectl workflow watch order-7 --timeout 10m || echo "not succeeded: $?"`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.timeout < 0 {
				return usagef("--timeout must not be negative")
			}
			rs, err := cfg.runsOfNamespace()
			if err != nil {
				return err
			}
			return o.run(cmd.Context(), rs, args[0], streams.Out)
		},
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0,
		"How long to wait for the run to end (such as 30s or 10m); 0 waits for ever.")
	return cmd
}

// run follows the run until it ends, the timeout passes or ctx ends.
func (o *watchOptions) run(ctx context.Context, rs *runs, name string, out io.Writer) error {
	// A run that does not exist is an API error, as kubectl reports it.
	_, first, err := rs.get(ctx, name)
	if err != nil {
		return err
	}
	f := &follower{out: out}
	if f.show(first) {
		return endedError(first)
	}
	wctx, cancel := watchtools.ContextWithOptionalTimeout(ctx, o.timeout)
	defer cancel()
	// A list first, as the watch's own would: a user who may get the run
	// but not list or watch it is told so (the watch below would retry its
	// list for ever).
	lw := rs.listWatchOne(name)
	if _, err := lw.ListWithContextFunc(wctx, metav1.ListOptions{Limit: 1}); err != nil {
		return fmt.Errorf("watch workflowrun %s/%s: %w", rs.ns, name, err)
	}
	var last *workflowv1alpha1.WorkflowRun
	_, err = watchtools.UntilWithSync(wctx, lw, &unstructured.Unstructured{}, func(store cache.Store) (bool, error) {
		if _, exists, err := store.GetByKey(rs.ns + "/" + name); err != nil || !exists {
			return false, fmt.Errorf("workflowrun %s/%s was deleted", rs.ns, name)
		}
		return false, nil
	}, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, fmt.Errorf("workflowrun %s/%s was deleted", rs.ns, name)
		}
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		run, err := toRun(u)
		if err != nil {
			return false, err
		}
		last = run
		return f.show(run), nil
	})
	switch {
	case err == nil:
		return endedError(last)
	case ctx.Err() == nil && wctx.Err() != nil:
		where := first
		if last != nil {
			where = last
		}
		return &ExitError{Code: ExitTimeout, Err: fmt.Errorf("timed out after %s waiting for workflowrun %s/%s to end (%s)",
			o.timeout, rs.ns, name, state(where))}
	case ctx.Err() != nil:
		return fmt.Errorf("watch workflowrun %s/%s: %w", rs.ns, name, context.Cause(ctx))
	default:
		return fmt.Errorf("watch workflowrun %s/%s: %w", rs.ns, name, err)
	}
}

// endedError is nil for a run that Succeeded, and for one that Failed or
// was Cancelled an ExitError saying why.
func endedError(run *workflowv1alpha1.WorkflowRun) error {
	id := run.Namespace + "/" + run.Name
	switch run.Status.Phase {
	case workflowv1alpha1.PhaseSucceeded:
		return nil
	case workflowv1alpha1.PhaseFailed:
		return &ExitError{Code: ExitRunEndedBadly, Err: fmt.Errorf("workflowrun %s ended Failed: %s", id, orNone(run.Status.LastError))}
	case workflowv1alpha1.PhaseCancelled:
		msg := "<none>"
		if c := meta.FindStatusCondition(run.Status.Conditions, workflowv1alpha1.ConditionFinished); c != nil && c.Message != "" {
			msg = c.Message
		}
		return &ExitError{Code: ExitRunEndedBadly, Err: fmt.Errorf("workflowrun %s ended Cancelled: %s", id, msg)}
	}
	return errors.New("watch ended before the run did")
}
