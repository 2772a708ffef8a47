package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ScheduleConcurrencyPolicy says what a tick does while a run the schedule
// made earlier has not finished, as in a Kubernetes CronJob.
// +kubebuilder:validation:Enum=Allow;Forbid;Replace
type ScheduleConcurrencyPolicy string

// The concurrency policies of a WorkflowSchedule.
const (
	// ScheduleAllow makes the tick's run anyway.
	ScheduleAllow ScheduleConcurrencyPolicy = "Allow"
	// ScheduleForbid skips the tick (status.lastOutcome skipped_forbid).
	ScheduleForbid ScheduleConcurrencyPolicy = "Forbid"
	// ScheduleReplace cancels the unfinished runs, then makes the tick's run
	// (status.lastOutcome replaced).
	ScheduleReplace ScheduleConcurrencyPolicy = "Replace"
)

// WorkflowScheduleSpec is a cron schedule: at every tick of schedule in
// timeZone the database records one run of runTemplate, and the operator
// makes a WorkflowRun for it.
type WorkflowScheduleSpec struct {
	// Schedule is a cron expression of five fields separated by spaces
	// (minute hour day-of-month month day-of-week), each *, a value, a range
	// a-b, a list a,b and steps */n or a-b/n (months JAN-DEC, weekdays
	// SUN-SAT, ? for either day field), or a macro: @yearly, @annually,
	// @monthly, @weekly, @daily, @midnight or @hourly. When both day fields
	// are restricted a day matches either, as in CronJob. An expression that
	// never fires (0 0 30 2 *) is refused by the database: condition
	// Accepted=False.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^ *([^ ]+ +){4}[^ ]+ *$') || self.matches('^ *@')",message="schedule must be a cron expression of five fields separated by spaces (minute hour day-of-month month day-of-week), such as 0 3 * * *, or a macro such as @daily"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^ *@') || self.matches('^ *@(?i:yearly|annually|monthly|weekly|daily|midnight|hourly) *$')",message="schedule: the macros are @yearly, @annually, @monthly, @weekly, @daily, @midnight and @hourly"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^ *([^ ]+ +){4}[^ ]+ *$') || self.matches('^ *([*]|([0-5]?[0-9])(-([0-5]?[0-9]))?)(/[1-9][0-9]?)?(,([*]|([0-5]?[0-9])(-([0-5]?[0-9]))?)(/[1-9][0-9]?)?)*( |$)')",message="schedule: the minute field (the first) takes values 0-59: *, a value, a range a-b, a list a,b and steps */n or a-b/n"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^ *([^ ]+ +){4}[^ ]+ *$') || self.matches('^ *[^ ]+ +([*]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/[1-9][0-9]?)?(,([*]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/[1-9][0-9]?)?)*( |$)')",message="schedule: the hour field (the second) takes values 0-23: *, a value, a range a-b, a list a,b and steps */n or a-b/n"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^ *([^ ]+ +){4}[^ ]+ *$') || self.matches('^ *([^ ]+ +){2}([*?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/[1-9][0-9]?)?(,([*?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/[1-9][0-9]?)?)*( |$)')",message="schedule: the day-of-month field (the third) takes values 1-31: * or ?, a value, a range a-b, a list a,b and steps */n or a-b/n"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^ *([^ ]+ +){4}[^ ]+ *$') || self.matches('^ *([^ ]+ +){3}([*]|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))(-(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)))?)(/[1-9][0-9]?)?(,([*]|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))(-(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)))?)(/[1-9][0-9]?)?)*( |$)')",message="schedule: the month field (the fourth) takes values 1-12 or JAN-DEC: *, a value, a range a-b, a list a,b and steps */n or a-b/n"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^ *([^ ]+ +){4}[^ ]+ *$') || self.matches('^ *([^ ]+ +){4}([*?]|([0-7]|(?i:sun|mon|tue|wed|thu|fri|sat))(-([0-7]|(?i:sun|mon|tue|wed|thu|fri|sat)))?)(/[1-9][0-9]?)?(,([*?]|([0-7]|(?i:sun|mon|tue|wed|thu|fri|sat))(-([0-7]|(?i:sun|mon|tue|wed|thu|fri|sat)))?)(/[1-9][0-9]?)?)*( |$)')",message="schedule: the day-of-week field (the fifth) takes values 0-7 (0 and 7 are Sunday) or SUN-SAT: * or ?, a value, a range a-b, a list a,b and steps */n or a-b/n"
	Schedule string `json:"schedule"`

	// TimeZone is the time zone whose wall clock the schedule follows, a
	// name of the time zone database such as Europe/Berlin. Defaults to UTC.
	// A name the database does not know gives Accepted=False.
	// +optional
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$')",message="timeZone must be a time zone name such as UTC or Europe/Berlin: letters, digits, _ + and -, in parts separated by /"
	TimeZone string `json:"timeZone,omitempty"`

	// Suspend stops the schedule from firing. Ticks that pass while it is
	// suspended are not made up on resume.
	// +optional
	// +kubebuilder:default=false
	Suspend bool `json:"suspend,omitempty"`

	// ConcurrencyPolicy is what a tick does while a run the schedule made
	// has not finished: Allow (make the run anyway), Forbid (skip the tick)
	// or Replace (cancel the unfinished runs, then make the run). Defaults
	// to Allow.
	// +optional
	// +kubebuilder:default=Allow
	ConcurrencyPolicy ScheduleConcurrencyPolicy `json:"concurrencyPolicy,omitempty"`

	// StartingDeadlineSeconds is how late a tick may still start, in
	// seconds; a tick found due later than that is missed. Absent: no
	// deadline (the most recent due tick always starts).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=2147483647
	StartingDeadlineSeconds *int64 `json:"startingDeadlineSeconds,omitempty"`

	// SuccessfulRunsHistoryLimit is how many finished WorkflowRuns that
	// succeeded are kept; older ones are deleted (their runs stay in the
	// inbox until retention). Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	SuccessfulRunsHistoryLimit *int32 `json:"successfulRunsHistoryLimit,omitempty"`

	// FailedRunsHistoryLimit is how many finished WorkflowRuns that failed
	// or were cancelled are kept. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	FailedRunsHistoryLimit *int32 `json:"failedRunsHistoryLimit,omitempty"`

	// RunTemplate is the run each tick makes.
	RunTemplate WorkflowRunTemplate `json:"runTemplate"`
}

