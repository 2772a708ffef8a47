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
		sent := make(map[string]int64, len(s.active))
		for _, a := range s.active {
			refs = append(refs, a.ref)
			sent[a.ref.ID] = a.ref.Token
		}
		s.mu.Unlock()
		if len(refs) == 0 {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, s.cfg.HeartbeatInterval)
		res, err := s.eng.HeartbeatRuns(hctx, s.cfg.WorkerID, refs, s.cfg.LeaseDuration)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("Heartbeat failed", "error", err, "runs", len(refs))
			}
			continue
		}
		for _, r := range res {
			if r.Owned {
				continue
			}
			s.mu.Lock()
			a := s.active[r.ID]
			s.mu.Unlock()
			// The attempt asked about, not a later one of the same run
			// that this worker claimed since.
			if a == nil || a.ref.Token != sent[r.ID] {
				continue
			}
			switch {
			case r.Status == engine.StatusCancelled:
				a.cancel(ErrRunCancelled)
			case r.DeadlineExceeded:
				a.cancel(ErrDeadlineExceeded)
			default:
				a.cancel(ErrLeaseLost)
			}
		}
	}
}
