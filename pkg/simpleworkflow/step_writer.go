package simpleworkflow

import (
	"context"
	"errors"
	"sync"

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

// stepWriter journals the steps of the worker's handlers in batches: the
// steps of concurrent handlers share one round trip.
type stepWriter struct {
	loop
	eng      *engine.Engine
	workerID string
	requests chan stepRequest
	// closed is closed once the writer takes no more steps.
	closed chan struct{}
}

func newStepWriter(eng *engine.Engine, workerID string, capacity int) *stepWriter {
	return &stepWriter{eng: eng, workerID: workerID, requests: make(chan stepRequest, capacity), closed: make(chan struct{})}
}

// Start runs the step writer until Stop.
func (w *stepWriter) Start(ctx context.Context) { w.start(ctx, w.run) }

// Stop ends the step writer and waits for the batches being written.
func (w *stepWriter) Stop() { w.stop() }

// record hands a completed step to the writer and waits for the
// database's answer.
func (w *stepWriter) record(ctx context.Context, write engine.StepWrite) (engine.StepWriteResult, error) {
	req := stepRequest{write: write, reply: make(chan stepReply, 1)}
	select {
	case w.requests <- req:
	case <-ctx.Done():
		return engine.StepWriteResult{}, context.Cause(ctx)
	case <-w.closed:
		return engine.StepWriteResult{}, ErrShuttingDown
	}
	select {
	case rep := <-req.reply:
		return rep.res, rep.err
	case <-w.closed:
		select {
		case rep := <-req.reply:
			return rep.res, rep.err
		default:
			return engine.StepWriteResult{}, ErrShuttingDown
		}
	}
}

// stepWriters is how many batches of steps a worker writes at once. A
// handler waits for its step's write before it runs the next step, and a
// batch of 500 steps keeps one database backend busy for 15-20 ms: with one
// writer, the steps that finished meanwhile waited for it while the
// machine's other core idled. A second batch is written beside the first,
// with whatever accumulated since the first began (measured on two cores:
// the changelog's 2026-11-27 notes, in
// `git show 87eb69e5b3e1f1e2cb6dc234035c7a3955a6513a:CHANGELOG.md`). The
// steps of one run are never in two batches at once: its handler waits for
// each step's answer.
const stepWriters = 2

// run writes steps in batches: whatever accumulated while the batches
// before were being written goes in the next one, up to stepWriters
// batches at once. It returns when ctx ends, after the batches being
// written have their answers.
func (w *stepWriter) run(ctx context.Context) {
	defer close(w.closed)
	writers := make(chan struct{}, stepWriters)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var batch []stepRequest
		select {
		case <-ctx.Done():
			return
		case r := <-w.requests:
			batch = append(batch, r)
		}
		// A free writer first, then what accumulated while waiting for it.
		select {
		case <-ctx.Done():
			return
		case writers <- struct{}{}:
		}
	drain:
		for len(batch) < maxStepBatch {
			select {
			case r := <-w.requests:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		wg.Go(func() {
			defer func() { <-writers }()
			w.write(ctx, batch)
		})
	}
}

// write records one batch of steps and answers each handler.
func (w *stepWriter) write(ctx context.Context, batch []stepRequest) {
	writes := make([]engine.StepWrite, len(batch))
	for i, r := range batch {
		writes[i] = r.write
	}
	res, err := withRetry(ctx, func(ctx context.Context) ([]engine.StepWriteResult, error) {
		return w.eng.RecordSteps(ctx, w.workerID, writes)
	})
	if err != nil && errors.Is(err, ErrInvalid) && len(batch) > 1 {
		// A value the database cannot take (a NUL escape, invalid
		// UTF-8) refuses the whole batch: each step is written alone,
		// so only its own handler hears of it.
		w.oneByOne(ctx, batch)
		return
	}
	for i, r := range batch {
		if err != nil {
			r.reply <- stepReply{err: err}
			continue
		}
		r.reply <- stepReply{res: res[i]}
	}
}

// oneByOne writes each step of a refused batch in its own call.
func (w *stepWriter) oneByOne(ctx context.Context, batch []stepRequest) {
	for _, r := range batch {
		res, err := withRetry(ctx, func(ctx context.Context) ([]engine.StepWriteResult, error) {
			return w.eng.RecordSteps(ctx, w.workerID, []engine.StepWrite{r.write})
		})
		if err != nil {
			r.reply <- stepReply{err: err}
			continue
		}
		r.reply <- stepReply{res: res[0]}
	}
}
