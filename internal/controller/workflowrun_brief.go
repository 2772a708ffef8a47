package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// DefaultRunningStatusDelay is how long a look that finds an attempt just
// started waits (once per attempt, and again each time the attempt goes on
// after a wait) before showing the run Running: most runs end within
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

// heldAttempts remembers, per object, the attempt whose Running status a
// look left to a later one, so that an attempt is held back once: the next
// look writes whatever the run then is. An entry lives until a status is
// written or the object is deleted (an attempt that parks and goes on is
// held again after that write). The zero value is ready to use.
type heldAttempts struct {
	mu sync.Mutex
	m  map[types.UID]int
}

// holdOnce reports whether attempt of the object was not held back before,
// and remembers it.
func (h *heldAttempts) holdOnce(uid types.UID, attempt int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.m[uid]; ok && a == attempt {
		return false
	}
	if h.m == nil {
		h.m = map[types.UID]int{}
	}
	h.m[uid] = attempt
	return true
}

func (h *heldAttempts) forget(uid types.UID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, uid)
}
