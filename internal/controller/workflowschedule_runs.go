package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// AnnotationScheduledAt is the tick (RFC 3339, UTC) a WorkflowRun made by a
// WorkflowSchedule was recorded for.
const AnnotationScheduledAt = "workflow.simpleworkflow.dev/scheduled-at"

// scheduleCatchUpRuns is how many of a schedule's latest runs each look
// checks for a missing WorkflowRun.
const scheduleCatchUpRuns = 50

// FiringHandler is told of the ticks a maintenance loop fired.
type FiringHandler interface {
	Fired(ctx context.Context, from ScheduleInbox, firings []engine.ScheduleFiring)
}

var _ FiringHandler = (*WorkflowScheduleReconciler)(nil)

// Fired makes the WorkflowRun of each tick of a mirrored schedule that
// recorded a run (fired, replaced), and wakes the schedule's reconcile to
// update its status. A WorkflowRun it cannot make now is made by a later
// look at the schedule, which finds the run in the inbox.
func (r *WorkflowScheduleReconciler) Fired(ctx context.Context, from ScheduleInbox, firings []engine.ScheduleFiring) {
	log := logf.FromContext(ctx).WithName("workflowschedule")
	p := &schedulePass{WorkflowScheduleReconciler: r, Inbox: from}
	for _, f := range firings {
		if f.RunID == "" || (f.Outcome != engine.FiringFired && f.Outcome != engine.FiringReplaced) {
			continue
		}
		run, err := p.Inbox.GetRun(ctx, f.RunID)
		if err != nil {
			if ctx.Err() == nil {
				log.Error(err, "Reading a fired run failed; the schedule's next look makes its WorkflowRun", "runID", f.RunID)
			}
			continue
		}
		ns, name, tick, ok := parseScheduleKey(run.IdempotencyKey)
		if !ok {
			continue // a schedule made with SQL
		}
		var ws workflowv1alpha1.WorkflowSchedule
		if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ws); err != nil {
			if !apierrors.IsNotFound(err) && ctx.Err() == nil {
				log.Error(err, "Reading the WorkflowSchedule of a fired run failed", "workflowschedule", ns+"/"+name)
			}
			continue
		}
		if err := p.makeRun(ctx, &ws, run, tick); err != nil && ctx.Err() == nil {
			log.Error(err, "Making the WorkflowRun of a fired run failed; the schedule's next look retries",
				"workflowschedule", ns+"/"+name, "runID", run.ID)
		}
		r.wake(&ws)
	}
}

// wake asks for a look at ws soon; a full queue drops it (the resync looks
// anyway).
func (r *WorkflowScheduleReconciler) wake(ws *workflowv1alpha1.WorkflowSchedule) {
	if r.fired == nil {
		return
	}
	obj := &workflowv1alpha1.WorkflowSchedule{ObjectMeta: metav1.ObjectMeta{Namespace: ws.Namespace, Name: ws.Name}}
	select {
	case r.fired <- event.GenericEvent{Object: obj}:
	default:
	}
}

// parseScheduleKey reads the namespace, schedule name and tick from the
// idempotency key of a run a mirrored schedule recorded,
// k8s:<namespace>:schedule/<name>/<tick in unix seconds>.
func parseScheduleKey(key string) (namespace, name string, tick time.Time, ok bool) {
	rest, ok := strings.CutPrefix(key, "k8s:")
	if !ok {
		return "", "", time.Time{}, false
	}
	namespace, rest, ok = strings.Cut(rest, ":schedule/")
	if !ok || namespace == "" || strings.Contains(namespace, ":") {
		return "", "", time.Time{}, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", "", time.Time{}, false
	}
	unix, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil || unix < 0 || rest[i+1:] != strconv.FormatInt(unix, 10) {
		return "", "", time.Time{}, false
	}
	return namespace, rest[:i], time.Unix(unix, 0).UTC(), true
}

// scheduledRunName is the name of the WorkflowRun of a schedule's tick.
func scheduledRunName(schedule string, tick time.Time) string {
	return schedule + "-" + strconv.FormatInt(tick.Unix(), 10)
}

