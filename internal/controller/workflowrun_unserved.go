package controller

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// service says whether anything is declared to serve a run waiting for a
// worker: the Unserved condition.
type service struct {
	unserved bool
	reason   string
	message  string
}

// unserved looks for what serves the run's type while the run waits for a
// worker (pending, not parked, not a DAG run): a worker pool of a
// WorkflowRegistry whose typePrefixes cover the type (and whose runtime may
// claim it), or at least a registry entry declaring the type. It returns nil
// when the run does not wait for a worker. Workers started outside the
// operator claim runs without declaring anything, so Unserved says what is
// declared, not that no worker can exist.
//
// Only the registries of the run's type namespace serve it (its own, or
// the namespace that shares the type with it). A registry of another
// namespace is named, but not its pool's target nor its autoscaler's
// message: the run's owner learns that something serves its type, not
// another team's Deployments or errors.
func (r *runPass) unserved(ctx context.Context, run engine.Run, entry *engine.RegistryEntry, namespace string) (*service, error) {
	if run.Status != engine.StatusPending || run.Wait != nil {
		return nil, nil
	}
	var regs workflowv1alpha1.WorkflowRegistryList
	typeNamespace := cmp.Or(run.TypeNamespace, namespace)
	if err := r.List(ctx, &regs, client.InNamespace(typeNamespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list WorkflowRegistries: %w", err)
	}
	var blocked *service
	for i := range regs.Items {
		reg := &regs.Items[i]
		if !reg.DeletionTimestamp.IsZero() {
			continue
		}
		for _, pool := range reg.Spec.Workers {
			if !covers(pool, run.Type) || entry != nil && entry.Runtime != "" && string(pool.Runtime) != entry.Runtime {
				continue
			}
			own := reg.Namespace == namespace
			name := fmt.Sprintf("a worker pool of WorkflowRegistry %s/%s", reg.Namespace, reg.Name)
			if own {
				name = fmt.Sprintf("worker pool %s (WorkflowRegistry %s/%s)", pool.ScaleTargetRef.Name, reg.Namespace, reg.Name)
			}
			if c := poolReady(reg, pool.ScaleTargetRef.Name); c != nil && c.Status == metav1.ConditionFalse {
				if blocked == nil {
					why := "its registry's status says why"
					if own {
						why = fmt.Sprintf("%s: %s", c.Reason, c.Message)
					}
					blocked = &service{unserved: true, reason: workflowv1alpha1.ReasonWorkerPoolNotReady, message: fmt.Sprintf(
						"workflow type %s is covered only by %s, which cannot be scaled (%s)", run.Type, name, why)}
				}
				continue
			}
			return &service{reason: workflowv1alpha1.ReasonWorkerPool, message: fmt.Sprintf("%s serves workflow type %s", name, run.Type)}, nil
		}
	}
	if blocked != nil {
		return blocked, nil
	}
	if entry != nil {
		owner := "the registry table"
		if entry.OwnerName != "" {
			owner = "WorkflowRegistry " + entry.OwnerNamespace + "/" + entry.OwnerName
		}
		return &service{reason: workflowv1alpha1.ReasonRegistered, message: fmt.Sprintf(
			"workflow type %s is registered (runtime %s) by %s; no worker pool covers it, so its workers run outside the operator's scaling",
			run.Type, entry.Runtime, owner)}, nil
	}
	return &service{unserved: true, reason: workflowv1alpha1.ReasonNoWorker, message: fmt.Sprintf(
		"no WorkflowRegistry declares workflow type %s and no worker pool's typePrefixes cover it; the run waits until a worker started outside the operator claims it (declare the type and a worker pool in a WorkflowRegistry)",
		run.Type)}, nil
}

// covers reports whether one of the pool's literal prefixes starts typ.
func covers(pool workflowv1alpha1.WorkerPool, typ string) bool {
	for _, p := range pool.TypePrefixes {
		if strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}

// poolReady returns the Ready condition the autoscaler reported for the pool
// scaling target, or nil.
func poolReady(reg *workflowv1alpha1.WorkflowRegistry, target string) *metav1.Condition {
	for i := range reg.Status.Workers {
		if reg.Status.Workers[i].Name == target {
			return meta.FindStatusCondition(reg.Status.Workers[i].Conditions, workflowv1alpha1.ConditionReady)
		}
	}
	return nil
}

// applyUnserved sets the Unserved condition while the run waits for a worker
// and removes it otherwise. It is a condition only, with no Event: most runs
// of an undeclared type are claimed a moment later by a worker the operator
// does not know of, and an Event each would cost an API write per run.
func applyUnserved(wfr *workflowv1alpha1.WorkflowRun, svc *service) {
	if svc == nil {
		meta.RemoveStatusCondition(&wfr.Status.Conditions, workflowv1alpha1.ConditionUnserved)
		return
	}
	status := metav1.ConditionFalse
	if svc.unserved {
		status = metav1.ConditionTrue
	}
	setCondition(&wfr.Status.Conditions, metav1.Condition{
		Type: workflowv1alpha1.ConditionUnserved, Status: status, Reason: svc.reason, Message: svc.message,
		ObservedGeneration: wfr.Generation,
	})
}
