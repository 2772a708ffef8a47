package simpleworkflow

import (
	"context"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// heartbeatLoop extends the leases of every active run, and cancels the
// handlers of runs that were cancelled or whose lease was lost.
func (s *session) heartbeatLoop(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.HeartbeatInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		s.mu.Lock()
		refs := make([]engine.LeaseRef, 0, len(s.active))
		for _, a := range s.active {
			refs = append(refs, a.ref)
		}
		s.mu.Unlock()
		s.heartbeat(ctx, refs, "Heartbeat failed")
	}
}

// confirmGap is the least time between two calls of confirmLoop: however
// many cancellation notifications arrive, confirming them costs at most one
// heartbeat call in flight and ten a second.
const confirmGap = 100 * time.Millisecond

// confirmLoop confirms the cancellation notifications of the runs this
// worker holds before their handlers are stopped. A notification is only a
// hint: any database login may send one (pg_notify), for any run id. So
// the notified runs get an immediate heartbeat, the same call, allowed to
// the worker's login, that extends every lease; only its answer, that the
// run was cancelled or that this attempt no longer holds the lease, stops a
// handler. Notifications that arrive while a confirmation is in flight are
// gathered into the next one.
func (s *session) confirmLoop(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.confirm:
		}
		if wait := confirmGap - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		s.mu.Lock()
		refs := make([]engine.LeaseRef, 0, len(s.suspects))
		for id := range s.suspects {
			if a := s.active[id]; a != nil && !a.done {
				refs = append(refs, a.ref)
			}
		}
		clear(s.suspects)
		s.mu.Unlock()
		if len(refs) == 0 {
			continue
		}
		last = time.Now()
		s.heartbeat(ctx, refs, "Confirming a cancellation failed; the next heartbeat checks again")
	}
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