// scheduledRun is the WorkflowRun of run, the run a tick of ws recorded: its
// spec is the run's (type, payload, priority, attempts, retry policy,
// concurrency key: what it was recorded with, even if the template changed
// since) with the template's deadline, and its idempotency key the tick's,
// so that the WorkflowRun adopts the run.
func scheduledRun(ws *workflowv1alpha1.WorkflowSchedule, run engine.Run, tick time.Time) *workflowv1alpha1.WorkflowRun {
	unix := strconv.FormatInt(tick.Unix(), 10)
	prio, attempts := int32(run.Priority), int32(run.MaxAttempts)
	wfr := &workflowv1alpha1.WorkflowRun{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   ws.Namespace,
			Name:        scheduledRunName(ws.Name, tick),
			Labels:      map[string]string{workflowv1alpha1.LabelSchedule: ws.Name},
			Annotations: map[string]string{AnnotationScheduledAt: tick.UTC().Format(time.RFC3339)},
		},
		Spec: workflowv1alpha1.WorkflowRunSpec{
			Type:           run.Type,
			Priority:       &prio,
			MaxAttempts:    &attempts,
			IdempotencyKey: "schedule/" + ws.Name + "/" + unix,
			ConcurrencyKey: run.ConcurrencyKey,
		},
	}
	if len(run.Payload) > 0 {
		wfr.Spec.Payload = &apiextensionsv1.JSON{Raw: append([]byte(nil), run.Payload...)}
	}
	if d := ws.Spec.RunTemplate.Deadline; d != nil {
		wfr.Spec.Deadline = &metav1.Duration{Duration: d.Duration}
	}
	if rp := run.RetryPolicy; rp != nil {
		wfr.Spec.RetryPolicy = &workflowv1alpha1.RetryPolicy{}
		if rp.BaseDelay > 0 {
			wfr.Spec.RetryPolicy.BaseDelay = &metav1.Duration{Duration: rp.BaseDelay}
		}
		if rp.MaxDelay > 0 {
			wfr.Spec.RetryPolicy.MaxDelay = &metav1.Duration{Duration: rp.MaxDelay}
		}
	}
	return wfr
}

// makeRun creates the WorkflowRun of run, recorded for tick by ws, owned by
// ws. One that exists already is left as it is. A run recorded for another
// object of the schedule's name (deleted and created again) gets none.
func (r *schedulePass) makeRun(ctx context.Context, ws *workflowv1alpha1.WorkflowSchedule, run engine.Run, tick time.Time) error {
	if run.Source == nil || run.Source.Namespace != ws.Namespace || run.Source.UID != string(ws.UID) ||
		!ws.DeletionTimestamp.IsZero() {
		return nil
	}
	wfr := scheduledRun(ws, run, tick)
	if err := controllerutil.SetControllerReference(ws, wfr, r.Scheme()); err != nil {
		return fmt.Errorf("own WorkflowRun %s: %w", wfr.Name, err)
	}
	err := r.Create(ctx, wfr)
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.IsInvalid(err):
		// Admission refused it; trying again cannot help.
		r.Recorder.Eventf(ws, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonInvalidInput, "Schedule",
			"The WorkflowRun %s of run %s was refused: %s", wfr.Name, run.ID, truncate(err.Error(), maxEventNoteBytes/2))
		return nil
	case err != nil:
		return fmt.Errorf("create WorkflowRun %s: %w", wfr.Name, err)
	}
	r.Recorder.Eventf(ws, wfr, corev1.EventTypeNormal, workflowv1alpha1.ReasonScheduled, "Schedule",
		"Made WorkflowRun %s for the tick at %s (run %s)", wfr.Name, tick.UTC().Format(time.RFC3339), run.ID)
	return nil
}

