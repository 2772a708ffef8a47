package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkflowRunSpec is the intent: which workflow type to run with which
// payload. It cannot change after creation, except cancel (false to true).
// +kubebuilder:validation:XValidation:rule="has(self.payload) == has(oldSelf.payload) && (!has(self.payload) || self.payload == oldSelf.payload)",message="spec.payload is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.priority) == has(oldSelf.priority) && (!has(self.priority) || self.priority == oldSelf.priority)",message="spec.priority is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.idempotencyKey) == has(oldSelf.idempotencyKey) && (!has(self.idempotencyKey) || self.idempotencyKey == oldSelf.idempotencyKey)",message="spec.idempotencyKey is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.maxAttempts) == has(oldSelf.maxAttempts) && (!has(self.maxAttempts) || self.maxAttempts == oldSelf.maxAttempts)",message="spec.maxAttempts is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.runAt) == has(oldSelf.runAt) && (!has(self.runAt) || self.runAt == oldSelf.runAt)",message="spec.runAt is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.retryPolicy) == has(oldSelf.retryPolicy) && (!has(self.retryPolicy) || self.retryPolicy == oldSelf.retryPolicy)",message="spec.retryPolicy is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.ttlSecondsAfterFinished) == has(oldSelf.ttlSecondsAfterFinished) && (!has(self.ttlSecondsAfterFinished) || self.ttlSecondsAfterFinished == oldSelf.ttlSecondsAfterFinished)",message="spec.ttlSecondsAfterFinished is immutable"
// +kubebuilder:validation:XValidation:rule="!(has(oldSelf.cancel) && oldSelf.cancel) || (has(self.cancel) && self.cancel)",message="spec.cancel can only change from false to true"
// +kubebuilder:validation:XValidation:rule="has(self.deadline) == has(oldSelf.deadline) && (!has(self.deadline) || self.deadline == oldSelf.deadline || (self.deadline.matches('^([0-9]+(\\\\.[0-9]*)?(ns|us|ms|s|m|h))+$') && duration(self.deadline) == duration(oldSelf.deadline)))",message="spec.deadline is immutable"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.signals) || size(oldSelf.signals) == 0 || has(self.signals)",message="spec.signals is append-only: entries cannot be removed"
// +kubebuilder:validation:XValidation:rule="(has(self.retries) ? self.retries : 0) >= (has(oldSelf.retries) ? oldSelf.retries : 0) && (has(self.retries) ? self.retries : 0) <= (has(oldSelf.retries) ? oldSelf.retries : 0) + 1",message="spec.retries can only be raised, by one at a time"
// +kubebuilder:validation:XValidation:rule="has(self.concurrencyKey) == has(oldSelf.concurrencyKey) && (!has(self.concurrencyKey) || self.concurrencyKey == oldSelf.concurrencyKey)",message="spec.concurrencyKey is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.typeNamespace) == has(oldSelf.typeNamespace) && (!has(self.typeNamespace) || self.typeNamespace == oldSelf.typeNamespace)",message="spec.typeNamespace is immutable"
type WorkflowRunSpec struct {
	// Type is the versioned workflow type, dot-separated lowercase segments
	// ending in a version, such as content.thumbnail.v1. Workers claim runs
	// by type prefix.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9_]+(\\\\.[a-z0-9_]+)*\\\\.v[0-9]+$')",message="type must be dot-separated lowercase segments of letters, digits and underscores ending in a version, such as content.thumbnail.v1"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.type is immutable"
	Type string `json:"type"`

	// Payload is the run's arguments: any JSON object. A string holding
	// \u0000 is refused by the inbox (the object then gets Accepted=False,
	// reason InvalidInput); admission cannot refuse it, CEL having no way to
	// walk the strings of a schemaless object.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:MaxProperties=256
	Payload *apiextensionsv1.JSON `json:"payload,omitempty"`

	// Priority orders runnable runs: lower runs first. Defaults to 100.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	Priority *int32 `json:"priority,omitempty"`

	// IdempotencyKey deduplicates within the namespace: two WorkflowRuns of a
	// namespace with the same key share one run. Defaults to the object's UID.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="spec.idempotencyKey must not contain the NUL character (\\u0000)"
	IdempotencyKey string `json:"idempotencyKey,omitempty"`

	// ConcurrencyKey groups runs for the flow limits of their type (its
	// registry's concurrency.maxRunsPerKey and a rate limit per key): a
	// customer, a tenant, an external account. A run held back by a limit
	// waits (phase Waiting, for "limit") and spends no attempt.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="spec.concurrencyKey must not contain the NUL character (\\u0000)"
	ConcurrencyKey string `json:"concurrencyKey,omitempty"`

	// TypeNamespace asks for a type that another namespace's
	// WorkflowRegistry shares with this one (its workflow entry lists this
	// namespace in sharedWith): the run executes among that namespace's
	// workers, and stays this namespace's own (status, cancel, signals).
	// Unset: a type of this namespace. A type not shared with this
	// namespace is refused (Accepted=False) and never reaches the other
	// namespace's workers.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="spec.typeNamespace must be a namespace name"
	TypeNamespace string `json:"typeNamespace,omitempty"`

	// MaxAttempts bounds the attempts, 1 to 1000. Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`

	// RunAt delays the first attempt until this time (RFC 3339).
	// +optional
	RunAt *metav1.Time `json:"runAt,omitempty"`

	// RetryPolicy overrides the default backoff (attempt² × 1m plus up to
	// 10 % jitter).
	// +optional
	RetryPolicy *RetryPolicy `json:"retryPolicy,omitempty"`

	// Cancel cancels the run when set to true; it cannot be set back.
	// +optional
	Cancel bool `json:"cancel,omitempty"`

	// Retries asks for a failed or cancelled run to run again from where it
	// stopped: each raise by one is one retry (status.retries counts those
	// done). A durable run keeps its journal; a DAG keeps the steps that
	// succeeded and runs the others. It can be raised only while the run
	// is Failed or Cancelled, never lowered, and not on a run cancelled
	// through spec.cancel.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Retries int32 `json:"retries,omitempty"`

	// TTLSecondsAfterFinished deletes this object that many seconds after the
	// run finished. The inbox row and its audit trail stay.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=31536000
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// Deadline fails the run ("deadline exceeded") this long after it was
	// recorded in the inbox, wherever it is by then: waiting, running or
	// parked. A duration such as 30m or 2h, from 1s to 8760h (a year).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]*)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('8760h')",message="spec.deadline must be a duration such as 30s, 5m or 2h, between 1s and 8760h"
	Deadline *metav1.Duration `json:"deadline,omitempty"`

	// Signals are sent to the run, each once, in order. The list is
	// append-only: add an entry to send a signal (kubectl patch --type=json
	// with the path /spec/signals/-); entries cannot change or be removed.
	// A signal is buffered until the run waits for its name. At most 100.
	// +optional
	// +kubebuilder:default={}
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:XValidation:rule="size(self) >= size(oldSelf) && oldSelf.all(i, s, self[i] == s)",message="spec.signals is append-only: existing entries cannot change or be removed"
	Signals []WorkflowSignal `json:"signals,omitempty"`
}

