package v1alpha1

// Condition types and reasons the operator sets in the status of
// WorkflowRuns and WorkflowRegistries (metav1.Condition's Type and Reason).
// Read a condition with meta.FindStatusCondition or
// meta.IsStatusConditionTrue, e.g.
//
//	meta.IsStatusConditionTrue(wfr.Status.Conditions, v1alpha1.ConditionFinished)
//
// Each condition lists the reasons it is set with, by status.

// Condition types of a WorkflowRun.
const (
	// ConditionAccepted: whether the run is recorded in the inbox.
	//   - True, ReasonMirrored: recorded as the run in status.runID.
	//   - True, ReasonDeduplicated: the object shows the run another
	//     WorkflowRun of its namespace recorded with the same idempotency
	//     key, type and payload; it records none of its own.
	//   - False, ReasonInvalidInput, ReasonIdempotencyConflict: no run was
	//     recorded, for good; the operator waits for a change of the spec.
	//   - False, ReasonAwaitingRegistration: the run is recorded once the
	//     WorkflowRegistry declaring its type with steps is registered.
	ConditionAccepted = "Accepted"
	// ConditionFinished: whether the run reached a final phase.
	//   - False, ReasonPending, ReasonRetrying, ReasonRunning or
	//     ReasonWaiting: the run's phase (for a DAG run, ReasonRunning
	//     until it ends).
	//   - True, ReasonSucceeded, ReasonFailed or ReasonCancelled: how it
	//     ended (the same strings as PhaseSucceeded, PhaseFailed and
	//     PhaseCancelled); for a cancelled run the message says how it was
	//     cancelled.
	ConditionFinished = "Finished"
	// ConditionBlocked: whether the run cannot be claimed because its type
	// is disabled in the registry.
	//   - True, ReasonTypeDisabled: the run stays pending until the type is
	//     enabled.
	//   - False, ReasonTypeEnabled: the type was enabled again (set only
	//     once the run had been blocked).
	ConditionBlocked = "Blocked"
	// ConditionResultTruncated: True, ReasonTooLarge, when the run's result
	// is larger than status.result holds (16 KiB); the inbox keeps all of
	// it. Absent otherwise.
	ConditionResultTruncated = "ResultTruncated"
	// ConditionSignalsSent: whether every entry of spec.signals was sent to
	// the run.
	//   - True, ReasonSent: all were sent.
	//   - False, ReasonRunFinished or ReasonInvalid: an entry was refused
	//     (the run had finished, or the inbox refused its name or payload);
	//     the message says which and why.
	ConditionSignalsSent = "SignalsSent"
	// ConditionUnserved: while the run waits for a worker (pending, not
	// parked, not a DAG run), whether nothing declared serves its type.
	// Workers started outside the operator are not declared, so True does
	// not mean that no worker can claim the run. Absent otherwise.
	//   - True, ReasonNoWorker: no WorkflowRegistry declares the type and no
	//     worker pool covers it.
	//   - True, ReasonWorkerPoolNotReady: the worker pools covering the type
	//     cannot be scaled.
	//   - False, ReasonWorkerPool: a worker pool covers the type.
	//   - False, ReasonRegistered: a registry entry declares the type, but
	//     no worker pool covers it.
	ConditionUnserved = "Unserved"
	// ConditionCancelRequested: what spec.cancel did; set only when it is
	// true.
	//   - True, ReasonCancelled: the run is cancelled.
	//   - Unknown, ReasonCancelling: the run is being cancelled.
	//   - False, ReasonRunFinished: the run had finished before; nothing was
	//     cancelled.
	ConditionCancelRequested = "CancelRequested"
)

// Condition types of a WorkflowRegistry. ConditionReady is also the
// condition of each worker pool in status.workers.
const (
	// ConditionReady, on a WorkflowRegistry: whether every declared
	// workflow is registered.
	//   - True, ReasonRegistered.
	//   - False, ReasonInvalidDefinition: the database refused the steps of
	//     a workflow (ConditionDefinitionsValid says why).
	//   - False, ReasonConflict: a workflow is already owned by another
	//     registry.
	//
	// On a worker pool (status.workers[].conditions): whether the pool's
	// scale target exists and is scaled.
	//   - True, ReasonScaling: the message gives the replicas and the
	//     desired count.
	//   - False, ReasonTargetNotFound, ReasonNotScalable: the target does
	//     not exist, or cannot be read or scaled.
	//   - False, ReasonHPAConflict: a HorizontalPodAutoscaler scales the
	//     same target (Unknown when it could not be checked).
	//   - False, ReasonPrefixConflict: the pool's type prefixes overlap
	//     prefixes owned by another registry; the target is left alone.
	ConditionReady = "Ready"
	// ConditionDefinitionsValid: whether the database accepted the steps of
	// every workflow declared with steps; set only on registries that
	// declare steps.
	//   - True, ReasonAccepted.
	//   - False, ReasonInvalidDefinition: the message lists the refusals.
	ConditionDefinitionsValid = "DefinitionsValid"
)

