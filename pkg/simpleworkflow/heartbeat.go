package simpleworkflow

import (
	"context"
	"sync"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// heartbeater extends the leases of every run this worker holds, every
// interval (PollerConfig.HeartbeatInterval); the answers cancel the
// handlers of runs that were cancelled or whose lease was lost
// (session.heartbeat).
type heartbeater struct {
	loop
	interval time.Duration
	// held returns the leases to extend.
	held func() []engine.LeaseRef
	beat func(ctx context.Context, refs []engine.LeaseRef, failed string)
}

// Start runs the heartbeater until Stop.
func (h *heartbeater) Start(ctx context.Context) { h.start(ctx, h.run) }

// Stop ends the heartbeater and waits for it.
func (h *heartbeater) Stop() { h.stop() }

func (h *heartbeater) run(ctx context.Context) {
	ticker := time.NewTicker(h.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		h.beat(ctx, h.held(), "Heartbeat failed")
	}
}

// confirmGap is the least time between two confirmations: however many
// cancellation notifications arrive, confirming them costs at most one
// heartbeat call in flight and ten a second.
const confirmGap = 100 * time.Millisecond

// confirmer confirms the cancellation notifications of the runs this
// worker holds before their handlers are stopped. A notification is only a
// hint: any database login may send one (pg_notify), for any run id. So
// the notified runs get an immediate heartbeat, the same call, allowed to
// the worker's login, that extends every lease; only its answer, that the
// run was cancelled or that this attempt no longer holds the lease, stops a
// handler. Notifications that arrive while a confirmation is in flight are
// gathered into the next one.
type confirmer struct {
	loop
	// held returns the leases of the named runs whose handlers still run.
	held func(ids []string) []engine.LeaseRef
	beat func(ctx context.Context, refs []engine.LeaseRef, failed string)

	mu sync.Mutex
	// suspects are the runs named by a notification, until confirmed.
	suspects  map[string]struct{}
	requested chan struct{}
}

func newConfirmer(held func(ids []string) []engine.LeaseRef,
	beat func(ctx context.Context, refs []engine.LeaseRef, failed string)) *confirmer {
	return &confirmer{held: held, beat: beat, suspects: map[string]struct{}{}, requested: make(chan struct{}, 1)}
}

// suspect asks for the run's cancellation to be confirmed.
func (c *confirmer) suspect(id string) {
	c.mu.Lock()
	c.suspects[id] = struct{}{}
	c.mu.Unlock()
	signal(c.requested)
}

// Start runs the confirmer until Stop.
func (c *confirmer) Start(ctx context.Context) { c.start(ctx, c.run) }

// Stop ends the confirmer and waits for it.
func (c *confirmer) Stop() { c.stop() }

func (c *confirmer) run(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.requested:
		}
		if wait := confirmGap - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		c.mu.Lock()
		ids := make([]string, 0, len(c.suspects))
		for id := range c.suspects {
			ids = append(ids, id)
		}
		clear(c.suspects)
		c.mu.Unlock()
		refs := c.held(ids)
		if len(refs) == 0 {
			continue
		}
		last = time.Now()
		c.beat(ctx, refs, "Confirming a cancellation failed; the next heartbeat checks again")
	}
}

// leases returns the leases of every run this worker holds.
func (s *session) leases() []engine.LeaseRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs := make([]engine.LeaseRef, 0, len(s.active))
	for _, a := range s.active {
		refs = append(refs, a.ref)
	}
	return refs
}

// runningLeases returns the leases of the named runs whose handlers still
// run on this worker.
func (s *session) runningLeases(ids []string) []engine.LeaseRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs := make([]engine.LeaseRef, 0, len(ids))
	for _, id := range ids {
		if a := s.active[id]; a != nil && !a.done {
			refs = append(refs, a.ref)
		}
	}
	return refs
}

// heartbeat extends the leases of refs, and cancels the handlers of those
// whose run was cancelled, passed its deadline or whose lease was lost.
//
// An attempt that no longer holds its lease is asked about once more before
// its handler is told why: the answer's status is read as the call began,
// so a run cancelled while the call waited for its row (say, a confirmation
// in flight when the cancel committed) shows as still leased, not owned.
// The second answer reads the status after that change.
func (s *session) heartbeat(ctx context.Context, refs []engine.LeaseRef, failed string) {
	sent := make(map[string]int64, len(refs))
	for _, r := range refs {
		sent[r.ID] = r.Token
	}
	// held is the attempt asked about, not a later one of the same run
	// that this worker claimed since.
	held := func(id string) *activeRun {
		s.mu.Lock()
		defer s.mu.Unlock()
		if a := s.active[id]; a != nil && a.ref.Token == sent[id] {
			return a
		}
		return nil
	}
	for again := false; len(refs) > 0; again = true {
		hctx, cancel := context.WithTimeout(ctx, s.cfg.HeartbeatInterval)
		res, err := s.eng.HeartbeatRuns(hctx, s.cfg.WorkerID, refs, s.cfg.LeaseDuration)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error(failed, "error", err, "runs", len(refs))
			}
			if again {
				// The first answer said these leases were lost.
				for _, r := range refs {
					if a := held(r.ID); a != nil {
						a.cancel(ErrLeaseLost)
					}
				}
			}
			return
		}
		var lost []engine.LeaseRef
		for _, r := range res {
			if r.Owned {
				continue
			}
			a := held(r.ID)
			if a == nil {
				continue
			}
			switch {
			case r.Status == engine.StatusCancelled:
				a.cancel(ErrRunCancelled)
			case r.DeadlineExceeded:
				a.cancel(ErrDeadlineExceeded)
			case !again:
				lost = append(lost, a.ref)
			default:
				a.cancel(ErrLeaseLost)
			}
		}
		refs = lost
	}
}