// WorkflowRunTemplate is the part of a WorkflowRun's spec a schedule gives
// each run it makes. Unlike a WorkflowRun's, it may change: a change applies
// from the next tick on.
type WorkflowRunTemplate struct {
	// Type is the versioned workflow type, dot-separated lowercase segments
	// ending in a version, such as reports.nightly.v1.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9_]+(\\\\.[a-z0-9_]+)*\\\\.v[0-9]+$')",message="type must be dot-separated lowercase segments of letters, digits and underscores ending in a version, such as content.thumbnail.v1"
	Type string `json:"type"`

	// Payload is each run's arguments: any JSON object.
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

	// MaxAttempts bounds the attempts of each run, 1 to 1000. Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`

	// Deadline fails each run ("deadline exceeded") this long after the tick
	// recorded it. A duration such as 30m or 2h, from 1s to 8760h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]*)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1s') && duration(self) <= duration('8760h')",message="runTemplate.deadline must be a duration such as 30s, 5m or 2h, between 1s and 8760h"
	Deadline *metav1.Duration `json:"deadline,omitempty"`

	// RetryPolicy overrides the default backoff of each run.
	// +optional
	RetryPolicy *RetryPolicy `json:"retryPolicy,omitempty"`

	// ConcurrencyKey groups each run for the flow limits of its type.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule="!self.contains('\\u0000')",message="runTemplate.concurrencyKey must not contain the NUL character (\\u0000)"
	ConcurrencyKey string `json:"concurrencyKey,omitempty"`
}

// ScheduledRunReference names a WorkflowRun a schedule made.
type ScheduledRunReference struct {
	// Name is the WorkflowRun's name, <schedule>-<tick in unix seconds>.
	Name string `json:"name"`
	// RunID is the id of its run in the inbox.
	// +optional
	RunID string `json:"runID,omitempty"`
}

// WorkflowScheduleStatus is what the schedule did, read from the database
// and from the WorkflowRuns it made.
type WorkflowScheduleStatus struct {
	// LastScheduleTime is the tick of the newest run the schedule made a
	// WorkflowRun for.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// NextScheduleTime is the next tick (while not suspended).
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// LastOutcome is what became of the last tick dealt with: fired,
	// replaced (the unfinished runs were cancelled first), skipped_forbid
	// (a run was unfinished), missed (a newer tick was due too, or the
	// starting deadline had passed) or failed (LastError says why).
	// +optional
	// +kubebuilder:validation:Enum=fired;replaced;skipped_forbid;missed;failed
	LastOutcome string `json:"lastOutcome,omitempty"`
	// LastError is why the last tick failed, when it did.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// Active lists the unfinished WorkflowRuns the schedule made.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Active []ScheduledRunReference `json:"active,omitempty"`
	// ActiveCount counts the unfinished WorkflowRuns the schedule made.
	// Defaulted to 0 by the API server: a status patch leaves out a count
	// that did not change, so a schedule whose runs were never seen active
	// would otherwise have none, and kubectl would print it blank.
	// +optional
	// +kubebuilder:default=0
	ActiveCount int32 `json:"activeCount"`
	// ObservedGeneration is the generation last mirrored.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Accepted (True: the schedule is in the inbox as the spec
	// says; False, reason InvalidSchedule: the database refused it, with its
	// message).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wfs,categories=simpleworkflow
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="TimeZone",type=string,JSONPath=`.spec.timeZone`
// +kubebuilder:printcolumn:name="Suspend",type=boolean,JSONPath=`.spec.suspend`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.activeCount`
// +kubebuilder:printcolumn:name="Last Schedule",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Next Schedule",type=string,JSONPath=`.status.nextScheduleTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.runTemplate.type`,priority=1
// +kubebuilder:printcolumn:name="Last Outcome",type=string,JSONPath=`.status.lastOutcome`,priority=1

// WorkflowSchedule makes a WorkflowRun at every tick of a cron schedule.
// The database fires each tick once; the operator mirrors the schedule into
// it and makes the WorkflowRuns, named <name>-<tick in unix seconds>.
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 52",message="a WorkflowSchedule's name is at most 52 characters: its WorkflowRuns are named <name>-<tick in unix seconds> and labelled with the name"
type WorkflowSchedule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkflowScheduleSpec   `json:"spec"`
	Status WorkflowScheduleStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// WorkflowScheduleList is a list of WorkflowSchedules.
type WorkflowScheduleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkflowSchedule `json:"items"`
}

func init() {
	register(&WorkflowSchedule{}, &WorkflowScheduleList{})
}
