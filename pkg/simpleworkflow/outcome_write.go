package simpleworkflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// outcomeKind is what a finished handler's outcome asks to write: a
// result (succeed), an error (fail), the run handed back (release), or
// nothing (drop: the run parked, was cancelled, lost its lease or passed its
// deadline, and the database already says so).
type outcomeKind int

const (
	outcomeComplete outcomeKind = iota
	outcomeFail
	outcomeRelease
	outcomeDrop
)

// outcome is what a finished handler asks to record.
type outcome struct {
	run       *activeRun
	kind      outcomeKind
	result    json.RawMessage
	err       error
	retryable bool
	reason    error
}

// outcomeWriters is how many batches of outcomes a worker writes at once.
// A batch whose runs are DAG steps or children does its parents' work in
// the same call (their next steps, their journals): with one writer, one
// database backend was busy while the rest of the machine idled. A second
// batch is written beside a first only once the first has been writing for
// secondWriterAfter: a quick write (a plain burn-down's) is waited for, so
// that what accumulates meanwhile goes in one batch, not two. Measured on
// two cores (the changelog's 2026-11-26 notes, in
// `git show 87eb69e5b3e1f1e2cb6dc234035c7a3955a6513a:CHANGELOG.md`): with
// two writers always on, 300 concurrent 10-step DAG chains were 1.4-1.6x
// quicker but burn-downs of four pollers 15 % slower; waiting 25 ms, four
// pollers were still 9 % slower; waiting 50 ms, they were as before. Two
// batches with runs of one parent wait for each other on the parent's lock
// (lock_parents); a deadlock between them, as between two workers, is
// retried by withRetry.
const outcomeWriters = 2

// secondWriterAfter is how long a batch must have been writing before
// another is written beside it.
const secondWriterAfter = 50 * time.Millisecond

// completer writes the outcomes the handlers queue, in batches: whatever
// accumulated while the batches before were being written goes in the next
// one, written beside them when they are slow (see outcomeWriters). Its
// stop is not its context's end: the outcomes queued until then are
// written first, under the session's background context.
type completer struct {
	s        *session
	outcomes chan outcome
	stopping chan struct{}
	done     chan struct{}
}

func newCompleter(s *session, capacity int) *completer {
	return &completer{s: s, outcomes: make(chan outcome, capacity), stopping: make(chan struct{}), done: make(chan struct{})}
}

// Start runs the completer until Stop.
func (c *completer) Start(ctx context.Context) {
	go func() {
		defer close(c.done)
		c.run(ctx)
	}()
}

// Stop writes what is queued and the batches being written, then ends the
// completer.
func (c *completer) Stop() {
	close(c.stopping)
	<-c.done
}

func (c *completer) run(ctx context.Context) {
	const maxBatch = 1000
	s := c.s
	ended := make(chan int, outcomeWriters)
	writing := map[int]time.Time{} // when each batch being written began
	next := 0
	for {
		var batch []outcome
		select {
		case o := <-c.outcomes:
			batch = append(batch, o)
		case id := <-ended:
			delete(writing, id)
			continue
		case <-c.stopping:
			for len(writing) > 0 {
				delete(writing, <-ended)
			}
			for {
				select {
				case o := <-c.outcomes:
					batch = append(batch, o)
					continue
				default:
				}
				break
			}
			if len(batch) > 0 {
				s.flush(ctx, batch)
			}
			return
		}
		// Room for the batch: fewer than outcomeWriters being written, each
		// for secondWriterAfter at least.
		for len(writing) > 0 {
			if len(writing) >= outcomeWriters {
				delete(writing, <-ended)
				continue
			}
			var newest time.Time
			for _, at := range writing {
				if at.After(newest) {
					newest = at
				}
			}
			wait := secondWriterAfter - time.Since(newest)
			if wait <= 0 {
				break
			}
			select {
			case id := <-ended:
				delete(writing, id)
			case <-time.After(wait):
			}
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case o := <-c.outcomes:
				batch = append(batch, o)
			default:
				break drain
			}
		}
		next++
		id := next
		writing[id] = time.Now()
		go func() {
			s.flush(ctx, batch)
			ended <- id
		}()
	}
}

