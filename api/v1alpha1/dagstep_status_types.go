package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DAGStepPhase summarises where one step of a DAG run is.
// +kubebuilder:validation:Enum=Pending;Running;Retrying;Waiting;Succeeded;Failed;Cancelled;Skipped
type DAGStepPhase string

// The phases of a step of a DAG run.
const (
	// StepPending: waiting for the steps it depends on, or for a worker.
	StepPending DAGStepPhase = "Pending"
	// StepRunning: leased by a worker.
	StepRunning DAGStepPhase = "Running"
	// StepRetrying: an attempt failed; waiting for the next one.
	StepRetrying DAGStepPhase = "Retrying"
	// StepWaiting: the step's run is parked (a durable sleep or wait).
	StepWaiting DAGStepPhase = "Waiting"
	// StepSucceeded: the step's run succeeded.
	StepSucceeded DAGStepPhase = "Succeeded"
	// StepFailed: the step's run failed for good.
	StepFailed DAGStepPhase = "Failed"
	// StepCancelled: the step's run was cancelled.
	StepCancelled DAGStepPhase = "Cancelled"
	// StepSkipped: the workflow ended before the step started.
	StepSkipped DAGStepPhase = "Skipped"
)

// Finished reports whether p is a final phase.
func (p DAGStepPhase) Finished() bool {
	switch p {
	case StepSucceeded, StepFailed, StepCancelled, StepSkipped:
		return true
	}
	return false
}

// DAGStepStatus is the state of one step of a DAG run.
type DAGStepStatus struct {
	// Name of the step in the workflow's definition.
	Name string `json:"name"`
	// Type is the workflow type the step runs.
	Type string `json:"type"`
	// Phase is Pending, Running, Retrying, Waiting, Succeeded, Failed,
	// Cancelled or Skipped.
	Phase DAGStepPhase `json:"phase"`
	// Attempts is "attempt/maxAttempts" of the step's run, once started.
	// +optional
	Attempts string `json:"attempts,omitempty"`
	// RunID is the id of the step's run in the inbox, once started.
	// +optional
	RunID string `json:"runID,omitempty"`
	// StartedAt is when the step's first attempt started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the step's run finished.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Error is the last error of the step's run, truncated to 256 bytes.
	// +optional
	Error string `json:"error,omitempty"`
	// Elements is "done/total" of a step that fans out (forEach): how many
	// of its runs, one per element, have ended. RunID and Error are then
	// those of the element that failed it, if one did.
	// +optional
	Elements string `json:"elements,omitempty"`
}
