package simpleworkflow

import (
	"context"
	"errors"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// maxStepBatch caps the steps written in one call.
const maxStepBatch = 1000

// stepRequest is a step a handler waits to see journaled.
type stepRequest struct {
	write engine.StepWrite
	reply chan stepReply
}

type stepReply struct {
	res engine.StepWriteResult
	err error
}

// recordStep hands a completed step to the session's writer and waits for
// the database's answer. Steps of concurrent handlers share one round trip.
func (s *session) recordStep(ctx context.Context, w engine.StepWrite) (engine.StepWriteResult, error) {
	req := stepRequest{write: w, reply: make(chan stepReply, 1)}
	select {
	case s.steps <- req:
	case <-ctx.Done():
		return engine.StepWriteResult{}, context.Cause(ctx)
	case <-s.stepsDone:
		return engine.StepWriteResult{}, ErrShuttingDown
	}
	select {
	case rep := <-req.reply:
		return rep.res, rep.err
	case <-s.stepsDone:
		select {
		case rep := <-req.reply:
			return rep.res, rep.err
		default:
			return engine.StepWriteResult{}, ErrShuttingDown
		}
	}
}

// stepLoop writes steps in batches: whatever accumulated while the previous
// batch was being written goes in the next one.
func (s *session) stepLoop(ctx context.Context) {
	defer close(s.stepsDone)
	for {
		var batch []stepRequest
		select {
		case <-ctx.Done():
			return
		case r := <-s.steps:
			batch = append(batch, r)
		}
	drain:
		for len(batch) < maxStepBatch {
			select {
			case r := <-s.steps:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		writes := make([]engine.StepWrite, len(batch))
		for i, r := range batch {
			writes[i] = r.write
		}
		res, err := withRetry(ctx, func(ctx context.Context) ([]engine.StepWriteResult, error) {
			return s.eng.RecordSteps(ctx, s.cfg.WorkerID, writes)
		})
		if err != nil && errors.Is(err, ErrInvalid) && len(batch) > 1 {
			// A value the database cannot take (a NUL escape, invalid
			// UTF-8) refuses the whole batch: each step is written alone,
			// so only its own handler hears of it.
			s.recordOneByOne(ctx, batch)
			continue
		}
		for i, r := range batch {
			if err != nil {
				r.reply <- stepReply{err: err}
				continue
			}
			r.reply <- stepReply{res: res[i]}
		}
	}
}

// recordOneByOne writes each step of a refused batch in its own call.
func (s *session) recordOneByOne(ctx context.Context, batch []stepRequest) {
	for _, r := range batch {
		res, err := withRetry(ctx, func(ctx context.Context) ([]engine.StepWriteResult, error) {
			return s.eng.RecordSteps(ctx, s.cfg.WorkerID, []engine.StepWrite{r.write})
		})
		if err != nil {
			r.reply <- stepReply{err: err}
			continue
		}
		r.reply <- stepReply{res: res[0]}
	}
}
