package kubectlworkflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	logsv1alpha1 "github.com/simple-workflow/simple-workflow/internal/logapi/v1alpha1"
)

// logsOptions are the flags of `logs`.
type logsOptions struct {
	attempt int
	tail    int
	output  string
}

// errLogAPINotServed: the API server does not serve logs.simpleworkflow.dev.
var errLogAPINotServed = errors.New("the log API (" + logsv1alpha1.GroupVersion.String() +
	") is not served by this cluster: the chart's logAPI is off (install or upgrade it with --set logAPI.enabled=true; see docs/operations.md#log-api)")

func newLogsCommand(cfg *configFlags, streams IOStreams) *cobra.Command {
	o := &logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print what a WorkflowRun's handlers logged",
		Long: `Print the lines a WorkflowRun's handlers logged through the SDK (Task.Logger),
one attempt at a time: the latest attempt that logged, or --attempt N; its
newest --tail lines. Each line is TIME LEVEL MESSAGE; a first line
"[N earlier lines dropped]" says that the attempt logged more than was kept.

The lines come through the API server from the log API that the manager
serves (the chart's logAPI.enabled): it needs get on
workflowrunlogs.logs.simpleworkflow.dev in the namespace (the chart's -view
and -edit roles grant it).`,
		Example: `  kubectl workflow logs order-7
  kubectl workflow logs order-7 --attempt 1 --tail 50
  kubectl workflow logs order-7 -n shop -o json`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output, outputJSON, outputYAML); err != nil {
				return err
			}
			if o.attempt < 0 {
				return usagef("--attempt must be 1 or more (0, the default, is the latest attempt that logged)")
			}
			if o.tail < 1 || o.tail > logsv1alpha1.MaxTail {
				return usagef("--tail must be from 1 to %d", logsv1alpha1.MaxTail)
			}
			ns, err := cfg.namespace()
			if err != nil {
				return err
			}
			rc, err := cfg.logsClient()
			if err != nil {
				return err
			}
			raw, err := o.read(cmd.Context(), rc, ns, args[0])
			if err != nil {
				return err
			}
			if o.output != outputHuman {
				var obj map[string]any
				if err := json.Unmarshal(raw, &obj); err != nil {
					return fmt.Errorf("decode the log of workflowrun %s/%s: %w", ns, args[0], err)
				}
				return printObject(streams.Out, o.output, obj)
			}
			var log logsv1alpha1.WorkflowRunLog
			if err := json.Unmarshal(raw, &log); err != nil {
				return fmt.Errorf("decode the log of workflowrun %s/%s: %w", ns, args[0], err)
			}
			return writeLog(streams, &log)
		},
	}
	cmd.Flags().IntVar(&o.attempt, "attempt", 0, "The attempt whose lines to print (from 1); the latest that logged when 0.")
	cmd.Flags().IntVar(&o.tail, "tail", logsv1alpha1.DefaultTail,
		fmt.Sprintf("How many of the attempt's newest lines to print (1 to %d).", logsv1alpha1.MaxTail))
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml (the WorkflowRunLog object).")
	return cmd
}

// logsClient is a REST client of logs.simpleworkflow.dev/v1alpha1 through
// the API server.
func (c *configFlags) logsClient() (rest.Interface, error) {
	cfg, err := c.restConfig()
	if err != nil {
		return nil, err
	}
	gv := logsv1alpha1.GroupVersion
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	return rc, nil
}

// read gets the WorkflowRunLog of run name in ns as the API returns it.
func (o *logsOptions) read(ctx context.Context, rc rest.Interface, ns, name string) ([]byte, error) {
	req := rc.Get().Namespace(ns).Resource(logsv1alpha1.Resource).Name(name).
		Param(logsv1alpha1.ParamTail, strconv.Itoa(o.tail))
	if o.attempt > 0 {
		req = req.Param(logsv1alpha1.ParamAttempt, strconv.Itoa(o.attempt))
	}
	res := req.Do(ctx)
	raw, err := res.Raw()
	if err == nil {
		return raw, nil
	}
	// Error decodes the Status the server answered, with its message.
	err = res.Error()
	// A 404 is the log API's (no such run) or the API server's (no such
	// API): its discovery document tells which.
	if apierrors.IsNotFound(err) {
		_, derr := rc.Get().AbsPath("/apis", logsv1alpha1.Group, logsv1alpha1.Version).Do(ctx).Raw()
		if apierrors.IsNotFound(derr) {
			return nil, errLogAPINotServed
		}
	}
	return nil, fmt.Errorf("read the log of workflowrun %s/%s: %w", ns, name, err)
}

// writeLog prints the lines as TIME LEVEL MESSAGE (a message's own line
// breaks indented), after "[N earlier lines dropped]" when the attempt
// dropped some; which attempt it is goes to stderr when several logged.
func writeLog(streams IOStreams, log *logsv1alpha1.WorkflowRunLog) error {
	where := log.Metadata.Namespace + "/" + log.Metadata.Name
	if log.Attempt == 0 {
		_, err := fmt.Fprintf(streams.ErrOut, "No log lines: the handlers of workflowrun %s have logged nothing yet.\n", where)
		return err
	}
	var dropped int64
	var logged []string
	for _, a := range log.Attempts {
		logged = append(logged, strconv.Itoa(a.Attempt))
		if a.Attempt == log.Attempt {
			dropped = a.Dropped
		}
	}
	if len(log.Attempts) > 1 {
		fmt.Fprintf(streams.ErrOut, "Attempt %d of workflowrun %s (attempts that logged: %s; pick one with --attempt).\n",
			log.Attempt, where, strings.Join(logged, ", "))
	}
	return writeLines(streams.Out, dropped, log.Lines)
}

// writeLines prints the lines of one attempt.
func writeLines(w io.Writer, dropped int64, lines []logsv1alpha1.Line) error {
	var b strings.Builder
	if dropped > 0 {
		fmt.Fprintf(&b, "[%d earlier lines dropped]\n", dropped)
	}
	indent := strings.NewReplacer("\r\n", "\n    ", "\n", "\n    ", "\r", "\n    ")
	for _, l := range lines {
		fmt.Fprintf(&b, "%s %-5s %s\n", l.Time.UTC().Format(time.RFC3339Nano), strings.ToUpper(l.Level), indent.Replace(l.Message))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}
