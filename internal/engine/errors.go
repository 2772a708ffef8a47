package engine

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotFound is returned when a run does not exist.
var ErrNotFound = errors.New("not found")

// ErrForbidden is wrapped by errors about what the database login may not
// do: act on a namespace it is not bound to, run a type another namespace
// does not share with it, or call a function its role lacks.
var ErrForbidden = errors.New("forbidden")

// ErrInvalid is wrapped by every error about bad input, whether the engine or
// the database caught it.
var ErrInvalid = errors.New("invalid input")

// translate turns a database error into one of the package's: the
// inbox's own SQLSTATEs (class SW, testdata/contract/errors.json) carry the
// sentence a user reads and map to the typed errors by codeError; the
// standard codes the server itself raises for a refused value or login map
// to the same errors. Anything else is wrapped with op.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if typed, ok := codeError(pgErr.Code); ok {
			if typed == nil {
				return fmt.Errorf("%s: %w", op, err)
			}
			return &dbError{op: op, kind: typed, pg: pgErr}
		}
		switch pgErr.Code {
		case "22P02", "22023", "22007", "22008", "22P05", "54000", "22021", "23514":
			// invalid text, parameter, datetime, untranslatable character,
			// a limit reached, invalid byte sequence, a check of the
			// server's own
			return fmt.Errorf("%s: %w: %s", op, ErrInvalid, pgErr.Message)
		case "54001": // statement too complex: a JSON value nested past the server's stack
			return fmt.Errorf("%s: %w: a JSON value nests too deeply for the database to read (%s); at most %d levels are stored",
				op, ErrInvalid, pgErr.Message, MaxJSONDepth)
		case "42501": // insufficient_privilege: a grant or row-level security refused the login
			return fmt.Errorf("%s: %w: %w", op, ErrForbidden, err)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// dbError is a database error the inbox raised in its own words: it reads
// "op: kind: the sentence", and unwraps to both the typed error and the
// server's (its code, constraint and detail stay readable).
type dbError struct {
	op   string
	kind error
	pg   *pgconn.PgError
}

// Error says the operation, the kind and the database's sentence.
func (e *dbError) Error() string { return e.op + ": " + e.kind.Error() + ": " + e.pg.Message }

// Unwrap returns the typed error and the server's.
func (e *dbError) Unwrap() []error { return []error{e.kind, e.pg} }
