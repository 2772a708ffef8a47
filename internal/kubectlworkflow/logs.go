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
	return writeLines(streams.Out, dropped, log.Omitted, log.Lines)
}

// writeLines prints the lines of one attempt, what the handler wrote made
// harmless to a terminal (escapeTerminal).
func writeLines(w io.Writer, dropped int64, omitted int, lines []logsv1alpha1.Line) error {
	var b strings.Builder
	if dropped > 0 {
		fmt.Fprintf(&b, "[%d earlier lines dropped]\n", dropped)
	}
	if omitted > 0 {
		fmt.Fprintf(&b, "[%d earlier lines kept, not shown: raise --tail]\n", omitted)
	}
	indent := strings.NewReplacer("\r\n", "\n    ", "\n", "\n    ", "\r", "\n    ")
	for _, l := range lines {
		fmt.Fprintf(&b, "%s %-5s %s\n", l.Time.UTC().Format(time.RFC3339Nano), escapeTerminal(strings.ToUpper(l.Level)),
			escapeTerminal(indent.Replace(l.Message)))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// escapeTerminal shows the characters a terminal would act on (escape
// sequences, backspace, bidirectional overrides: a log line could erase
// or forge the lines above it) as \x1b-style text; tabs and line breaks
// stay. -o json and -o yaml carry the text as it is.
func escapeTerminal(s string) string {
	if !strings.ContainsFunc(s, terminalControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !terminalControl(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			fmt.Fprintf(&b, "\\u%04x", r)
		}
	}
	return b.String()
}

// terminalControl reports a character a terminal acts on: C0 controls but
// tab and line feed, DEL, C1 controls, and the bidirectional formatting
// characters.
func terminalControl(r rune) bool {
	switch {
	case r == '\t' || r == '\n':
		return false
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}
