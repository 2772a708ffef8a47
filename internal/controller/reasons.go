package controller

// Finalizer keeps an object until the inbox has been told of its deletion.
const Finalizer = "workflow.simpleworkflow.dev/finalizer"

// Condition types of WorkflowRun.
const (
	// ConditionAccepted: the run is recorded in the inbox.
	ConditionAccepted = "Accepted"
	// ConditionFinished: the run reached a final phase; the reason says which.
	ConditionFinished = "Finished"
	// ConditionBlocked: the run cannot be claimed (its type is disabled).
	ConditionBlocked = "Blocked"
	// ConditionResultTruncated: the result is too large for the status.
	ConditionResultTruncated = "ResultTruncated"
	// ConditionSignalsSent: every entry of spec.signals was sent to the run
	// (false once one was refused; the message says which and why).
	ConditionSignalsSent = "SignalsSent"
	// ConditionUnserved: while the run waits for a worker, whether nothing
	// declared serves its type (true: no WorkflowRegistry declares it and no
	// worker pool covers it, or the pools covering it cannot be scaled).
	ConditionUnserved = "Unserved"
	// ConditionCancelRequested: what spec.cancel did (true: the run is
	// cancelled; false: it had finished before, nothing was cancelled).
	ConditionCancelRequested = "CancelRequested"
)

// Condition types of WorkflowRegistry.
const (
	// ConditionReady: every declared workflow is registered.
	ConditionReady = "Ready"
	// ConditionDefinitionsValid: the database accepted the steps of every
	// workflow with steps (set only on registries that declare steps).
	ConditionDefinitionsValid = "DefinitionsValid"
)

// Condition reasons and Event reasons.
const (
	ReasonMirrored          = "Mirrored"
	ReasonInvalid           = "Invalid"
	ReasonRunning           = "Running"
	ReasonPending           = "Pending"
	ReasonSucceeded         = "Succeeded"
	ReasonFailed            = "Failed"
	ReasonCancelled         = "Cancelled"
	ReasonTypeDisabled      = "TypeDisabled"
	ReasonTypeEnabled       = "TypeEnabled"
	ReasonTooLarge          = "TooLarge"
	ReasonAccepted          = "Accepted"
	ReasonStarted           = "Started"
	ReasonRetrying          = "Retrying"
	ReasonReleased          = "Released"
	ReasonRegistered        = "Registered"
	ReasonConflict          = "Conflict"
	ReasonCancelledOnDelete = "CancelledOnDelete"
	ReasonWaiting           = "Waiting"
	ReasonWoken             = "Woken"
	ReasonSignalReceived    = "SignalReceived"
	ReasonSignalRejected    = "SignalRejected"
	ReasonSent              = "Sent"
	ReasonRunFinished       = "RunFinished"
	// ReasonInvalidInput: the inbox refused the run's input for good.
	ReasonInvalidInput = "InvalidInput"
	// ReasonIdempotencyConflict: the run's idempotency key is held by a run
	// of another namespace, or with another type or payload.
	ReasonIdempotencyConflict = "IdempotencyConflict"
	// ReasonRunIDMismatch: status.runID named a run that was not mirrored
	// from this object; it was not used.
	ReasonRunIDMismatch = "RunIDMismatch"
	// ReasonAwaitingRegistration: the run's type is declared with steps by
	// a WorkflowRegistry that is not mirrored yet; the run is recorded once
	// it is.
	ReasonAwaitingRegistration = "AwaitingRegistration"
	// ReasonInvalidDefinition: the database refused a workflow's steps
	// (a cycle, an unknown dependency, a step of a type with steps); the
	// workflow was not registered.
	ReasonInvalidDefinition = "InvalidDefinition"
	// ReasonDeduplicated: the object shares the run another WorkflowRun of
	// its namespace recorded with the same idempotency key.
	ReasonDeduplicated = "Deduplicated"
	// ReasonNoWorker: no WorkflowRegistry declares the run's type and no
	// worker pool covers it (Unserved).
	ReasonNoWorker = "NoWorker"
	// ReasonWorkerPoolNotReady: the worker pools covering the run's type
	// cannot be scaled (Unserved).
	ReasonWorkerPoolNotReady = "WorkerPoolNotReady"
	// ReasonWorkerPool: a worker pool covers the run's type (not Unserved).
	ReasonWorkerPool = "WorkerPool"
	// ReasonCancelling: spec.cancel is set and the run is being cancelled.
	ReasonCancelling = "Cancelling"
	// ReasonCancelIgnored: spec.cancel was set on a run that had already
	// finished.
	ReasonCancelIgnored = "CancelIgnored"
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
