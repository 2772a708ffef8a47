package engine

import (
	"context"
	"encoding/json"
	"time"
)

// MaxDAGSteps bounds the steps of one DAG workflow.
const MaxDAGSteps = 100

// DAGDefinition is a workflow type defined as a graph of steps, stored in
// workflow_registry.definition. A run of such a type is orchestrated by the
// database: each step is a child run of the step's type, started once every
// step it depends on succeeded. The database validates it (unique names,
// known dependencies, no cycle, at most MaxDAGSteps steps) and refuses a bad
// one with ErrInvalid and a message naming the problem.
type DAGDefinition struct {
	Steps []DAGStepDefinition `json:"steps"`
}

// DAGStepDefinition is one step of a DAGDefinition.
type DAGStepDefinition struct {
	// Name is unique within the definition: 1 to 63 letters, digits, '.',
	// '_' or '-', starting with a letter or digit.
	Name string `json:"name"`
	// Type is the workflow type the step runs, such as billing.charge.v1.
	Type string `json:"type"`
	// DependsOn names the steps that must succeed before this one starts.
	DependsOn []string `json:"dependsOn,omitempty"`
	// Payload is merged over the workflow's payload's top-level keys.
	Payload json.RawMessage `json:"payload,omitempty"`
	// MaxAttempts of the step's run (1 to 1000); the inbox default when 0.
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// RetryBaseDelayMs and RetryMaxDelayMs are the step run's backoff.
	RetryBaseDelayMs int64 `json:"retryBaseDelayMs,omitempty"`
	RetryMaxDelayMs  int64 `json:"retryMaxDelayMs,omitempty"`
	// Final marks the step that runs after all the others, whatever their
	// outcome, with it in its input under "outcome" (at most one; it has
	// no DependsOn and no step depends on it).
	Final bool `json:"final,omitempty"`
	// When is a condition, an SQL/JSON path predicate over {"payload": the
	// workflow's payload, "steps": {dependency: {"status", "result"}}}: the
	// step runs only when it holds, and is skipped otherwise (at most 1,024
	// characters; a final step takes none).
	When string `json:"when,omitempty"`
	// ForEach fans the step out: an SQL/JSON path, over the same input as
	// When, selecting a list of at most 1,000 elements; one run per element
	// (named <name>[<index>], its payload the step's plus "item" and
	// "index"), and the step's result the list of theirs in index order.
	ForEach string `json:"forEach,omitempty"`
	// ForEachFailure is what an element that fails for good does: "failStep"
	// (the default) fails the step, "continue" leaves null in its place.
	ForEachFailure string `json:"forEachFailure,omitempty"`
	// TypeNamespace runs Type from another namespace's registry, which
	// must share it with the run's namespace (its sharedWith lists it);
	// empty runs it from the workflow's own namespace. A step of a type
	// not shared fails the workflow (reason type_not_shared) before it
	// starts.
	TypeNamespace string `json:"typeNamespace,omitempty"`
}

// StepSkipped is the Status of a DAG step whose condition (When) did not
// hold: it never ran and counts as done.
const StepSkipped = "skipped"

// DAGStep is the state of one step of a DAG run, in definition order.
type DAGStep struct {
	Name      string
	Type      string
	DependsOn []string
	// RunID is empty until the step has started.
	RunID string
	// Status is the step run's status; empty when not started; StepSkipped
	// when its condition skipped it.
	Status      string
	Attempt     int
	MaxAttempts int
	StartedAt   *time.Time
	FinishedAt  *time.Time
	// Error is the step run's last error, at most 1,024 characters.
	Error string
	// WaitKind is set while the step's run is parked.
	WaitKind string
	// WorkflowStatus is the status of the DAG run itself.
	WorkflowStatus string
	// Final marks the step that runs after all the others.
	Final bool
	// Elements and ElementsDone count a fanned-out step's runs (nil for
	// other steps).
	Elements, ElementsDone *int
}

// DAGSteps returns the steps of a DAG run with the state of each, in the
// order of its definition; none when the run is not a DAG run.
func (e *Engine) DAGSteps(ctx context.Context, runID string) ([]DAGStep, error) {
	rows, err := e.q.DAGSteps(ctx, runID)
	if err != nil {
		return nil, translate("steps of run "+runID, err)
	}
	out := make([]DAGStep, len(rows))
	for i, row := range rows {
		out[i] = DAGStep{
			Name: deref(row.Name), Type: deref(row.Type), DependsOn: row.DependsOn, RunID: deref(row.RunID),
			Status: deref(row.Status), Attempt: int(deref(row.Attempt)), MaxAttempts: int(deref(row.MaxAttempts)),
			StartedAt: row.StartedAt, FinishedAt: row.FinishedAt, Error: deref(row.LastError),
			WaitKind: deref(row.WaitKind), WorkflowStatus: deref(row.WorkflowStatus), Final: deref(row.Final),
			Elements: intPtr(row.Elements), ElementsDone: intPtr(row.ElementsDone),
		}
	}
	return out, nil
}