// catchUp makes the WorkflowRuns missing for the schedule's latest runs
// whose tick is after status.lastScheduleTime, and returns the newest tick
// that has a WorkflowRun (status.lastScheduleTime as it is when none is
// newer). A tick at or before status.lastScheduleTime is never made again:
// its WorkflowRun, if gone, was deleted (the history limits, a user).
func (r *schedulePass) catchUp(ctx context.Context, ws *workflowv1alpha1.WorkflowSchedule) (*metav1.Time, error) {
	runs, err := r.Inbox.ScheduleLatestRuns(ctx, ws.Namespace, ws.Name, scheduleCatchUpRuns)
	if err != nil {
		return nil, fmt.Errorf("read the schedule's runs: %w", err)
	}
	var newest *time.Time
	if t := ws.Status.LastScheduleTime; t != nil {
		w := t.UTC()
		newest = &w
	}
	watermark := newest
	for _, sr := range runs {
		ns, name, tick, ok := parseScheduleKey(sr.IdempotencyKey)
		if !ok || ns != ws.Namespace || name != ws.Name || (watermark != nil && !tick.After(*watermark)) {
			continue
		}
		run, err := r.Inbox.GetRun(ctx, sr.ID)
		if errors.Is(err, engine.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read run %s: %w", sr.ID, err)
		}
		if run.Source == nil || run.Source.UID != string(ws.UID) {
			continue
		}
		if err := r.makeRun(ctx, ws, run, tick); err != nil {
			return nil, err
		}
		if newest == nil || tick.After(*newest) {
			t := tick
			newest = &t
		}
	}
	if newest == nil {
		return nil, nil
	}
	t := metav1.NewTime(*newest)
	return &t, nil
}

// ownedRuns lists the WorkflowRuns ws made (labelled with its name and
// controlled by it), oldest tick first.
func (r *schedulePass) ownedRuns(ctx context.Context, ws *workflowv1alpha1.WorkflowSchedule) ([]workflowv1alpha1.WorkflowRun, error) {
	var list workflowv1alpha1.WorkflowRunList
	if err := r.List(ctx, &list, client.InNamespace(ws.Namespace),
		client.MatchingLabels{workflowv1alpha1.LabelSchedule: ws.Name}); err != nil {
		return nil, fmt.Errorf("list the schedule's WorkflowRuns: %w", err)
	}
	var out []workflowv1alpha1.WorkflowRun
	for _, wfr := range list.Items {
		if metav1.IsControlledBy(&wfr, ws) {
			out = append(out, wfr)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return runTick(ws.Name, &out[i]).Before(runTick(ws.Name, &out[j])) })
	return out, nil
}

// runTick is the tick a schedule's WorkflowRun was made for: from its name
// <schedule>-<unix>, else its creation.
func runTick(schedule string, wfr *workflowv1alpha1.WorkflowRun) time.Time {
	if s, ok := strings.CutPrefix(wfr.Name, schedule+"-"); ok {
		if unix, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(unix, 0).UTC()
		}
	}
	return wfr.CreationTimestamp.UTC()
}

// trimHistory deletes the oldest finished WorkflowRuns of ws beyond its
// history limits: successfulRunsHistoryLimit of those that succeeded,
// failedRunsHistoryLimit of those that failed or were cancelled. Only runs
// whose tick status.lastScheduleTime counts are deleted. owned is oldest
// first.
func (r *schedulePass) trimHistory(ctx context.Context, ws *workflowv1alpha1.WorkflowSchedule, owned []workflowv1alpha1.WorkflowRun) error {
	if ws.Status.LastScheduleTime == nil {
		return nil
	}
	watermark := ws.Status.LastScheduleTime.UTC()
	keepSucceeded, keepFailed := 3, 1
	if l := ws.Spec.SuccessfulRunsHistoryLimit; l != nil {
		keepSucceeded = int(*l)
	}
	if l := ws.Spec.FailedRunsHistoryLimit; l != nil {
		keepFailed = int(*l)
	}
	var succeeded, failed []*workflowv1alpha1.WorkflowRun
	for i := range owned {
		wfr := &owned[i]
		if !wfr.DeletionTimestamp.IsZero() || runTick(ws.Name, wfr).After(watermark) {
			continue
		}
		switch wfr.Status.Phase {
		case workflowv1alpha1.PhaseSucceeded:
			succeeded = append(succeeded, wfr)
		case workflowv1alpha1.PhaseFailed, workflowv1alpha1.PhaseCancelled:
			failed = append(failed, wfr)
		}
	}
	for _, c := range []struct {
		runs []*workflowv1alpha1.WorkflowRun
		keep int
	}{{succeeded, keepSucceeded}, {failed, keepFailed}} {
		for i := 0; i < len(c.runs)-c.keep; i++ {
			wfr := c.runs[i]
			uid := wfr.UID
			err := r.Delete(ctx, wfr, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("delete WorkflowRun %s beyond the history limit: %w", wfr.Name, err)
			}
		}
	}
	return nil
}
