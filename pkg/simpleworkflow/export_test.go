package simpleworkflow

import "time"

// SetWakeFollowUp changes how long after an insert notification pollers
// claim once more, until the returned function restores it.
func SetWakeFollowUp(d time.Duration) (restore func()) {
	old := wakeFollowUp.Swap(int64(d))
	return func() { wakeFollowUp.Store(old) }
}

// LeaseFence is leaseFence, for the tests.
func LeaseFence(token int64) int64 { return leaseFence(token) }

// WakesFor is whether a poller of namespace with the literal prefixes is
// woken by a workflow_run_created payload.
func WakesFor(namespace string, prefixes []string, payload string) bool {
	s := &session{cfg: PollerConfig{Namespace: namespace}, prefixes: prefixes}
	return s.wakes(payload)
}
