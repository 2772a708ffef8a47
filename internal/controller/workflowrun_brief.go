package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// DefaultRunningStatusDelay is how long the looks that find an attempt
// just started wait (from the first of them, and again each time the
// attempt goes on after a wait) before showing the run Running: most runs
// end within
// moments, and their next status is then the finished one, one write and
// one Event instead of two each. The run's end is announced, so a run that
// ends meanwhile is written at once.
const DefaultRunningStatusDelay = 500 * time.Millisecond

// briefRunning reports whether a look may leave the run's Running status
// to a later one: the run is held by a worker, the object (as the look read
// it, before changing anything) does not show it Running yet, and nothing
// else is asked of the object (no cancel, no signal) or shown of the run
// (no wait). The caller also checks that the look changed nothing so far.
func briefRunning(wfr *workflowv1alpha1.WorkflowRun, run engine.Run) bool {
	return run.Status == engine.StatusLeased && run.Wait == nil &&
		wfr.Status.Phase != workflowv1alpha1.PhaseRunning && !wfr.Spec.Cancel &&
		int(wfr.Status.SignalsSent) >= len(wfr.Spec.Signals)
}

// heldAttempts remembers, per object, the attempt whose Running status
// looks leave to a later one, and until when: every look within the delay
// of the first is held (the finalizer's own update, the start's
// announcement and the requeue of a quiet start may each bring one), and
// the first look after it writes whatever the run then is. An entry lives
// until a status is written or the object is deleted (an attempt that parks
// and goes on is held again after that write), or, for an object that went
// away unseen, until a sweep finds it a minute past its hold. The zero value
// is ready to use.
type heldAttempts struct {
	mu sync.Mutex
	m  map[types.UID]heldAttempt
	// swept is when the last sweep of old entries ran.
	swept time.Time
}

// heldSweepAfter is how long past its hold an entry is kept.
const heldSweepAfter = time.Minute

// heldAttempt is one object's held attempt and the end of its hold.
type heldAttempt struct {
	attempt int
	until   time.Time
}

// hold reports whether a look at attempt of the object at now is held, and
// for how long: the first look at an attempt starts a hold of delay, the
// looks within it are held for what remains of it, and none after it.
func (h *heldAttempts) hold(uid types.UID, attempt int, now time.Time, delay time.Duration) (time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.m[uid]; ok && e.attempt == attempt {
		left := e.until.Sub(now)
		return left, left > 0
	}
	if h.m == nil {
		h.m = map[types.UID]heldAttempt{}
	}
	sweepOld(h.m, &h.swept, now, heldSweepAfter, func(e heldAttempt) time.Time { return e.until })
	h.m[uid] = heldAttempt{attempt: attempt, until: now.Add(delay)}
	return delay, true
}

func (h *heldAttempts) forget(uid types.UID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, uid)
}
