package simpleworkflow

import (
	"errors"

	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// ErrNotFound is wrapped by errors about runs that do not exist.
var ErrNotFound = engine.ErrNotFound

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
)

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
