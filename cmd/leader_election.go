package main

import (
	"errors"
	"fmt"
	"time"
)

// leaderElectionJitter is client-go's jitter factor for the retry period
// (leaderelection.JitterFactor): a standby tries to acquire the lease every
// RetryPeriod to RetryPeriod*(1+1.2), and client-go refuses a renew deadline
// not above RetryPeriod*1.2.
const leaderElectionJitter = 1.2

// leaderElectionTiming holds the Lease timings of leader election; the
// defaults are controller-runtime's.
type leaderElectionTiming struct {
	// leaseDuration is how long a standby waits, from the last renewal it
	// saw, before it takes over the lease of a leader that stopped renewing.
	leaseDuration time.Duration
	// renewDeadline is how long the leader keeps trying to renew before it
	// gives up leading (and the manager exits).
	renewDeadline time.Duration
	// retryPeriod is how often the leader renews and a standby looks.
	retryPeriod time.Duration
}

// defaultLeaderElectionTiming returns controller-runtime's defaults.
func defaultLeaderElectionTiming() leaderElectionTiming {
	return leaderElectionTiming{leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second}
}

// validate reports, in the flags' own terms, timings client-go would refuse
// or that could not work.
func (t leaderElectionTiming) validate() error {
	if t.leaseDuration <= 0 || t.renewDeadline <= 0 || t.retryPeriod <= 0 {
		return errors.New("--leader-election-lease-duration, --leader-election-renew-deadline and --leader-election-retry-period must be positive")
	}
	if t.leaseDuration < time.Second || t.leaseDuration%time.Second != 0 {
		return fmt.Errorf("--leader-election-lease-duration %s must be a whole number of seconds (the Lease stores seconds)", t.leaseDuration)
	}
	if t.renewDeadline >= t.leaseDuration {
		return fmt.Errorf("--leader-election-renew-deadline %s must be shorter than --leader-election-lease-duration %s", t.renewDeadline, t.leaseDuration)
	}
	if float64(t.renewDeadline) <= leaderElectionJitter*float64(t.retryPeriod) {
		return fmt.Errorf("--leader-election-renew-deadline %s must be more than 1.2 times --leader-election-retry-period %s", t.renewDeadline, t.retryPeriod)
	}
	return nil
}
