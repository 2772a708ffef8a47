package controller

import (
	"context"
	"log/slog"
	"strings"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// InboxWatcher LISTENs for changes of mirrored runs and hands the objects to
// the WorkflowRun controller, reconnecting by itself. It is a manager
// Runnable that runs on the leader only, like the controller it feeds.
type InboxWatcher struct {
	Engine    *engine.Engine
	Log       logr.Logger
	events    chan event.GenericEvent
	followers *Followers
}

// NewInboxWatcher returns a watcher whose Changes feed a controller.
func NewInboxWatcher(eng *engine.Engine, log logr.Logger) *InboxWatcher {
	return &InboxWatcher{Engine: eng, Log: log, events: make(chan event.GenericEvent, 4096), followers: NewFollowers()}
}

// Changes is the channel of objects to reconcile.
func (w *InboxWatcher) Changes() <-chan event.GenericEvent { return w.events }

// Followers is the set of objects woken along with the object a run was
// recorded from; the WorkflowRun controller fills it.
func (w *InboxWatcher) Followers() *Followers { return w.followers }

// Start listens until ctx ends.
func (w *InboxWatcher) Start(ctx context.Context) error {
	err := w.Engine.Listen(ctx, engine.ListenConfig{
		Channels: []string{engine.ChannelRunChanged},
		OnNotify: func(n engine.Notification) {
			ns, name, ok := strings.Cut(n.Payload, "/")
			if !ok {
				return
			}
			objs := append([]types.NamespacedName{{Namespace: ns, Name: name}}, w.followers.Of(n.Payload)...)
			for _, o := range objs {
				obj := &workflowv1alpha1.WorkflowRun{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name}}
				select {
				case w.events <- event.GenericEvent{Object: obj}:
				case <-ctx.Done():
					return
				}
			}
		},
		OnConnect: func() { w.Log.Info("Listening for inbox changes") },
		Logger:    slog.New(logr.ToSlogHandler(w.Log)),
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}
