package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// idempotencyKey scopes the run's key to the object's namespace, or uses
// the object's UID.
func idempotencyKey(wfr *workflowv1alpha1.WorkflowRun) string {
	if wfr.Spec.IdempotencyKey != "" {
		return "k8s:" + wfr.Namespace + ":" + wfr.Spec.IdempotencyKey
	}
	return "k8s-uid:" + string(wfr.UID)
}

// mirroredFrom reports whether the controller may act on run for wfr: the
// run was recorded from this very object (same namespace and UID, or same
// name when the row has no UID), or it holds this object's idempotency key
// and may be adopted (two WorkflowRuns of one namespace with one key share a
// run). status.runID is writable by whoever may patch the status, so it is
// never trusted without this check.
func mirroredFrom(run engine.Run, wfr *workflowv1alpha1.WorkflowRun) bool {
	src := run.Source
	if src == nil || src.Namespace != wfr.Namespace {
		return false
	}
	if src.UID != "" && src.UID == string(wfr.UID) {
		return true
	}
	if src.UID == "" && src.Name == wfr.Name {
		return true
	}
	return run.IdempotencyKey == idempotencyKey(wfr) && adoptable(run, wfr)
}

// adoptable reports whether an existing run that holds the object's
// idempotency key may stand for the object: it was mirrored from the same
// namespace, with the same type and payload.
func adoptable(run engine.Run, wfr *workflowv1alpha1.WorkflowRun) bool {
	if run.Source == nil || run.Source.Namespace != wfr.Namespace || run.Type != wfr.Spec.Type {
		return false
	}
	var want []byte
	if wfr.Spec.Payload != nil {
		want = wfr.Spec.Payload.Raw
	}
	return sameJSON(run.Payload, want)
}

// sameJSON compares two JSON documents by value; an empty one is {} (the
// inbox stores an absent payload as {}).
func sameJSON(a, b []byte) bool {
	decode := func(raw []byte) (any, bool) {
		if len(bytes.TrimSpace(raw)) == 0 {
			raw = []byte("{}")
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, false
		}
		return v, true
	}
	va, oka := decode(a)
	vb, okb := decode(b)
	return oka && okb && reflect.DeepEqual(va, vb)
}

// createParams is the run the object asks for.
func createParams(wfr *workflowv1alpha1.WorkflowRun) engine.CreateParams {
	p := engine.CreateParams{
		Type:           wfr.Spec.Type,
		IdempotencyKey: idempotencyKey(wfr),
		ConcurrencyKey: wfr.Spec.ConcurrencyKey,
		Source:         &engine.Source{Namespace: wfr.Namespace, Name: wfr.Name, UID: string(wfr.UID)},
		Namespace:      wfr.Namespace,
		TypeNamespace:  typeNamespace(wfr),
	}
	if wfr.Spec.Payload != nil {
		p.Payload = wfr.Spec.Payload.Raw
	}
	if wfr.Spec.Priority != nil {
		prio := int(*wfr.Spec.Priority)
		p.Priority = &prio
	}
	if wfr.Spec.MaxAttempts != nil {
		p.MaxAttempts = int(*wfr.Spec.MaxAttempts)
	}
	if wfr.Spec.RunAt != nil {
		at := wfr.Spec.RunAt.Time
		p.RunAt = &at
	}
	if wfr.Spec.Deadline != nil {
		p.Deadline = wfr.Spec.Deadline.Duration
	}
	if rp := wfr.Spec.RetryPolicy; rp != nil {
		p.RetryPolicy = &engine.RetryPolicy{}
		if rp.BaseDelay != nil {
			p.RetryPolicy.BaseDelay = rp.BaseDelay.Duration
		}
		if rp.MaxDelay != nil {
			p.RetryPolicy.MaxDelay = rp.MaxDelay.Duration
		}
	}
	return p
}

// mirrorOutcome says how ensureMirrored left the object.
type mirrorOutcome int

const (
	// mirrored: runID is the object's run; carry on.
	mirrored mirrorOutcome = iota
	// leftAlone: there is no run to act on and nothing to retry (the status
	// says why, or the finished run's row is gone); stop without error.
	leftAlone
	// awaitingRegistration: the object's type is declared with steps by a
	// WorkflowRegistry not mirrored yet; nothing was recorded, look again
	// shortly.
	awaitingRegistration
)