// flush records a batch of outcomes, one write per kind, ends the spans of
// their attempts and frees their slots.
func (s *session) flush(ctx context.Context, batch []outcome) {
	// The database's answers are matched to outcomes by run id, so a write
	// holds one outcome per run. Two meet when an attempt that lost its
	// lease and the attempt of the same run that followed it on this worker
	// end together: the later one is written after, on its own.
	batch, later := firstOfEachRun(batch)
	if len(later) > 0 {
		defer s.flush(ctx, later)
	}
	// What the handlers logged goes before the outcome that ends their
	// attempts (most log nothing: no slice, no call).
	var logged []*activeRun
	for _, o := range batch {
		if o.run.log.pending() {
			logged = append(logged, o.run)
		}
	}
	s.logs.send(ctx, logged)
	var (
		completions []engine.Completion
		failures    []engine.Failure
		releases    []engine.LeaseRef
	)
	// How each attempt ended, for its span; the default covers an outcome
	// whose write failed.
	ends := make(map[string]attemptEnd, len(batch))
	for _, o := range batch {
		ends[o.run.ref.ID] = attemptEnd{outcome: OutcomeUnrecorded, err: o.err}
		switch o.kind {
		case outcomeComplete:
			completions = append(completions, engine.Completion{LeaseRef: o.run.ref, Result: o.result})
		case outcomeFail:
			failures = append(failures, engine.Failure{LeaseRef: o.run.ref, Error: o.err.Error(), Retryable: o.retryable})
		case outcomeRelease:
			releases = append(releases, o.run.ref)
		case outcomeDrop:
			ends[o.run.ref.ID] = attemptEnd{outcome: dropOutcome(o.reason)}
			if errors.Is(o.reason, ErrParked) {
				s.log.Info("Run parked", "run_id", o.run.ref.ID, "type", o.run.typ, "attempt", o.run.ref.Attempt)
				continue
			}
			s.log.Info("Run stopped", "run_id", o.run.ref.ID, "type", o.run.typ, "attempt", o.run.ref.Attempt, "reason", o.reason)
		}
	}
	byID := make(map[string]outcome, len(batch))
	for _, o := range batch {
		byID[o.run.ref.ID] = o
	}
	if len(completions) > 0 {
		// Results the database cannot store fail their runs instead.
		failures = append(failures, s.succeedAndHandOff(ctx, completions, byID, ends)...)
	}
	if len(failures) > 0 {
		s.fail(ctx, failures, byID, ends)
	}
	if len(releases) > 0 {
		s.release(ctx, releases, byID, ends)
	}
	for _, o := range batch {
		e := ends[o.run.ref.ID]
		endAttemptSpan(o.run.span, e.outcome, e.err, e.next)
	}
	s.freeSlots(batch)
}

// firstOfEachRun splits a batch into the first outcome of each run and the
// outcomes of runs already in it.
func firstOfEachRun(batch []outcome) (first, later []outcome) {
	seen := make(map[string]bool, len(batch))
	for _, o := range batch {
		if seen[o.run.ref.ID] {
			later = append(later, o)
			continue
		}
		seen[o.run.ref.ID] = true
		first = append(first, o)
	}
	return first, later
}

// succeedAndHandOff records successful attempts (succeed) and starts the
// runs their completion handed to this worker: the next steps of their
// DAGs and their durable parents woken, claimed in the same transaction
// (engine.CompleteRunsHandOff) into the slots the batch frees, so a chain
// goes on without a trip through the queue. Nothing is handed off once
// the worker stops claiming (the gate, closed before shutdown begins).
func (s *session) succeedAndHandOff(ctx context.Context, completions []engine.Completion, byID map[string]outcome,
	ends map[string]attemptEnd) []engine.Failure {
	s.gate.RLock()
	defer s.gate.RUnlock()
	handOff := 0
	if !s.stopping {
		for _, c := range completions {
			if byID[c.ID].run.parent {
				handOff++
			}
		}
		handOff = min(handOff, s.cfg.ClaimBatchSize)
	}
	unstorable, handed := s.succeed(ctx, completions, byID, ends, handOff)
	for _, c := range handed {
		s.log.Debug("Run handed off", "run_id", c.ID, "type", c.Type, "parent_id", c.ParentID)
		s.start(ctx, c)
	}
	return unstorable
}