// ConditionDeleting is set on a WorkflowRun or a WorkflowRegistry being
// deleted: True, ReasonInboxUnreachable, while the inbox cannot be told of the
// deletion (the message carries the error). The deletion is retried until
// the deletion grace period is over, then the finalizer is removed anyway.
const ConditionDeleting = "Deleting"

// Reasons of the conditions of a WorkflowRun.
const (
	// ReasonMirrored: the object's run is recorded in the inbox
	// (ConditionAccepted).
	ReasonMirrored = "Mirrored"
	// ReasonDeduplicated: the object shares the run another WorkflowRun of
	// its namespace recorded with the same idempotency key
	// (ConditionAccepted).
	ReasonDeduplicated = "Deduplicated"
	// ReasonInvalidInput: the inbox refused the run's input for good
	// (ConditionAccepted).
	ReasonInvalidInput = "InvalidInput"
	// ReasonTypeNotShared: spec.typeNamespace names a namespace that does
	// not share the run's type with the run's namespace; nothing is
	// recorded (ConditionAccepted).
	ReasonTypeNotShared = "TypeNotShared"
	// ReasonIdempotencyConflict: the run's idempotency key is held by a run
	// of another namespace, or with another type or payload
	// (ConditionAccepted).
	ReasonIdempotencyConflict = "IdempotencyConflict"
	// ReasonAwaitingRegistration: the run's type is declared with steps by
	// a WorkflowRegistry that is not registered yet (ConditionAccepted).
	ReasonAwaitingRegistration = "AwaitingRegistration"

	// ReasonPending: the run waits for a worker, no attempt failed yet
	// (ConditionFinished).
	ReasonPending = "Pending"
	// ReasonRetrying: an attempt failed and the next has not started
	// (ConditionFinished).
	ReasonRetrying = "Retrying"
	// ReasonRunning: a worker runs an attempt, or a DAG run is under way
	// (ConditionFinished).
	ReasonRunning = "Running"
	// ReasonWaiting: the run is parked at a durable sleep, signal wait or
	// child wait (ConditionFinished).
	ReasonWaiting = "Waiting"
	// ReasonSucceeded: the run succeeded (ConditionFinished).
	ReasonSucceeded = "Succeeded"
	// ReasonFailed: the run failed for good (ConditionFinished).
	ReasonFailed = "Failed"
	// ReasonCancelled: the run is cancelled (ConditionFinished,
	// ConditionCancelRequested).
	ReasonCancelled = "Cancelled"

	// ReasonTypeDisabled: the run's type is disabled (ConditionBlocked).
	ReasonTypeDisabled = "TypeDisabled"
	// ReasonTypeEnabled: the run's type may be claimed again
	// (ConditionBlocked).
	ReasonTypeEnabled = "TypeEnabled"

	// ReasonTooLarge: the result is larger than status.result holds
	// (ConditionResultTruncated).
	ReasonTooLarge = "TooLarge"

	// ReasonSent: every entry of spec.signals was sent
	// (ConditionSignalsSent).
	ReasonSent = "Sent"
	// ReasonRunFinished: the run had already finished: a signal was not
	// sent (ConditionSignalsSent), or spec.cancel cancelled nothing
	// (ConditionCancelRequested).
	ReasonRunFinished = "RunFinished"
	// ReasonInvalid: the inbox refused a signal of spec.signals
	// (ConditionSignalsSent).
	ReasonInvalid = "Invalid"

	// ReasonNoWorker: no WorkflowRegistry declares the run's type and no
	// worker pool covers it (ConditionUnserved).
	ReasonNoWorker = "NoWorker"
	// ReasonWorkerPoolNotReady: the worker pools covering the run's type
	// cannot be scaled (ConditionUnserved).
	ReasonWorkerPoolNotReady = "WorkerPoolNotReady"
	// ReasonWorkerPool: a worker pool covers the run's type
	// (ConditionUnserved).
	ReasonWorkerPool = "WorkerPool"

	// ReasonCancelling: spec.cancel is set and the run is being cancelled
	// (ConditionCancelRequested).
	ReasonCancelling = "Cancelling"
)

