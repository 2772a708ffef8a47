package engine

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotFound is returned when a run does not exist.
var ErrNotFound = errors.New("not found")

// ErrInvalid is wrapped by every error about bad input, whether the engine or
// the database caught it.
var ErrInvalid = errors.New("invalid input")

// constraintMessages explains each check constraint of the schema in words a
// producer understands.
var constraintMessages = map[string]string{
	"workflow_run_type_format": "type must be dot-separated lowercase segments of letters, digits " +
		"and underscores ending in a version such as .v1 (for example content.thumbnail.v1), at most 253 characters",
	"workflow_run_status_valid":           "status must be one of pending, leased, succeeded, failed, cancelled",
	"workflow_run_payload_object":         "payload must be a JSON object",
	"workflow_run_max_attempts_range":     "max_attempts must be between 1 and 1000",
	"workflow_run_attempt_range":          "attempt must be between 0 and max_attempts",
	"workflow_run_idempotency_key_length": "idempotency_key must be 1 to 512 characters",
	"workflow_run_lease_held":             "a leased run must have leased_by and lease_until",
	"workflow_run_retry_policy_valid":     "retry delays must be positive and the maximum delay at least the base delay",
	"workflow_registry_name_format":       "workflow name must be a versioned type such as content.thumbnail.v1",
	"workflow_registry_runtime_valid":     "runtime must be go or python",
	"workflow_event_type_valid":           "event type must be one of created, leased, started, heartbeat, succeeded, failed, retried, cancelled",
}

// ConstraintMessage returns the human explanation of a schema check constraint,
// or "" when the name is unknown.
func ConstraintMessage(name string) string { return constraintMessages[name] }

// translate turns a database error into one that says what was wrong with the
// input when it was a constraint violation, and wraps it with op otherwise.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23514": // check_violation
			if msg := ConstraintMessage(pgErr.ConstraintName); msg != "" {
				return fmt.Errorf("%s: %w: %s", op, ErrInvalid, msg)
			}
			return fmt.Errorf("%s: %w: %s", op, ErrInvalid, pgErr.Message)
		case "22P02", "22023", "22007", "22008": // invalid text, parameter, datetime
			return fmt.Errorf("%s: %w: %s", op, ErrInvalid, pgErr.Message)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}