// WorkflowSignal is a signal sent to the run: a name a wait in the workflow
// matches, and an optional payload the wait returns.
type WorkflowSignal struct {
	// Name is the signal name: 1 to 128 letters, digits and . _ : -
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9._:-]+$')",message="signal name must be 1 to 128 characters of letters, digits and . _ : -"
	Name string `json:"name"`
	// Payload is any JSON value, handed to the wait that takes the signal.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Payload *apiextensionsv1.JSON `json:"payload,omitempty"`
}

// RetryPolicy is a run's own backoff: the delay before attempt n+1 is
// n² × baseDelay plus up to 10 % jitter, capped at maxDelay.
// +kubebuilder:validation:XValidation:rule="!has(self.baseDelay) || !has(self.maxDelay) || !self.baseDelay.matches('^([0-9]+(\\\\.[0-9]*)?(ns|us|ms|s|m|h))+$') || !self.maxDelay.matches('^([0-9]+(\\\\.[0-9]*)?(ns|us|ms|s|m|h))+$') || duration(self.maxDelay) >= duration(self.baseDelay)",message="retryPolicy.maxDelay must be at least retryPolicy.baseDelay"
type RetryPolicy struct {
	// BaseDelay is the delay unit, from 1s to 24h. Defaults to 1m.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]*)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="retryPolicy.baseDelay must be a duration such as 30s or 5m, between 1s and 24h"
	BaseDelay *metav1.Duration `json:"baseDelay,omitempty"`
	// MaxDelay caps the delay, from 1s to 168h (7 days).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]*)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('168h')",message="retryPolicy.maxDelay must be a duration such as 30s or 5m, between 1s and 168h"
	MaxDelay *metav1.Duration `json:"maxDelay,omitempty"`
}

