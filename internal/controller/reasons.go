package controller

import workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"

// Finalizer keeps an object until the inbox has been told of its deletion.
const Finalizer = "workflow.simpleworkflow.dev/finalizer"

// Condition types of WorkflowRun.
const (
	// ConditionAccepted: the run is recorded in the inbox.
	ConditionAccepted = workflowv1alpha1.ConditionAccepted
	// ConditionFinished: the run reached a final phase; the reason says which.
	ConditionFinished = workflowv1alpha1.ConditionFinished
	// ConditionBlocked: the run cannot be claimed (its type is disabled).
	ConditionBlocked = workflowv1alpha1.ConditionBlocked
	// ConditionResultTruncated: the result is too large for the status.
	ConditionResultTruncated = workflowv1alpha1.ConditionResultTruncated
	// ConditionSignalsSent: every entry of spec.signals was sent to the run
	// (false once one was refused; the message says which and why).
	ConditionSignalsSent = workflowv1alpha1.ConditionSignalsSent
	// ConditionUnserved: while the run waits for a worker, whether nothing
	// declared serves its type (true: no WorkflowRegistry declares it and no
	// worker pool covers it, or the pools covering it cannot be scaled).
	ConditionUnserved = workflowv1alpha1.ConditionUnserved
	// ConditionCancelRequested: what spec.cancel did (true: the run is
	// cancelled; false: it had finished before, nothing was cancelled).
	ConditionCancelRequested = workflowv1alpha1.ConditionCancelRequested
)

// Condition types of WorkflowRegistry.
const (
	// ConditionReady: every declared workflow is registered.
	ConditionReady = workflowv1alpha1.ConditionReady
	// ConditionDefinitionsValid: the database accepted the steps of every
	// workflow with steps (set only on registries that declare steps).
	ConditionDefinitionsValid = workflowv1alpha1.ConditionDefinitionsValid
)

// Condition reasons and Event reasons.
const (
	ReasonMirrored          = workflowv1alpha1.ReasonMirrored
	ReasonInvalid           = workflowv1alpha1.ReasonInvalid
	ReasonRunning           = workflowv1alpha1.ReasonRunning
	ReasonPending           = workflowv1alpha1.ReasonPending
	ReasonSucceeded         = workflowv1alpha1.ReasonSucceeded
	ReasonFailed            = workflowv1alpha1.ReasonFailed
	ReasonCancelled         = workflowv1alpha1.ReasonCancelled
	ReasonTypeDisabled      = workflowv1alpha1.ReasonTypeDisabled
	ReasonTypeEnabled       = workflowv1alpha1.ReasonTypeEnabled
	ReasonTooLarge          = workflowv1alpha1.ReasonTooLarge
	ReasonAccepted          = workflowv1alpha1.ReasonAccepted
	ReasonStarted           = "Started"
	ReasonRetrying          = workflowv1alpha1.ReasonRetrying
	ReasonReleased          = "Released"
	ReasonRegistered        = workflowv1alpha1.ReasonRegistered
	ReasonConflict          = workflowv1alpha1.ReasonConflict
	ReasonCancelledOnDelete = "CancelledOnDelete"
	ReasonWaiting           = workflowv1alpha1.ReasonWaiting
	ReasonWoken             = "Woken"
	ReasonSignalReceived    = "SignalReceived"
	ReasonSignalRejected    = "SignalRejected"
	ReasonSent              = workflowv1alpha1.ReasonSent
	ReasonRunFinished       = workflowv1alpha1.ReasonRunFinished
	// ReasonInvalidInput: the inbox refused the run's input for good.
	ReasonInvalidInput = workflowv1alpha1.ReasonInvalidInput
	// ReasonIdempotencyConflict: the run's idempotency key is held by a run
	// of another namespace, or with another type or payload.
	ReasonIdempotencyConflict = workflowv1alpha1.ReasonIdempotencyConflict
	// ReasonRunIDMismatch: status.runID named a run that was not mirrored
	// from this object; it was not used.
	ReasonRunIDMismatch = "RunIDMismatch"
	// ReasonAwaitingRegistration: the run's type is declared with steps by
	// a WorkflowRegistry that is not mirrored yet; the run is recorded once
	// it is.
	ReasonAwaitingRegistration = workflowv1alpha1.ReasonAwaitingRegistration
	// ReasonInvalidDefinition: the database refused a workflow's steps
	// (a cycle, an unknown dependency, a step of a type with steps); the
	// workflow was not registered.
	ReasonInvalidDefinition = workflowv1alpha1.ReasonInvalidDefinition
	// ReasonDeduplicated: the object shares the run another WorkflowRun of
	// its namespace recorded with the same idempotency key.
	ReasonDeduplicated = workflowv1alpha1.ReasonDeduplicated
	// ReasonNoWorker: no WorkflowRegistry declares the run's type and no
	// worker pool covers it (Unserved).
	ReasonNoWorker = workflowv1alpha1.ReasonNoWorker
	// ReasonWorkerPoolNotReady: the worker pools covering the run's type
	// cannot be scaled (Unserved).
	ReasonWorkerPoolNotReady = workflowv1alpha1.ReasonWorkerPoolNotReady
	// ReasonWorkerPool: a worker pool covers the run's type (not Unserved).
	ReasonWorkerPool = workflowv1alpha1.ReasonWorkerPool
	// ReasonCancelling: spec.cancel is set and the run is being cancelled.
	ReasonCancelling = workflowv1alpha1.ReasonCancelling
	// ReasonCancelIgnored: spec.cancel was set on a run that had already
	// finished.
	ReasonCancelIgnored = "CancelIgnored"
	// ReasonRetried: a raise of spec.retries made the run pending again
	// from where it stopped (an Event).
	ReasonRetried = "Retried"
	// ReasonRetryRefused: a raise of spec.retries could not retry the run
	// (an Event with the reason).
	ReasonRetryRefused = "RetryRefused"
)

// Event reasons of the steps of a DAG run, derived from the change of
// status.dagSteps between two looks at the run.
const (
	ReasonStepStarted   = "StepStarted"
	ReasonStepRetrying  = "StepRetrying"
	ReasonStepWaiting   = "StepWaiting"
	ReasonStepSucceeded = "StepSucceeded"
	ReasonStepFailed    = "StepFailed"
	ReasonStepCancelled = "StepCancelled"
	ReasonStepsSkipped  = "StepsSkipped"
)

// Status limits.
const (
	// MaxResultBytes is the largest result copied into status.result.
	MaxResultBytes = 16 * 1024
	// MaxLastErrorBytes is the length status.lastError is truncated to.
	MaxLastErrorBytes = 1024
	// MaxChildrenInStatus is how many child runs status.children lists.
	MaxChildrenInStatus = 20
	// MaxStepErrorBytes is the length a step's error in status.dagSteps is
	// truncated to (a DAG has up to 100 steps).
	MaxStepErrorBytes = 256
)