// succeed records successful attempts and reports each, in ends and the
// log. It returns the failures that replace results the database could not
// store (byID and ends already say so), and the runs handed off (handOff
// is the most to claim; see completeRuns).
func (s *session) succeed(ctx context.Context, completions []engine.Completion, byID map[string]outcome,
	ends map[string]attemptEnd, handOff int) ([]engine.Failure, []engine.ClaimedRun) {
	done, handed, unstorable, err := s.completeRuns(ctx, completions, handOff)
	for _, f := range unstorable {
		o := byID[f.ID]
		o.kind, o.err, o.retryable = outcomeFail, errors.New(f.Error), false
		byID[f.ID] = o
		ends[f.ID] = attemptEnd{outcome: OutcomeUnrecorded, err: o.err}
	}
	if err != nil {
		s.log.Error("Recording results failed; the runs will be retried after their lease expires", "error", err, "runs", len(completions))
	}
	ok := make(map[string]bool, len(done))
	for _, d := range done {
		ok[d.ID] = true
		o := byID[d.ID]
		if d.Status == engine.StatusFailed {
			// The database refused the result (too large, nested too
			// deeply): the run failed alone, for good.
			ends[d.ID] = attemptEnd{outcome: OutcomeFailed, err: errors.New(d.Error)}
			s.log.Info("Run failed", "run_id", d.ID, "type", o.run.typ, "attempt", o.run.ref.Attempt, "error", d.Error)
			continue
		}
		ends[d.ID] = attemptEnd{outcome: OutcomeSucceeded}
		s.log.Info("Run succeeded", "run_id", d.ID, "type", o.run.typ, "attempt", o.run.ref.Attempt)
	}
	for _, c := range completions {
		if !ok[c.ID] && err == nil && byID[c.ID].kind == outcomeComplete {
			ends[c.ID] = attemptEnd{outcome: OutcomeLeaseLost}
			s.log.Warn("Run result discarded: the lease was no longer held", "run_id", c.ID, "attempt", c.Attempt)
		}
	}
	return unstorable, handed
}

// fail records failed attempts (retried, or failed for good) and reports
// each, in ends and the log.
func (s *session) fail(ctx context.Context, failures []engine.Failure, byID map[string]outcome, ends map[string]attemptEnd) {
	res, err := s.failRuns(ctx, failures)
	if err != nil {
		s.log.Error("Recording failures failed; the runs will be retried after their lease expires", "error", err, "runs", len(failures))
	}
	if err == nil {
		// Written, but not for the runs whose lease had gone.
		for _, f := range failures {
			ends[f.ID] = attemptEnd{outcome: OutcomeLeaseLost}
		}
	}
	for _, r := range res {
		o := byID[r.ID]
		if r.Status == engine.StatusPending {
			next := r.RunAt
			ends[r.ID] = attemptEnd{outcome: OutcomeRetrying, err: o.err, next: &next}
			s.log.Info("Run failed; retrying", "run_id", r.ID, "type", o.run.typ, "attempt", o.run.ref.Attempt,
				"error", o.err.Error(), "next_attempt_at", r.RunAt)
		} else {
			ends[r.ID] = attemptEnd{outcome: OutcomeFailed, err: o.err}
			s.log.Info("Run failed", "run_id", r.ID, "type", o.run.typ, "attempt", o.run.ref.Attempt, "error", o.err.Error())
		}
	}
}

// release hands back the runs of a worker shutting down (pending at once,
// the attempt not counted) and reports each, in ends and the log.
func (s *session) release(ctx context.Context, releases []engine.LeaseRef, byID map[string]outcome, ends map[string]attemptEnd) {
	done, err := s.releaseRuns(ctx, releases)
	if err != nil {
		s.log.Error("Handing runs back failed; they will be retried after their lease expires", "error", err, "runs", len(releases))
	} else {
		for _, r := range releases { // written, but not for lost leases
			ends[r.ID] = attemptEnd{outcome: OutcomeLeaseLost}
		}
	}
	for _, id := range done {
		ends[id] = attemptEnd{outcome: OutcomeReleased}
		s.log.Info("Run handed back", "run_id", id, "type", byID[id].run.typ, "reason", "worker shutting down")
	}
}