// WorkflowRunPhase summarises where a run is.
// +kubebuilder:validation:Enum=Pending;Retrying;Running;Waiting;Succeeded;Failed;Cancelled
type WorkflowRunPhase string

// The phases of a WorkflowRun.
const (
	// PhasePending: waiting for a worker (no attempt failed yet).
	PhasePending WorkflowRunPhase = "Pending"
	// PhaseRetrying: an attempt failed and the next one has not started:
	// it waits for its backoff (status.nextAttemptAt says until when), or
	// for a worker once it is due.
	PhaseRetrying WorkflowRunPhase = "Retrying"
	// PhaseRunning: leased by a worker.
	PhaseRunning WorkflowRunPhase = "Running"
	// PhaseWaiting: parked at a durable sleep, a wait for a signal or a wait
	// for a child run; no worker holds it (status.waitingFor says what for).
	PhaseWaiting WorkflowRunPhase = "Waiting"
	// PhaseSucceeded: finished successfully.
	PhaseSucceeded WorkflowRunPhase = "Succeeded"
	// PhaseFailed: failed for good.
	PhaseFailed WorkflowRunPhase = "Failed"
	// PhaseCancelled: cancelled before it finished.
	PhaseCancelled WorkflowRunPhase = "Cancelled"
)

// Finished reports whether p is a final phase.
func (p WorkflowRunPhase) Finished() bool {
	return p == PhaseSucceeded || p == PhaseFailed || p == PhaseCancelled
}

