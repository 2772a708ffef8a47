package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// registrationRetryPeriod is how often a WorkflowRun whose type awaits its
// registration looks again.
const registrationRetryPeriod = time.Second

// pendingRegistration returns the WorkflowRegistry of namespace that
// declares typ with steps and has not mirrored its latest spec yet, or nil.
//
// A run becomes a DAG run when it is recorded, from the registry entry of
// its type at that moment: a WorkflowRun applied together with the
// WorkflowRegistry declaring its steps (kubectl apply -k) must wait for the
// registry to be mirrored, or it would be recorded as a plain run of a type
// no worker serves. The registries are read from the cache, without copies.
func (r *runPass) pendingRegistration(ctx context.Context, namespace, typ string) (*workflowv1alpha1.WorkflowRegistry, error) {
	// Once the type is in the namespace's registry, whoever owns it, there
	// is nothing to wait for: only a first registration is awaited. Only
	// registries of the type's namespace can declare it.
	if _, err := r.Inbox.GetRegistryEntry(ctx, namespace, typ); err == nil {
		return nil, nil
	} else if !errors.Is(err, engine.ErrNotFound) {
		return nil, fmt.Errorf("registry entry %s: %w", typ, err)
	}
	var regs workflowv1alpha1.WorkflowRegistryList
	if err := r.List(ctx, &regs, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list WorkflowRegistries: %w", err)
	}
	for i := range regs.Items {
		reg := &regs.Items[i]
		// Registered: at its generation, in this inbox (a namespace that
		// moved has its registries written to the new inbox anew).
		registered := reg.Status.ObservedGeneration == reg.Generation &&
			(reg.Status.Inbox == "" || r.inboxName == "" || reg.Status.Inbox == r.inboxName)
		if registered || !reg.DeletionTimestamp.IsZero() {
			continue
		}
		for _, wf := range reg.Spec.Workflows {
			if wf.Name == typ && len(wf.Steps) > 0 {
				return reg, nil
			}
		}
	}
	return nil, nil
}

// awaitRegistration says on the object that its run waits for reg to be
// mirrored, and writes the status.
func (r *runPass) awaitRegistration(ctx context.Context, before, wfr *workflowv1alpha1.WorkflowRun, reg *workflowv1alpha1.WorkflowRegistry) error {
	setCondition(&wfr.Status.Conditions, metav1.Condition{
		Type: workflowv1alpha1.ConditionAccepted, Status: metav1.ConditionFalse, Reason: workflowv1alpha1.ReasonAwaitingRegistration,
		Message: fmt.Sprintf("workflow type %s is declared with steps by WorkflowRegistry %s/%s, which is not registered yet; the run is recorded once it is",
			wfr.Spec.Type, reg.Namespace, reg.Name),
		ObservedGeneration: wfr.Generation,
	})
	return r.patchStatus(ctx, before, wfr)
}
