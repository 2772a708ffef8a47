package controller

import (
	"time"
)

// Defaults of a worker pool.
const (
	DefaultRunsPerReplica = 10
	DefaultScaleDownDelay = 5 * time.Minute
	DefaultActivationRuns = 1
)

// poolPolicy is a worker pool's scaling settings, defaults applied.
type poolPolicy struct {
	Min, Max       int32
	RunsPerReplica int32
	ScaleDownDelay time.Duration
	ActivationRuns int32
}

// desiredReplicas is clamp(ceil((runnable + leased) / runsPerReplica), min,
// max). A pool at zero stays at zero while fewer than activationRuns runs are
// runnable (and none is leased).
func (p poolPolicy) desiredReplicas(current int32, runnable, leased int64) int32 {
	work := max(runnable, 0) + max(leased, 0)
	// In 64 bits, clamped before narrowing: a deep queue must not wrap.
	want := min((work+int64(p.RunsPerReplica)-1)/int64(p.RunsPerReplica), int64(p.Max))
	if current == 0 && leased == 0 && runnable < int64(p.ActivationRuns) {
		want = 0
	}
	return max(p.Min, int32(want))
}

// countCap is how far the pool's queue is worth counting: the most runs it
// can use (maxReplicas × runsPerReplica), or the activation threshold if
// that is higher. With counts bounded by it (each of runnable and leased),
// desiredReplicas decides as it would with exact counts: a bounded count
// is lower only when the true one reaches the cap, and then both give the
// maximum.
func (p poolPolicy) countCap() int64 {
	return max(int64(p.Max)*int64(p.RunsPerReplica), int64(p.ActivationRuns), 1)
}

// scaleState remembers, per pool, since when the desired count has been
// below the current one.
type scaleState struct {
	lowSince time.Time
}

// decide returns the replica count to set now, given the current and desired
// counts: up at once, down only once the desired count has stayed lower for
// the scale-down delay. ok is false when nothing should change.
func (p poolPolicy) decide(st *scaleState, now time.Time, current, desired int32) (target int32, ok bool) {
	switch {
	case desired > current:
		st.lowSince = time.Time{}
		return desired, true
	case desired == current:
		st.lowSince = time.Time{}
		return current, false
	}
	if st.lowSince.IsZero() {
		st.lowSince = now
	}
	if now.Sub(st.lowSince) < p.ScaleDownDelay {
		return current, false
	}
	st.lowSince = time.Time{}
	return desired, true
}
