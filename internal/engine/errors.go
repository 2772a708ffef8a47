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

// constraintMessages explains each check constraint of the schema in words a
// producer understands.
var constraintMessages = map[string]string{
	"workflow_run_type_format": "type must be dot-separated lowercase segments of letters, digits " +
		"and underscores ending in a version such as .v1 (for example content.thumbnail.v1), at most 253 characters",
	"workflow_run_status_valid":                  "status must be one of pending, leased, succeeded, failed, cancelled",
	"workflow_run_payload_object":                "payload must be a JSON object",
	"workflow_run_max_attempts_range":            "max_attempts must be between 1 and 1000",
	"workflow_run_attempt_range":                 "attempt must be between 0 and max_attempts",
	"workflow_run_idempotency_key_length":        "idempotency_key must be 1 to 512 characters",
	"workflow_run_lease_held":                    "a leased run must have leased_by and lease_until",
	"workflow_run_retry_policy_valid":            "retry delays must be positive and the maximum delay at least the base delay",
	"workflow_registry_name_format":              "workflow name must be a versioned type such as content.thumbnail.v1",
	"workflow_registry_runtime_valid":            "runtime must be go or python",
	"workflow_event_type_valid":                  "event type must be one of created, leased, started, heartbeat, succeeded, failed, retried, cancelled, waiting, woken, signal_received",
	"workflow_run_source_bounded":                "a run's source is a Kubernetes object: namespace at most 63, name at most 253, uid at most 128 characters",
	"workflow_run_pending_has_attempt_left":      "a pending run must have an attempt left (attempt below max_attempts)",
	"workflow_run_reserved_key":                  "idempotency keys starting with k8s: or k8s-uid: are reserved for runs mirrored from a WorkflowRun of that namespace or UID",
	"workflow_run_result_size":                   "a run's result must be at most 1 MiB of JSON",
	"workflow_run_wait_kind_valid":               "wait_kind must be sleep, signal, child, dag or limit",
	"workflow_run_concurrency_key_length":        "concurrency_key must be 1 to 255 characters",
	"workflow_registry_flow_limits_valid":        "flow limits: maxLeased and maxLeasedPerKey 1 to 100000, a rate 1 to 1000000 starts per 1ms to 24h",
	"workflow_registry_rate_complete":            "a rate limit needs both a count and a period, and a rate per key needs a rate limit",
	"workflow_registry_flow_limits_need_runtime": "flow limits apply to types that workers run, not to a workflow with steps",
	"workflow_run_dag_key":                       "idempotency keys of the form dag:<run id>:<step> are reserved for that step of that DAG run",
	"workflow_registry_runtime_or_steps":         "a registry entry has either a runtime or a definition (steps), not both and not neither",
	"workflow_run_wait_not_leased":               "a leased run cannot be parked",
	"workflow_run_parent_step_set":               "a child run names both its parent and the parent's step",
	"workflow_step_name_format":                  "step name must be 1 to 128 characters of letters, digits and . _ : -",
	"workflow_step_position_range":               "a run has at most 1000 steps (positions 0 to 999)",
	"workflow_step_kind_valid":                   "step kind must be step, sleep, signal or child",
	"workflow_step_outcome_valid":                "step outcome must be ok, error or timeout",
	"workflow_step_finished":                     "a step has an outcome exactly when it finished",
	"workflow_step_output_size":                  "step output must be at most 1 MiB of JSON",
	"workflow_step_error_length":                 "step error must be at most 8192 characters",
	"workflow_signal_name_format":                "signal name must be 1 to 128 characters of letters, digits and . _ : -",
	"workflow_signal_payload_size":               "signal payload must be at most 256 KiB of JSON",
	"workflow_signal_idempotency_key_length":     "a signal's idempotency key must be 1 to 512 characters",
	"workflow_run_traceparent_format":            traceParentRule,
	"workflow_run_priority_range":                "priority must be between 0 and 1000000",
	"workflow_registry_definition_size":          "a definition must be at most 256 KiB of JSON",
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
		case "22P02", "22023", "22007", "22008", "22P05", "54000", "22021":
			// invalid text, parameter, datetime, untranslatable character,
			// a limit reached, invalid byte sequence
			return fmt.Errorf("%s: %w: %s", op, ErrInvalid, pgErr.Message)
		case "54001": // statement too complex: a JSON value nested past the server's stack
			return fmt.Errorf("%s: %w: a JSON value nests too deeply for the database to read (%s); at most %d levels are stored",
				op, ErrInvalid, pgErr.Message, MaxJSONDepth)
		case "42501": // insufficient_privilege: another namespace, or a role's limit
			return fmt.Errorf("%s: %w: %w", op, ErrForbidden, err)
		case "P0002": // no_data_found, raised for unknown runs
			return fmt.Errorf("%s: %w: %s", op, ErrNotFound, pgErr.Message)
		case "55000": // object_not_in_prerequisite_state, raised for finished runs
			return fmt.Errorf("%s: %w: %s", op, ErrRunFinished, pgErr.Message)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}
