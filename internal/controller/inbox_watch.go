package controller

import (
	"context"
	"log/slog"

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

// For returns a watcher of another inbox that feeds the same Changes and
// shares the Followers.
func (w *InboxWatcher) For(eng *engine.Engine, log logr.Logger) *InboxWatcher {
	return &InboxWatcher{Engine: eng, Log: log, events: w.events, followers: w.followers}
}

// Changes is the channel of objects to reconcile.
func (w *InboxWatcher) Changes() <-chan event.GenericEvent { return w.events }

// Followers is the set of objects woken along with the object a run was
// recorded from; the WorkflowRun controller fills it.
func (w *InboxWatcher) Followers() *Followers { return w.followers }

// enqueue hands one WorkflowRun to the controller; false when ctx ended.
func (w *InboxWatcher) enqueue(ctx context.Context, o types.NamespacedName) bool {
	obj := &workflowv1alpha1.WorkflowRun{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name}}
	select {
	case w.events <- event.GenericEvent{Object: obj}:
		return true
	case <-ctx.Done():
		return false
	}
}

// maxLookup bounds the run ids one lookup of their objects takes.
const maxLookup = 1000

// Start listens until ctx ends. A notification names a run by its id; the
// ids that arrive while a lookup runs are looked up together, so a burst
// costs a few queries, not one per change.
func (w *InboxWatcher) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	changed := make(chan string, 4*maxLookup)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.lookUp(ctx, changed)
	}()
	defer func() {
		cancel()
		<-done
	}()
	err := w.Engine.Listen(ctx, engine.ListenConfig{
		Channels: []string{engine.ChannelRunChanged},
		OnNotify: func(n engine.Notification) {
			select {
			case changed <- n.Payload:
			case <-ctx.Done():
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

// lookUp turns the ids of changed runs into their objects (and their
// followers) and hands those to the controller, until ctx ends.
func (w *InboxWatcher) lookUp(ctx context.Context, changed <-chan string) {
	for {
		var first string
		select {
		case first = <-changed:
		case <-ctx.Done():
			return
		}
		ids := map[string]struct{}{first: {}}
	drain:
		for len(ids) < maxLookup {
			select {
			case id := <-changed:
				ids[id] = struct{}{}
			default:
				break drain
			}
		}
		batch := make([]string, 0, len(ids))
		for id := range ids {
			batch = append(batch, id)
		}
		runs, err := w.Engine.SourcesOf(ctx, batch)
		if err != nil {
			if ctx.Err() == nil {
				// The controller's periodic resync writes these back.
				w.Log.Error(err, "Looking up the objects of changed runs failed", "runs", len(batch))
			}
			continue
		}
		for _, r := range runs {
			key := r.Source.Namespace + "/" + r.Source.Name
			objs := append([]types.NamespacedName{{Namespace: r.Source.Namespace, Name: r.Source.Name}},
				w.followers.Of(key)...)
			for _, o := range objs {
				obj := &workflowv1alpha1.WorkflowRun{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name}}
				select {
				case w.events <- event.GenericEvent{Object: obj}:
				case <-ctx.Done():
					return
				}
			}
		}
	}
}