// Reasons of the conditions of a WorkflowRegistry and its worker pools.
const (
	// ReasonRegistered: every declared workflow is registered (ConditionReady
	// of a registry); on a WorkflowRun, the run's type is registered but no
	// worker pool covers it (ConditionUnserved).
	ReasonRegistered = "Registered"
	// ReasonConflict: a declared workflow is owned by another registry
	// (ConditionReady).
	ReasonConflict = "Conflict"
	// ReasonInvalidDefinition: the database refused a workflow's steps (a
	// cycle, an unknown dependency, a step of a type with steps); the
	// workflow was not registered (ConditionReady, ConditionDefinitionsValid).
	ReasonInvalidDefinition = "InvalidDefinition"
	// ReasonAccepted: the database accepted the steps of every workflow
	// (ConditionDefinitionsValid).
	ReasonAccepted = "Accepted"

	// ReasonScaling: the pool's target is scaled by the operator
	// (ConditionReady of a worker pool).
	ReasonScaling = "Scaling"
	// ReasonTargetNotFound: the pool's scale target does not exist
	// (ConditionReady of a worker pool).
	ReasonTargetNotFound = "TargetNotFound"
	// ReasonNotScalable: the pool's scale target cannot be read or scaled
	// (ConditionReady of a worker pool).
	ReasonNotScalable = "NotScalable"
	// ReasonHPAConflict: a HorizontalPodAutoscaler scales the same target,
	// or could not be checked for (ConditionReady of a worker pool).
	ReasonHPAConflict = "HPAConflict"
	// ReasonPrefixConflict: the pool's type prefixes overlap prefixes owned
	// by another registry (ConditionReady of a worker pool).
	ReasonPrefixConflict = "PrefixConflict"
)

// ReasonInboxUnreachable says the inbox failed while the deletion was handled;
// the deletion is retried (ConditionDeleting).
const ReasonInboxUnreachable = "InboxUnreachable"

// Conditions of a WorkflowSchedule. ConditionAccepted, on a
// WorkflowSchedule: whether the database holds the schedule as the spec
// says.
//   - True, ReasonMirrored: it does; it fires as status.nextScheduleTime
//     says (unless suspended).
//   - False, ReasonInvalidSchedule: the database refused the spec (an
//     unknown time zone, an expression that never fires); the message is
//     the database's. A schedule accepted before keeps firing as it was
//     last accepted.
const (
	// ReasonInvalidSchedule: the database refused the schedule
	// (ConditionAccepted of a WorkflowSchedule).
	ReasonInvalidSchedule = "InvalidSchedule"
)

// LabelSchedule is the label on each WorkflowRun a WorkflowSchedule made:
// the schedule's name.
const LabelSchedule = "workflow.simpleworkflow.dev/schedule"

// Event reasons that are not condition reasons: what the controllers tell
// in Events (kubectl describe, kubectl get events).
const (
	// ReasonStarted says a worker started an attempt of the run (Event).
	ReasonStarted = "Started"
	// ReasonReleased says a worker shutting down handed the run back; it is
	// pending again and the attempt does not count (Event).
	ReasonReleased = "Released"
	// ReasonCancelledOnDelete says the run was cancelled because its WorkflowRun
	// was deleted (Event).
	ReasonCancelledOnDelete = "CancelledOnDelete"
	// ReasonWoken says a waiting run went on: its sleep ended, its wait timed
	// out, its signal arrived or a child run ended (Event).
	ReasonWoken = "Woken"
	// ReasonSignalReceived says the run received a signal (Event).
	ReasonSignalReceived = "SignalReceived"
	// ReasonSignalRejected says an entry of spec.signals was refused by the
	// inbox; the message says why (Event).
	ReasonSignalRejected = "SignalRejected"
	// ReasonRunIDMismatch says status.runID named a run that was not mirrored
	// from this object; it was not used.
	ReasonRunIDMismatch = "RunIDMismatch"
	// ReasonCancelIgnored says spec.cancel was set on a run that had already
	// finished (Event).
	ReasonCancelIgnored = "CancelIgnored"
	// ReasonRetried says a raise of spec.retries made the run pending again from
	// where it stopped (Event).
	ReasonRetried = "Retried"
	// ReasonRetryRefused says a raise of spec.retries could not retry the run;
	// the message says why (Event).
	ReasonRetryRefused = "RetryRefused"
	// ReasonStepStarted says a step of a DAG run started (Event).
	ReasonStepStarted = "StepStarted"
	// ReasonStepRetrying says a step of a DAG run failed an attempt and will be
	// retried (Event).
	ReasonStepRetrying = "StepRetrying"
	// ReasonStepWaiting says a step of a DAG run waits (a sleep, a signal, its
	// children) (Event).
	ReasonStepWaiting = "StepWaiting"
	// ReasonStepSucceeded says a step of a DAG run succeeded (Event).
	ReasonStepSucceeded = "StepSucceeded"
	// ReasonStepFailed says a step of a DAG run failed for good (Event).
	ReasonStepFailed = "StepFailed"
	// ReasonStepCancelled says a step of a DAG run was cancelled (Event).
	ReasonStepCancelled = "StepCancelled"
	// ReasonStepsSkipped says steps of a DAG run were skipped (their condition
	// did not hold, or a dependency failed) (Event).
	ReasonStepsSkipped = "StepsSkipped"
	// ReasonScaled says the autoscaler changed a worker pool's replicas (Event).
	ReasonScaled = "Scaled"
	// ReasonDeletedWithoutInbox says the inbox stayed unreachable for the
	// deletion grace period; the finalizer was removed anyway (Event).
	ReasonDeletedWithoutInbox = "DeletedWithoutInbox"
	// ReasonScheduled says a WorkflowSchedule made a WorkflowRun for a tick
	// (Event).
	ReasonScheduled = "Scheduled"
)