// ensureMirrored returns the object's run id, and the run when it read it
// (nil when it just recorded it), recording it in the inbox once; a
// restarted controller finds the existing row through the idempotency key.
// status.runID is used only when it names a run mirrored from this object;
// otherwise the mismatch is reported and the run is found again through the
// idempotency key.
func (r *runPass) ensureMirrored(ctx context.Context, before, wfr *workflowv1alpha1.WorkflowRun) (string, *engine.Run, mirrorOutcome, error) {
	if id := r.recorded.recall(wfr.UID); id != "" && wfr.Status.RunID == "" {
		// Recorded by an earlier look that left the status to this one.
		run, err := r.Inbox.GetRun(ctx, id)
		if err == nil && mirroredFrom(run, wfr) {
			return id, &run, mirrored, nil
		}
		if err != nil && !errors.Is(err, engine.ErrNotFound) {
			return "", nil, mirrored, fmt.Errorf("read run %s: %w", id, err)
		}
		r.recorded.forget(wfr.UID)
	}
	if id := wfr.Status.RunID; id != "" {
		run, err := r.Inbox.GetRun(ctx, id)
		switch {
		case err == nil && mirroredFrom(run, wfr):
			return id, &run, mirrored, nil
		case err == nil:
			r.reportRunIDMismatch(ctx, wfr, id)
		case errors.Is(err, engine.ErrNotFound) && wfr.Status.Phase.Finished():
			// Retention removed the finished run's row: the status keeps
			// what it said; nothing is left to read.
			logf.FromContext(ctx).V(1).Info("The finished run of a WorkflowRun is no longer in the inbox; leaving it as it is",
				"workflowrun", client.ObjectKeyFromObject(wfr), "runID", id)
			return "", nil, leftAlone, nil
		case errors.Is(err, engine.ErrNotFound), errors.Is(err, engine.ErrInvalid):
			// No such run, or not even a run id.
			r.reportRunIDMismatch(ctx, wfr, id)
		default:
			return "", nil, mirrored, fmt.Errorf("read run %s: %w", id, err)
		}
		wfr.Status.RunID = ""
	}
	if wfr.Status.Phase.Finished() {
		// Never record a run again for a finished object: find the one
		// holding its key, if retention left it.
		return r.findByKey(ctx, before, wfr)
	}
	if refused, err := r.refuseUnshared(ctx, before, wfr); refused || err != nil {
		return "", nil, leftAlone, err
	}
	reg, err := r.pendingRegistration(ctx, typeNamespace(wfr), wfr.Spec.Type)
	if err != nil {
		return "", nil, mirrored, err
	}
	if reg != nil {
		return "", nil, awaitingRegistration, r.awaitRegistration(ctx, before, wfr, reg)
	}
	res, err := r.Inbox.CreateRun(ctx, createParams(wfr))
	if errors.Is(err, engine.ErrInvalid) {
		// The database refused the input (a payload string holding \u0000,
		// say): retrying cannot help, the spec must change.
		return "", nil, leftAlone, r.refuse(ctx, before, wfr, workflowv1alpha1.ReasonInvalidInput,
			"the inbox refused the run: "+err.Error()+"; fix the spec (recreate the object) to record it")
	}
	if err != nil {
		return "", nil, mirrored, fmt.Errorf("record run in the inbox: %w", err)
	}
	var known *engine.Run
	if !res.Created {
		run, err := r.Inbox.GetRun(ctx, res.ID)
		if err != nil {
			return "", nil, mirrored, fmt.Errorf("read run holding idempotency key: %w", err)
		}
		if !adoptable(run, wfr) {
			return "", nil, leftAlone, r.refuse(ctx, before, wfr, workflowv1alpha1.ReasonIdempotencyConflict, conflictMessage(wfr))
		}
		known = &run
	}
	wfr.Status.RunID = res.ID
	return res.ID, known, mirrored, nil
}