// cleanedNote marks a text that was changed so that Postgres can store it.
const cleanedNote = " [cleaned: NUL bytes removed, invalid UTF-8 replaced]"

// cleanText returns s as Postgres text can hold it: without NUL bytes and
// with invalid UTF-8 replaced, saying so at its end when it changed.
func cleanText(s string) string {
	if strings.IndexByte(s, 0) < 0 && strings.ToValidUTF8(s, "") == s {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "") + cleanedNote
}

// completeRuns records successful attempts and, with handOff > 0, claims
// up to that many of the runs they made runnable in the same transaction
// (engine.CompleteRunsHandOff). A batch that the database refuses as
// invalid (a result it cannot store, such as one holding \u0000) is
// written row by row, without a hand-off, so only the bad row is affected:
// that run fails for good, saying why, instead of being executed again.
func (s *session) completeRuns(ctx context.Context, cs []engine.Completion, handOff int) ([]engine.Completed, []engine.ClaimedRun, []engine.Failure, error) {
	type answer struct {
		done   []engine.Completed
		handed []engine.ClaimedRun
	}
	a, err := withRetry(ctx, func(ctx context.Context) (answer, error) {
		if handOff > 0 {
			done, handed, err := s.eng.CompleteRunsHandOff(ctx, s.cfg.WorkerID, cs, s.claimParams(handOff))
			return answer{done, handed}, err
		}
		done, err := s.eng.CompleteRuns(ctx, s.cfg.WorkerID, cs)
		return answer{done: done}, err
	})
	if err == nil || !errors.Is(err, ErrInvalid) {
		return a.done, a.handed, nil, err
	}
	done := a.done
	done = done[:0]
	var unstorable []engine.Failure
	for _, c := range cs {
		one, err := withRetry(ctx, func(ctx context.Context) ([]engine.Completed, error) {
			return s.eng.CompleteRuns(ctx, s.cfg.WorkerID, []engine.Completion{c})
		})
		switch {
		case errors.Is(err, ErrInvalid):
			unstorable = append(unstorable, engine.Failure{LeaseRef: c.LeaseRef,
				Error: cleanText(fmt.Sprintf("the handler's result could not be stored: %v", err))})
		case err != nil:
			return done, nil, unstorable, err
		default:
			done = append(done, one...)
		}
	}
	return done, nil, unstorable, nil
}

// failRuns records failed attempts, row by row when the database
// refuses the batch as invalid; a row still refused is recorded with a
// replacement message.
func (s *session) failRuns(ctx context.Context, fs []engine.Failure) ([]engine.FailResult, error) {
	for i := range fs {
		fs[i].Error = cleanText(fs[i].Error)
	}
	res, err := withRetry(ctx, func(ctx context.Context) ([]engine.FailResult, error) {
		return s.eng.FailRuns(ctx, s.cfg.WorkerID, fs)
	})
	if err == nil || !errors.Is(err, ErrInvalid) {
		return res, err
	}
	res = res[:0]
	for _, f := range fs {
		one, err := withRetry(ctx, func(ctx context.Context) ([]engine.FailResult, error) {
			return s.eng.FailRuns(ctx, s.cfg.WorkerID, []engine.Failure{f})
		})
		if errors.Is(err, ErrInvalid) {
			f.Error = fmt.Sprintf("the handler's error could not be stored: %v", err)
			one, err = withRetry(ctx, func(ctx context.Context) ([]engine.FailResult, error) {
				return s.eng.FailRuns(ctx, s.cfg.WorkerID, []engine.Failure{f})
			})
		}
		if err != nil {
			return res, err
		}
		res = append(res, one...)
	}
	return res, nil
}

// releaseRuns hands runs back; it returns the ids of those whose lease was
// still held.
func (s *session) releaseRuns(ctx context.Context, refs []engine.LeaseRef) ([]string, error) {
	return withRetry(ctx, func(ctx context.Context) ([]string, error) {
		return s.eng.ReleaseRuns(ctx, s.cfg.WorkerID, refs)
	})
}
