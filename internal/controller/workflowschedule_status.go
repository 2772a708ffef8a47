package controller

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// maxActiveRefs bounds status.active (status.activeCount counts them all).
const maxActiveRefs = 100

// applyScheduleStatus sets ws.Status from the schedule as the inbox holds
// it (nil: it holds none), the WorkflowRuns ws made (oldest tick first) and
// the newest tick that has a WorkflowRun.
func applyScheduleStatus(ws *workflowv1alpha1.WorkflowSchedule, stored *engine.Schedule,
	owned []workflowv1alpha1.WorkflowRun, lastScheduled *metav1.Time) {
	st := &ws.Status
	st.ObservedGeneration = ws.Generation
	st.LastScheduleTime = lastScheduled
	st.NextScheduleTime, st.LastOutcome, st.LastError = nil, "", ""
	if stored != nil {
		// A schedule whose next tick cannot be computed is parked far in
		// the future: it has no next tick to show.
		if !stored.Suspend && stored.NextTickAt.Before(engine.FarFuture) {
			t := metav1.NewTime(stored.NextTickAt.UTC().Truncate(time.Second))
			st.NextScheduleTime = &t
		}
		st.LastOutcome = string(stored.LastOutcome)
		st.LastError = truncate(stored.LastError, 1024)
	}
	st.Active, st.ActiveCount = nil, 0
	for i := range owned {
		wfr := &owned[i]
		if wfr.Status.Phase.Finished() || !wfr.DeletionTimestamp.IsZero() {
			continue
		}
		st.ActiveCount++
		if len(st.Active) < maxActiveRefs {
			st.Active = append(st.Active, workflowv1alpha1.ScheduledRunReference{Name: wfr.Name, RunID: wfr.Status.RunID})
		}
	}
}