// findByKey returns the run holding the object's idempotency key without
// recording one.
func (r *runPass) findByKey(ctx context.Context, before, wfr *workflowv1alpha1.WorkflowRun) (string, *engine.Run, mirrorOutcome, error) {
	id, err := r.Inbox.FindRunByIdempotencyKey(ctx, idempotencyKey(wfr))
	if errors.Is(err, engine.ErrNotFound) {
		return "", nil, leftAlone, r.patchStatus(ctx, before, wfr)
	}
	if err != nil {
		return "", nil, mirrored, fmt.Errorf("find run by idempotency key: %w", err)
	}
	run, err := r.Inbox.GetRun(ctx, id)
	if errors.Is(err, engine.ErrNotFound) {
		return "", nil, leftAlone, r.patchStatus(ctx, before, wfr)
	}
	if err != nil {
		return "", nil, mirrored, fmt.Errorf("read run %s: %w", id, err)
	}
	if !adoptable(run, wfr) {
		return "", nil, leftAlone, r.refuse(ctx, before, wfr, workflowv1alpha1.ReasonIdempotencyConflict, conflictMessage(wfr))
	}
	wfr.Status.RunID = id
	return id, &run, mirrored, nil
}

// conflictMessage says the key is taken without saying anything of the run
// that holds it.
func conflictMessage(wfr *workflowv1alpha1.WorkflowRun) string {
	key := "the object's idempotency key"
	if wfr.Spec.IdempotencyKey != "" {
		key = fmt.Sprintf("spec.idempotencyKey %q", wfr.Spec.IdempotencyKey)
	}
	return key + " is already held by a run that was not mirrored from this namespace with the same type and payload; " +
		"no run was recorded for this object (choose another key)"
}

// refuse sets Accepted=False with reason and message, writes the status and
// reports a Warning Event when the condition changed. The object then waits
// for a change of its spec: nothing is retried.
func (r *runPass) refuse(ctx context.Context, before, wfr *workflowv1alpha1.WorkflowRun, reason, msg string) error {
	changed := setCondition(&wfr.Status.Conditions, metav1.Condition{
		Type: workflowv1alpha1.ConditionAccepted, Status: metav1.ConditionFalse, Reason: reason,
		Message: msg, ObservedGeneration: wfr.Generation,
	})
	if err := r.patchStatus(ctx, before, wfr); err != nil {
		return err
	}
	if changed {
		r.Recorder.Eventf(wfr, nil, corev1.EventTypeWarning, reason, "Mirror", "%s", capitalize(truncate(msg, 1024)))
	}
	return nil
}

// reportRunIDMismatch reports a status.runID that is not used.
func (r *runPass) reportRunIDMismatch(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun, id string) {
	logf.FromContext(ctx).Info("status.runID names a run not mirrored from this WorkflowRun; ignoring it",
		"workflowrun", client.ObjectKeyFromObject(wfr), "runID", id)
	r.Recorder.Eventf(wfr, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonRunIDMismatch, "Mirror",
		"status.runID %s does not name a run mirrored from this WorkflowRun; it was not used, the run is found again through the idempotency key",
		truncate(id, 64))
}

// ownRun returns the id of the run a deleted object may cancel: status.runID
// when it names a run mirrored from the object, else the adoptable run
// holding the object's idempotency key, else "".
func (r *runPass) ownRun(ctx context.Context, wfr *workflowv1alpha1.WorkflowRun) (string, error) {
	if id := wfr.Status.RunID; id != "" {
		run, err := r.Inbox.GetRun(ctx, id)
		switch {
		case err == nil && mirroredFrom(run, wfr):
			return id, nil
		case err != nil && !errors.Is(err, engine.ErrNotFound) && !errors.Is(err, engine.ErrInvalid):
			return "", fmt.Errorf("read run %s: %w", id, err)
		}
	}
	id, err := r.Inbox.FindRunByIdempotencyKey(ctx, idempotencyKey(wfr))
	if errors.Is(err, engine.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("find run by idempotency key: %w", err)
	}
	run, err := r.Inbox.GetRun(ctx, id)
	if errors.Is(err, engine.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read run %s: %w", id, err)
	}
	if !adoptable(run, wfr) {
		return "", nil
	}
	return id, nil
}
