package controller

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// NamespaceWaker asks the controllers to look again at every unfinished
// WorkflowRun, every WorkflowRegistry and every WorkflowSchedule of some
// namespaces: after they moved to another inbox, or when their inbox's
// database answers again, so that nothing waits for its next retry.
type NamespaceWaker struct {
	Client     client.Reader
	Runs       *InboxWatcher
	Registries chan event.GenericEvent
	Schedules  chan event.GenericEvent
	Log        logr.Logger
}

// NewNamespaceWaker returns a waker feeding runs through w.
func NewNamespaceWaker(c client.Reader, w *InboxWatcher, log logr.Logger) *NamespaceWaker {
	return &NamespaceWaker{Client: c, Runs: w, Log: log,
		Registries: make(chan event.GenericEvent, 1024), Schedules: make(chan event.GenericEvent, 1024)}
}

// Wake enqueues the objects of namespaces; it gives up when ctx ends.
func (n *NamespaceWaker) Wake(ctx context.Context, namespaces []string) {
	for _, ns := range namespaces {
		var runs workflowv1alpha1.WorkflowRunList
		if err := n.Client.List(ctx, &runs, client.InNamespace(ns)); err != nil {
			n.Log.Error(err, "Listing the WorkflowRuns of a namespace to wake failed", "namespace", ns)
		}
		for i := range runs.Items {
			if runs.Items[i].Status.Phase.Finished() {
				continue
			}
			if !n.Runs.enqueue(ctx, types.NamespacedName{Namespace: ns, Name: runs.Items[i].Name}) {
				return
			}
		}
		var regs workflowv1alpha1.WorkflowRegistryList
		if err := n.Client.List(ctx, &regs, client.InNamespace(ns)); err == nil {
			for i := range regs.Items {
				if !send(ctx, n.Registries, &regs.Items[i]) {
					return
				}
			}
		}
		var scheds workflowv1alpha1.WorkflowScheduleList
		if err := n.Client.List(ctx, &scheds, client.InNamespace(ns)); err == nil {
			for i := range scheds.Items {
				if !send(ctx, n.Schedules, &scheds.Items[i]) {
					return
				}
			}
		}
	}
}

// send puts obj on ch unless ctx ends first.
func send(ctx context.Context, ch chan<- event.GenericEvent, obj client.Object) bool {
	select {
	case ch <- event.GenericEvent{Object: obj}:
		return true
	case <-ctx.Done():
		return false
	}
}
