package simpleworkflow

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// wakeFollowUp is engine.WakeFollowUp, as a variable for tests.
var wakeFollowUp atomic.Int64

func init() { wakeFollowUp.Store(int64(engine.WakeFollowUp)) }

// matches reports whether a workflow type is one this worker claims.
func (s *session) matches(workflowType string) bool {
	if len(s.prefixes) == 0 {
		return true
	}
	for _, p := range s.prefixes {
		if strings.HasPrefix(workflowType, p) {
			return true
		}
	}
	return false
}

// wakes reports whether an insert notification's payload concerns this
// worker: a type of its namespace (or of any, for a payload without one)
// under one of its prefixes.
func (s *session) wakes(payload string) bool {
	ns, typ := engine.SplitWakePayload(payload)
	return (ns == "" || ns == s.cfg.Namespace) && s.matches(typ)
}

// onNotify wakes the claimer for a new run of a type this worker claims
// (of its namespace: another namespace's inserts wake its own workers
// only), and has the cancellation of a run this worker holds confirmed
// (confirmer): any login may send that notification, so it cancels no
// handler by itself. Ids of runs this worker does not hold are ignored.
func (s *session) onNotify(n engine.Notification) {
	switch n.Channel {
	case engine.ChannelRunCreated:
		if s.wakes(n.Payload) {
			s.claimer.notified()
		}
	case engine.ChannelRunCancelled:
		s.mu.Lock()
		held := s.active[n.Payload] != nil
		s.mu.Unlock()
		if held {
			s.confirmer.suspect(n.Payload)
		}
	}
}

// claimer claims runs into the session's free slots: at once when woken
// (an insert notification, a reconnect, a reclaimed lease, a parked run
// due), otherwise every PollInterval.
type claimer struct {
	loop
	s    *session
	wake chan struct{}
	// followUp wakes the claimer once more engine.WakeFollowUp after the
	// latest insert notification.
	followUp *time.Timer
}

func newClaimer(s *session) *claimer {
	c := &claimer{s: s, wake: make(chan struct{}, 1)}
	c.followUp = time.AfterFunc(time.Hour, c.wakeUp)
	c.followUp.Stop()
	return c
}

// wakeUp has the claimer claim at once.
func (c *claimer) wakeUp() { signal(c.wake) }

// notified wakes the claimer for an insert notification, and once more
// shortly after (engine.WakeFollowUp).
func (c *claimer) notified() {
	c.wakeUp()
	c.followUp.Reset(time.Duration(wakeFollowUp.Load()))
}

// wakeAt wakes the claimer when a run this worker parked is due, so that
// a sleep ends on time without waiting for the next poll.
func (c *claimer) wakeAt(at time.Time) {
	d := time.Until(at) + 20*time.Millisecond
	time.AfterFunc(max(d, 0), c.wakeUp)
}

// Start runs the claimer until Stop.
func (c *claimer) Start(ctx context.Context) { c.start(ctx, c.run) }

// Stop ends the claimer, waits for it (a claim under way is never cut off:
// the runs it leased are started) and stops its follow-up wake-up.
func (c *claimer) Stop() {
	c.stop()
	c.followUp.Stop()
}

func (c *claimer) run(ctx context.Context) {
	s := c.s
	timer := time.NewTimer(s.cfg.PollInterval)
	defer timer.Stop()
	// woken is set when the claimer was woken by a notification (or a
	// timer of its own) rather than by its poll: that claim goes ahead only
	// if no other woken claim of the same types is under way
	// (engine.ClaimParams.Woken).
	woken := false
	// wait waits for a wake-up, or until d has passed.
	wait := func(d time.Duration) {
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(d)
		select {
		case <-ctx.Done():
		case <-c.wake:
			woken = true
		case <-timer.C:
		}
	}
	batchWait := false
	for ctx.Err() == nil {
		s.mu.Lock()
		free, running := s.cfg.Concurrency-s.running, s.running
		s.mu.Unlock()
		if free <= 0 {
			select {
			case <-ctx.Done():
			case <-s.freed:
			}
			continue
		}
		// While handlers are busy, give a few milliseconds for a worthwhile
		// batch of slots to free up rather than claiming one run per round
		// trip; slow handlers do not hold free slots idle for longer.
		if running > 0 && free < s.minClaim() && !batchWait {
			batchWait = true
			select {
			case <-ctx.Done():
			case <-s.freed:
			case <-time.After(claimBatchWait):
			}
			continue
		}
		batchWait = false
		limit := min(free, s.cfg.ClaimBatchSize)
		// A claim is never cut off by shutdown: once the server has leased
		// runs, they are started (and finish within the grace period) rather
		// than left leased until their lease expires.
		cctx, cancelClaim := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
		params := s.claimParams(limit)
		params.Woken, woken = woken, false
		claimed, err := s.eng.ClaimRuns(cctx, params)
		cancelClaim()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Error("Claim failed; retrying", "error", err)
			wait(s.cfg.PollInterval)
			continue
		}
		for _, c := range claimed {
			s.start(ctx, c)
		}
		if len(claimed) == limit {
			continue // there may be more runnable runs
		}
		if params.Woken && len(claimed) == 0 {
			// Another woken claim of these types may have been under way
			// (this one then claims nothing): unless a wake-up comes first,
			// claim once more, not woken, shortly after. At most one such
			// claim per wokenRetry, however many notifications arrive.
			wait(wokenRetry)
			continue
		}
		wait(s.cfg.PollInterval)
	}
}

// wokenRetry is how long after a woken claim that claimed nothing the
// claimer claims again without being woken.
const wokenRetry = 20 * time.Millisecond

// claimParams asks for up to limit runs of this worker's types.
func (s *session) claimParams(limit int) engine.ClaimParams {
	return engine.ClaimParams{
		WorkerID: s.cfg.WorkerID, TypePrefixes: s.cfg.TypePrefixes, Runtime: s.cfg.Runtime,
		Limit: limit, LeaseDuration: s.cfg.LeaseDuration, Types: s.types, Namespace: s.cfg.Namespace,
	}
}

// claimTimeout bounds one claim call.
const claimTimeout = 30 * time.Second

// claimBatchWait is how long a busy worker waits for more free slots before
// claiming into the few it has.
const claimBatchWait = 5 * time.Millisecond

// minClaim is the fewest free slots worth a claim while handlers are busy: a
// quarter of the claim batch size (bounded by the concurrency), at least one.
func (s *session) minClaim() int {
	return max(1, min(s.cfg.Concurrency, s.cfg.ClaimBatchSize)/4)
}
