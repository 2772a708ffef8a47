package simpleworkflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// ErrNotFound is wrapped by errors about runs that do not exist.
var ErrNotFound = engine.ErrNotFound

// ErrForbidden is wrapped by errors about what the database login may not
// do: record in, claim for or act on a namespace it is not bound to, or run
// a type another namespace does not share with it.
var ErrForbidden = engine.ErrForbidden

// ErrInvalid is wrapped by errors about bad input (type format, payload not a
// JSON object, out-of-range settings).
var ErrInvalid = engine.ErrInvalid

// Causes of a handler's context cancellation; read them with
// context.Cause(ctx).
var (
	// ErrRunCancelled: the run was cancelled by a producer.
	ErrRunCancelled = errors.New("run cancelled")
	// ErrLeaseLost: the worker no longer holds the run's lease (it expired
	// and the run was reclaimed); whatever the handler does is discarded.
	ErrLeaseLost = errors.New("lease lost")
	// ErrShuttingDown: the worker is stopping and its grace period is over;
	// the run is handed back and retried elsewhere without counting the
	// attempt.
	ErrShuttingDown = errors.New("worker shutting down")
	// ErrDeadlineExceeded: the run's deadline passed; the run has failed
	// with "deadline exceeded" and whatever the handler does is discarded.
	ErrDeadlineExceeded = errors.New("deadline exceeded")
	// ErrParked: the run parked at a durable wait (a sleep, a signal, a
	// child) and gave up its lease; the handler should return at once. It
	// runs again, replaying its journal, when the wait ends.
	ErrParked = errors.New("run parked")
)

// ErrNonDeterministic is wrapped when a run's code reaches, at a position
// of its journal, a step other than the one recorded there. The run fails
// for good with the message.
var ErrNonDeterministic = errors.New("non-deterministic")

// ErrRunFinished is wrapped when a signal is sent to a run that already
// finished.
var ErrRunFinished = engine.ErrRunFinished

// ChildFailedError is returned by AwaitChild when the child run failed or
// was cancelled.
type ChildFailedError struct {
	// Step is the parent's step that started the child.
	Step string
	// ChildID is the child run.
	ChildID string
	// Message is the child's error ("child run cancelled" for a cancelled
	// child).
	Message string
}

func (e *ChildFailedError) Error() string {
	return fmt.Sprintf("child run %s (step %s) failed: %s", e.ChildID, e.Step, e.Message)
}

// permanentError marks an error that must not be retried.
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// Permanent wraps err so that the run fails at once instead of being retried.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// withCause adds why ctx ended (ErrLeaseLost, ErrRunCancelled, ...) to err,
// an error of a call that ctx cut off: a step, wait or child cut off by the
// end of its attempt then says why, and errors.Is finds the cause as well
// as the context error.
func withCause(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	cause := context.Cause(ctx)
	if errors.Is(err, cause) {
		return err
	}
	return fmt.Errorf("%w (%w)", cause, err)
}
