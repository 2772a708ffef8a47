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
