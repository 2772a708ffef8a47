package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// typeNamespace is the namespace whose registry and workers run the
// object's type: spec.typeNamespace, or the object's own.
func typeNamespace(wfr *workflowv1alpha1.WorkflowRun) string {
	if wfr.Spec.TypeNamespace != "" {
		return wfr.Spec.TypeNamespace
	}
	return wfr.Namespace
}

// refuseUnshared refuses (Accepted=False, nothing recorded) a WorkflowRun
// that asks for another namespace's type which that namespace does not
// share with it, and reports whether it did. The message is the same
// whether the other namespace has the type or not: a producer learns
// nothing of a namespace that shares nothing with it.
func (r *runPass) refuseUnshared(ctx context.Context, before, wfr *workflowv1alpha1.WorkflowRun) (bool, error) {
	owner := typeNamespace(wfr)
	if owner == wfr.Namespace {
		return false, nil
	}
	entry, err := r.Inbox.GetRegistryEntry(ctx, owner, wfr.Spec.Type)
	if err != nil && !errors.Is(err, engine.ErrNotFound) {
		return false, fmt.Errorf("registry entry %s/%s: %w", owner, wfr.Spec.Type, err)
	}
	if err == nil && slices.Contains(entry.SharedWith, wfr.Namespace) {
		return false, nil
	}
	return true, r.refuse(ctx, before, wfr, workflowv1alpha1.ReasonTypeNotShared,
		fmt.Sprintf("namespace %s does not share workflow type %s with namespace %s (a WorkflowRegistry there lists this namespace in the workflow's sharedWith); nothing was recorded",
			owner, wfr.Spec.Type, wfr.Namespace))
}
