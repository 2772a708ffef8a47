package kubectlworkflow

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// maxSignals is the most entries spec.signals may hold (the CRD's
// maxItems).
const maxSignals = 100

// validSignalName reports whether s is a signal name as the CRD accepts
// it: 1 to 128 letters, digits and . _ : -
func validSignalName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for _, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._:-", c)
		if !ok {
			return false
		}
	}
	return true
}

// signalOptions are the flags of `signal` and `approve`.
type signalOptions struct {
	payload string
}

func (o *signalOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.payload, "payload", "",
		`The signal's payload, any JSON value, handed to the wait that takes it (e.g. '{"by":"ops"}').`)
}

// payloadJSON checks --payload and returns it, nil when it is unset or
// null.
func (o *signalOptions) payloadJSON() (json.RawMessage, error) {
	if o.payload == "" {
		return nil, nil
	}
	if !json.Valid([]byte(o.payload)) {
		var v any
		err := json.Unmarshal([]byte(o.payload), &v)
		return nil, usagef("--payload is not valid JSON: %v", err)
	}
	if strings.TrimSpace(o.payload) == "null" {
		return nil, nil
	}
	// The inbox's own limits on a signal's payload (send_signal): one it
	// refuses would only show up as a SignalRejected Event on the run.
	if len(o.payload) > maxPayloadBytes {
		return nil, usagef("--payload is %d bytes; the limit is %d (256 KiB)", len(o.payload), maxPayloadBytes)
	}
	if d := jsonDepth(o.payload); d > maxPayloadDepth {
		return nil, usagef("--payload nests %d levels deep (objects and arrays); the most a stored value may is %d", d, maxPayloadDepth)
	}
	if strings.Contains(o.payload, `\u0000`) {
		return nil, usagef(`--payload holds \u0000, which the inbox cannot store`)
	}
	return json.RawMessage(o.payload), nil
}

// Limits of a signal's payload, as the inbox's send_signal checks them.
const (
	maxPayloadBytes = 256 << 10
	maxPayloadDepth = 64
)

// jsonDepth returns how deeply valid JSON text nests objects and arrays.
func jsonDepth(text string) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

func newSignalCommand(cfg *configFlags, streams IOStreams) *cobra.Command {
	o := &signalOptions{}
	cmd := &cobra.Command{
		Use:   "signal NAME SIGNAL",
		Short: "Send a signal to a WorkflowRun",
		Long: `Send a signal to a WorkflowRun by appending it to spec.signals. The run takes
it when it waits for a signal of that name, at once or later: a signal is
buffered until then. --payload, any JSON value, is checked before anything
is sent.`,
		Example: `  kubectl workflow signal order-7 approve --payload '{"by":"ops"}'
  kubectl workflow signal import-3 pause -n data`,
		Args: exactArgs("NAME", "SIGNAL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !validSignalName(args[1]) {
				return usagef("signal name %q: must be 1 to 128 characters of letters, digits and . _ : -", args[1])
			}
			payload, err := o.payloadJSON()
			if err != nil {
				return err
			}
			rs, err := cfg.runsOfNamespace()
			if err != nil {
				return err
			}
			if err := sendSignal(cmd.Context(), rs, args[0], args[1], payload, nil); err != nil {
				return err
			}
			_, err = fmt.Fprintf(streams.Out, "%s signalled (%s)\n", qualifiedName(args[0]), args[1])
			return err
		},
	}
	o.addFlags(cmd)
	return cmd
}

// sendSignal appends a signal to the run's spec.signals, guarded by the
// resourceVersion read. check, when not nil, decides on the run as read
// (and read again after a conflict) whether the signal may go, and which:
// it returns the name to send.
func sendSignal(ctx context.Context, rs *runs, name, signal string, payload json.RawMessage,
	check func(*workflowv1alpha1.WorkflowRun) (string, error),
) error {
	_, err := rs.patch(ctx, name, func(u *unstructured.Unstructured, run *workflowv1alpha1.WorkflowRun) ([]patchOp, error) {
		sig := signal
		if check != nil {
			var err error
			if sig, err = check(run); err != nil {
				return nil, err
			}
		}
		if ended(run) {
			return nil, fmt.Errorf("workflowrun %s/%s has ended (%s): a signal would never be taken", run.Namespace, run.Name,
				run.Status.Phase)
		}
		if len(run.Spec.Signals) >= maxSignals {
			return nil, fmt.Errorf("workflowrun %s/%s: spec.signals already holds %d entries, the most it may: create a new WorkflowRun",
				run.Namespace, run.Name, maxSignals)
		}
		entry := map[string]any{"name": sig}
		if payload != nil {
			entry["payload"] = payload
		}
		if _, found, _ := unstructured.NestedSlice(u.Object, "spec", "signals"); !found {
			return []patchOp{{Op: "add", Path: "/spec/signals", Value: []any{entry}}}, nil
		}
		return []patchOp{{Op: "add", Path: "/spec/signals/-", Value: entry}}, nil
	})
	return err
}