// WorkflowRunStatus mirrors the run's row in the inbox.
type WorkflowRunStatus struct {
	// Phase is Pending, Retrying, Running, Waiting, Succeeded, Failed or
	// Cancelled.
	// +optional
	Phase WorkflowRunPhase `json:"phase,omitempty"`
	// RunID is the id of the run in the inbox.
	// +optional
	RunID string `json:"runID,omitempty"`
	// Attempt is the current (or last) attempt, from 1.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// Attempts is "attempt/maxAttempts", for display.
	// +optional
	Attempts string `json:"attempts,omitempty"`
	// LeasedBy is the worker running (or, once finished, last running) it.
	// +optional
	LeasedBy string `json:"leasedBy,omitempty"`
	// StartedAt is when the first attempt started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the run finished.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// NextAttemptAt is when a retry may start, while one is waiting.
	// +optional
	NextAttemptAt *metav1.Time `json:"nextAttemptAt,omitempty"`
	// LastError is the last attempt's error, truncated to 1024 bytes.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// Result is the run's JSON result, omitted when larger than 16 KiB (the
	// ResultTruncated condition says so; the inbox keeps all of it).
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	Result *apiextensionsv1.JSON `json:"result,omitempty"`
	// DeadlineAt is when the run fails with "deadline exceeded" (from
	// spec.deadline, or its parent's).
	// +optional
	DeadlineAt *metav1.Time `json:"deadlineAt,omitempty"`
	// WaitingFor says what the run waits for while its phase is Waiting.
	// +optional
	WaitingFor *WaitingFor `json:"waitingFor,omitempty"`
	// StepsDone counts the run's journal entries that finished: steps,
	// sleeps, signals received and children ended.
	// +optional
	StepsDone int32 `json:"stepsDone,omitempty"`
	// LastStep is the name of the journal entry that finished last.
	// +optional
	LastStep string `json:"lastStep,omitempty"`
	// Children are the run's first 20 child runs, oldest first.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	Children []ChildRunStatus `json:"children,omitempty"`
	// ChildrenTotal counts all of the run's child runs.
	// +optional
	ChildrenTotal int32 `json:"childrenTotal,omitempty"`
	// DAGSteps lists the steps of a run of a type with steps (a DAG run by
	// the database), in the order of the definition, each with its phase.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	DAGSteps []DAGStepStatus `json:"dagSteps,omitempty"`
	// Progress is "succeeded/total" steps of a DAG run, for display.
	// +optional
	Progress string `json:"progress,omitempty"`
	// SignalsSent is how many entries of spec.signals were handled: sent
	// to the run, or refused (the SignalsSent condition says why).
	// +optional
	SignalsSent int32 `json:"signalsSent,omitempty"`

	// Retries is how many raises of spec.retries were handled: the run
	// retried, or the retry refused (an Event says why).
	// +optional
	Retries int32 `json:"retries,omitempty"`
	// ObservedGeneration is the generation last mirrored.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastEventID is the last audit event reported as a Kubernetes Event.
	// +optional
	LastEventID int64 `json:"lastEventID,omitempty"`
	// Conditions: Accepted (the run is in the inbox; reason Deduplicated
	// when it is another object's run), Finished (with reason Succeeded,
	// Failed or Cancelled, saying how it was cancelled), Blocked (its type is
	// disabled), Unserved (while it waits for a worker: true when nothing
	// declared serves its type), CancelRequested (what spec.cancel did),
	// ResultTruncated and SignalsSent (false once a signal was refused).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WaitingFor is what a parked run waits for.
type WaitingFor struct {
	// Kind is sleep, signal or child; or limit, a run its type's flow
	// limits hold back (registry concurrency or rateLimit), with no step.
	// +kubebuilder:validation:Enum=sleep;signal;child;limit
	Kind string `json:"kind"`
	// Step is the journal entry the wait fills in.
	// +optional
	Step string `json:"step,omitempty"`
	// Signal is the signal name waited for (kind signal).
	// +optional
	Signal string `json:"signal,omitempty"`
	// Until is when the wait ends by itself: a sleep's end, or a wait's
	// timeout. Absent for a wait without a timeout.
	// +optional
	Until *metav1.Time `json:"until,omitempty"`
}

// ChildRunStatus summarises one child run.
type ChildRunStatus struct {
	// Step is the parent's step that started the child.
	Step string `json:"step"`
	// RunID is the child's id in the inbox.
	RunID string `json:"runID"`
	// Type is the child's workflow type.
	Type string `json:"type"`
	// Phase is the child's phase.
	Phase WorkflowRunPhase `json:"phase"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wfr,categories=simpleworkflow
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Attempts",type=string,JSONPath=`.status.attempts`
// +kubebuilder:printcolumn:name="Steps",type=integer,JSONPath=`.status.stepsDone`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress`
// +kubebuilder:printcolumn:name="Next-Attempt",type=string,JSONPath=`.status.nextAttemptAt`
// +kubebuilder:printcolumn:name="Last-Step",type=string,JSONPath=`.status.lastStep`,priority=1
// +kubebuilder:printcolumn:name="Worker",type=string,JSONPath=`.status.leasedBy`,priority=1
// +kubebuilder:printcolumn:name="Run-ID",type=string,JSONPath=`.status.runID`,priority=1
// +kubebuilder:printcolumn:name="Type-Namespace",type=string,JSONPath=`.spec.typeNamespace`,priority=1

// WorkflowRun is one durable run of a workflow type, mirrored into the
// inbox; its status follows the run.
// +kubebuilder:validation:XValidation:rule="!has(self.spec.cancel) || !self.spec.cancel || (has(oldSelf.spec.cancel) && oldSelf.spec.cancel) || !has(self.status) || !has(self.status.phase) || !(self.status.phase in ['Succeeded', 'Failed', 'Cancelled'])",messageExpression="'spec.cancel cannot be set: the run already finished (status.phase is ' + self.status.phase + ')'",reason=FieldValueForbidden,fieldPath=".spec.cancel"
// +kubebuilder:validation:XValidation:rule="(has(self.spec.retries) ? self.spec.retries : 0) == (has(oldSelf.spec.retries) ? oldSelf.spec.retries : 0) || (has(self.status) && has(self.status.phase) && self.status.phase in ['Failed', 'Cancelled'] && !(has(self.spec.cancel) && self.spec.cancel))",messageExpression="has(self.spec.cancel) && self.spec.cancel ? 'spec.retries cannot be raised: the run was cancelled through spec.cancel; create a new WorkflowRun' : 'spec.retries can be raised only when the run failed or was cancelled (status.phase is ' + (has(self.status) && has(self.status.phase) ? self.status.phase : 'not set') + ')'",reason=FieldValueForbidden,fieldPath=".spec.retries"
type WorkflowRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkflowRunSpec   `json:"spec"`
	Status WorkflowRunStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// WorkflowRunList is a list of WorkflowRuns.
type WorkflowRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkflowRun `json:"items"`
}

func init() {
	register(&WorkflowRun{}, &WorkflowRunList{})
}
