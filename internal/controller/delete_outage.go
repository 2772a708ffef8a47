package controller

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultDeletionGracePeriod is how long the deletion of a WorkflowRun or
// WorkflowRegistry waits for an unreachable inbox before its finalizer is
// removed anyway.
const DefaultDeletionGracePeriod = 10 * time.Minute

// ConditionDeleting: the object is being deleted and the inbox could not be
// told yet (reason InboxUnreachable, the message carries the error).
const ConditionDeleting = "Deleting"

// Reasons of a deletion that meets an unreachable inbox.
const (
	// ReasonInboxUnreachable: the inbox failed while the deletion was
	// handled; the deletion is retried.
	ReasonInboxUnreachable = "InboxUnreachable"
	// ReasonDeletedWithoutInbox: the inbox stayed unreachable for the
	// deletion grace period; the finalizer was removed anyway.
	ReasonDeletedWithoutInbox = "DeletedWithoutInbox"
)

// Bounds of the retry delay of a deletion waiting for the inbox.
const (
	minDeletionRetry = time.Second
	maxDeletionRetry = 30 * time.Second
)

// deletionWait says, for an object being deleted whose inbox call failed,
// whether the grace period is over and, if not, when to try again: the delay
// grows with the time already waited (a quarter of it, between one and 30
// seconds) and never passes the end of the grace period.
func deletionWait(obj client.Object, grace time.Duration, now time.Time) (overdue bool, retry time.Duration) {
	if grace <= 0 {
		grace = DefaultDeletionGracePeriod
	}
	since := obj.GetDeletionTimestamp()
	if since == nil {
		return false, minDeletionRetry
	}
	waited := now.Sub(since.Time)
	left := grace - waited
	if left <= 0 {
		return true, 0
	}
	retry = min(max(waited/4, minDeletionRetry), maxDeletionRetry)
	return false, min(retry, left)
}

// unreachableCondition is the Deleting condition for an inbox error.
func unreachableCondition(generation int64, err error, grace time.Duration) metav1.Condition {
	if grace <= 0 {
		grace = DefaultDeletionGracePeriod
	}
	return metav1.Condition{
		Type: ConditionDeleting, Status: metav1.ConditionTrue, Reason: ReasonInboxUnreachable,
		ObservedGeneration: generation,
		Message: fmt.Sprintf("Waiting for the inbox to handle the deletion (retrying; the finalizer is removed anyway %s after the deletion): %v",
			grace, err),
	}
}
