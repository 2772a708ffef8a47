package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// signalKeyPrefix starts the idempotency key of a signal sent from
// spec.signals; the rest is the object's UID and the entry's index.
const signalKeyPrefix = "k8s-signal:"

// signalKey is the idempotency key of entry i of spec.signals: sending it
// again (after a restart, or a status write that was lost) is a no-op.
func signalKey(wfr *workflowv1alpha1.WorkflowRun, i int) string {
	return signalKeyPrefix + string(wfr.UID) + ":" + strconv.Itoa(i)
}

// signalIndex returns the spec.signals index a signal key of this object
// names, or -1.
func signalIndex(wfr *workflowv1alpha1.WorkflowRun, key string) int {
	rest, ok := strings.CutPrefix(key, signalKeyPrefix+string(wfr.UID)+":")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 {
		return -1
	}
	return i
}

// signalRejection is an entry of spec.signals that will never be sent,
// reported as an Event once the status saying so is written.
type signalRejection struct {
	index   int
	name    string
	reason  string
	message string
}

// sendSignals sends the entries of spec.signals after status.signalsSent,
// in order, and advances status.signalsSent past each entry handled. An
// entry the inbox refuses for good (the run finished, the signal is invalid)
// counts as handled and is returned to be reported; any other error stops
// the pass, to be retried by the next reconcile with the same keys.
func (r *runPass) sendSignals(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun, runID string) ([]signalRejection, error) {
	signals := wfr.Spec.Signals
	from := int(wfr.Status.SignalsSent)
	if from >= len(signals) {
		return nil, nil
	}
	var rejected []signalRejection
	for i := max(from, 0); i < len(signals); i++ {
		sig := signals[i]
		p := engine.SignalParams{RunID: runID, Name: sig.Name, IdempotencyKey: signalKey(wfr, i)}
		if sig.Payload != nil && len(sig.Payload.Raw) > 0 {
			p.Payload = sig.Payload.Raw
		}
		_, err := r.Inbox.SendSignal(ctx, p)
		switch {
		case err == nil:
		case errors.Is(err, engine.ErrRunFinished):
			// The run may have taken this very signal and finished before
			// the status saying it was sent could be written.
			sent, lerr := r.signalRecorded(ctx, runID, p.IdempotencyKey)
			if lerr != nil {
				return nil, lerr
			}
			if !sent {
				rejected = append(rejected, signalRejection{index: i, name: sig.Name, reason: workflowv1alpha1.ReasonRunFinished,
					message: fmt.Sprintf("spec.signals[%d] (%s) was not sent: the run had already finished", i, sig.Name)})
			}
		case errors.Is(err, engine.ErrInvalid), errors.Is(err, engine.ErrNotFound):
			rejected = append(rejected, signalRejection{index: i, name: sig.Name, reason: workflowv1alpha1.ReasonInvalid,
				message: fmt.Sprintf("spec.signals[%d] (%s) was not sent: %s", i, sig.Name, truncate(err.Error(), 512))})
		default:
			return nil, fmt.Errorf("send spec.signals[%d] (%s) to run %s: %w", i, sig.Name, runID, err)
		}
		wfr.Status.SignalsSent = int32(i + 1)
	}

	gen := wfr.Generation
	if len(rejected) > 0 {
		last := rejected[len(rejected)-1]
		setCondition(&wfr.Status.Conditions, metav1.Condition{
			Type: workflowv1alpha1.ConditionSignalsSent, Status: metav1.ConditionFalse, Reason: last.reason,
			Message: last.message, ObservedGeneration: gen,
		})
	} else if c := meta.FindStatusCondition(wfr.Status.Conditions, workflowv1alpha1.ConditionSignalsSent); c == nil || c.Status == metav1.ConditionTrue {
		setCondition(&wfr.Status.Conditions, metav1.Condition{
			Type: workflowv1alpha1.ConditionSignalsSent, Status: metav1.ConditionTrue, Reason: workflowv1alpha1.ReasonSent,
			Message: fmt.Sprintf("all %d entries of spec.signals were sent to the run", len(signals)), ObservedGeneration: gen,
		})
	}
	return rejected, nil
}

// signalRecorded reports whether the run holds a signal with this key.
func (r *runPass) signalRecorded(ctx context.Context, runID, key string) (bool, error) {
	sigs, err := r.Inbox.ListSignals(ctx, runID)
	if err != nil {
		return false, fmt.Errorf("read signals of run %s: %w", runID, err)
	}
	for _, s := range sigs {
		if s.IdempotencyKey == key {
			return true, nil
		}
	}
	return false, nil
}

// emitSignalRejections reports the entries of spec.signals that were not sent.
func (r *runPass) emitSignalRejections(wfr *workflowv1alpha1.WorkflowRun, rejected []signalRejection) {
	for _, s := range rejected {
		r.Recorder.Eventf(wfr, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonSignalRejected, "Signal", "%s", capitalize(s.message))
	}
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
