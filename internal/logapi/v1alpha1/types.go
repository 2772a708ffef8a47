// Package v1alpha1 holds the objects of the log API,
// logs.simpleworkflow.dev/v1alpha1, as the manager serves them and the
// kubectl workflow plugin reads them.
package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The log API's group, version and resource.
const (
	Group    = "logs.simpleworkflow.dev"
	Version  = "v1alpha1"
	Resource = "workflowrunlogs"
	// Singular is the resource's singular name.
	Singular = "workflowrunlog"
	// Kind is the kind of the objects the resource serves.
	Kind = "WorkflowRunLog"
)

// GroupVersion is logs.simpleworkflow.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Bounds of the tail parameter: the most recent lines of an attempt that a
// read returns.
const (
	DefaultTail = 1000
	MaxTail     = 10000
)

// Query parameters of a read.
const (
	// ParamAttempt picks the attempt (from 1); the latest that logged
	// when absent.
	ParamAttempt = "attempt"
	// ParamTail is how many of the attempt's newest lines to return
	// (DefaultTail when absent, at most MaxTail).
	ParamTail = "tail"
)

// WorkflowRunLog is what a WorkflowRun's handlers logged: which attempts
// logged, and the newest lines of one of them.
type WorkflowRunLog struct {
	metav1.TypeMeta `json:",inline"`
	// Metadata names the WorkflowRun.
	Metadata LogMeta `json:"metadata"`
	// RunID is the inbox run the WorkflowRun records (status.runID).
	RunID string `json:"runID"`
	// Attempts are the attempts that logged, in order.
	Attempts []AttemptSummary `json:"attempts"`
	// Attempt is the attempt whose lines are shown (0 when none logged).
	Attempt int `json:"attempt"`
	// Omitted counts the attempt's kept lines older than those shown
	// (beyond the tail).
	Omitted int `json:"omitted"`
	// Lines are the newest lines of Attempt, oldest first.
	Lines []Line `json:"lines"`
}

// LogMeta names the WorkflowRun a log belongs to.
type LogMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// AttemptSummary says what the log of one attempt holds.
type AttemptSummary struct {
	Attempt int `json:"attempt"`
	// Lines is the number of lines kept.
	Lines int `json:"lines"`
	// Dropped counts the attempt's oldest lines that were not kept (by
	// the worker or by the inbox's limits).
	Dropped int64 `json:"dropped"`
}

// Line is one line of a run's log.
type Line struct {
	Attempt int       `json:"attempt"`
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
}
