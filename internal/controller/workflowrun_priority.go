package controller

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// inboxChangePriority is the work queue priority of a look asked for by the
// inbox (a run started, finished, parked...). It is above the default of new
// and changed objects: under a burst of creations, writing the status of
// runs that moved is not left behind recording the newest objects.
const inboxChangePriority = 1

// inboxChangeSettle is how long after the inbox announced a change its
// object is looked at: a run that starts and ends within it gets one status
// write and one Event instead of two each, and the manager's cache has
// caught up with the look that recorded it.
const inboxChangeSettle = 250 * time.Millisecond

// inboxChangeHandler enqueues the objects of the inbox's announcements at
// inboxChangePriority, inboxChangeSettle later (at once and at the default
// priority when the queue has no priorities).
func inboxChangeHandler() handler.TypedEventHandler[client.Object, reconcile.Request] {
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[client.Object],
			q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.Object == nil {
				return
			}
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)}
			if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
				pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(inboxChangePriority), After: inboxChangeSettle}, req)
				return
			}
			q.Add(req)
		},
	}
}
