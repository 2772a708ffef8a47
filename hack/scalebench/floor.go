package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// floorStatus stands in for an operator that writes nothing but what a
// WorkflowRun must show: one status patch, straight to Succeeded with the
// fields the operator writes for a finished run, made by the client that
// created the object, and no Event. With it (-floor), the bench measures
// what this API server, on the machine it shares, needs for the creations
// and one status write each: the floor under any operator's figures.
func floorStatus(ctx context.Context, c client.Client, wfr *workflowv1alpha1.WorkflowRun) error {
	before := wfr.DeepCopy()
	now := metav1.NewTime(time.Now())
	st := &wfr.Status
	st.Phase = workflowv1alpha1.PhaseSucceeded
	st.RunID = fmt.Sprintf("0193a6f2-0000-7000-8000-%012d", now.UnixNano()%1e12)
	st.Attempt, st.Attempts = 1, "1/3"
	st.StartedAt, st.FinishedAt = &now, &now
	st.ObservedGeneration, st.LastEventID = wfr.Generation, 3
	st.Conditions = []metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Recorded", Message: "Recorded in the inbox",
			LastTransitionTime: now, ObservedGeneration: wfr.Generation},
		{Type: "Succeeded", Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "Succeeded on attempt 1",
			LastTransitionTime: now, ObservedGeneration: wfr.Generation},
	}
	if err := c.Status().Patch(ctx, wfr, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("floor: status of %s/%s: %w", wfr.Namespace, wfr.Name, err)
	}
	return nil
}

// floorWatch watches every WorkflowRun and reads what the watch sends, as
// an operator's cache does, until ctx ends: the API server's cost of
// sending the objects' changes is part of the floor.
func floorWatch(ctx context.Context, c client.WithWatch) error {
	w, err := c.Watch(ctx, &workflowv1alpha1.WorkflowRunList{})
	if err != nil {
		return fmt.Errorf("floor: watch: %w", err)
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case _, ok := <-w.ResultChan():
				if !ok {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return nil
}
