package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// InboxFinalizer keeps a WorkflowInbox until no namespace is served by it.
const InboxFinalizer = "workflow.simpleworkflow.dev/inbox"

// Periods of the WorkflowInbox controller.
const (
	// inboxResyncPeriod: every inbox's Secret is read again this often.
	inboxResyncPeriod = 30 * time.Second
	// inboxMoveSettle is how long a namespace about to move takes no new
	// runs before its old inbox is counted again and it moves.
	inboxMoveSettle = 2 * time.Second
	// inboxHeldRecheck: a held namespace is looked at again this often.
	inboxHeldRecheck = 5 * time.Second
)

// MigrateInbox prepares a new inbox's database (migrations, and roles when
// the manager creates them) and returns its schema version.
type MigrateInbox func(ctx context.Context, pool *pgxpool.Pool) (int, error)

// migrationError marks a failure of MigrateInbox.
type migrationError struct{ err error }

func (e migrationError) Error() string { return e.err.Error() }
func (e migrationError) Unwrap() error { return e.err }

// WorkflowInboxReconciler connects the manager to every WorkflowInbox's
// database and places each namespace in one inbox: the oldest inbox
// selecting it, else the default inbox. A namespace moves only when the
// inbox it leaves holds none of its unfinished runs; its placement is
// written to the inboxes' status, which InboxSet routes by.
type WorkflowInboxReconciler struct {
	client.Client
	// APIReader reads Secrets (never cached: the manager does not watch
	// Secrets).
	APIReader client.Reader
	Set       *InboxSet
	Migrate   MigrateInbox
	Recorder  recorder.EventRecorder
	// Wake, optional, asks the controllers to look at every object of the
	// namespaces (after a move, or when their inbox answers again).
	Wake func(ctx context.Context, namespaces []string)

	mu sync.Mutex
	// moving: namespaces that take no new runs while they are about to
	// move, by when that began.
	moving map[string]time.Time
	// settling: namespaces that moved, by the inbox they moved to; they
	// take new runs again once the cached statuses show the move.
	settling map[string]string
	// recoveries: per inbox, the count of InboxSet.recovered last acted on.
	recoveries map[string]int
	// secretRead: when each inbox's Secret was last read, at which
	// generation.
	secretRead map[string]secretRead
	// pendingWakes: namespaces to wake at the end of the reconcile.
	pendingWakes []string
}

// secretRead is when an inbox's Secret was last read.
type secretRead struct {
	at         time.Time
	generation int64
	// failed is the Ready condition of a connection that failed then.
	failed *metav1.Condition
}

// +kubebuilder:rbac:groups=workflow.simpleworkflow.dev,resources=workflowinboxes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workflow.simpleworkflow.dev,resources=workflowinboxes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workflow.simpleworkflow.dev,resources=workflowinboxes/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// placeAll is the one request the controller handles: it places every
// namespace at once.
var placeAll = reconcile.Request{NamespacedName: types.NamespacedName{Name: ""}}

// SetupWithManager registers the controller: any WorkflowInbox or
// Namespace change, and any change of an inbox's health, places again.
func (r *WorkflowInboxReconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{placeAll}
	})
	health := make(chan event.GenericEvent, 16)
	go func() {
		for name := range r.Set.UpChanged() {
			health <- event.GenericEvent{Object: &workflowv1alpha1.WorkflowInbox{ObjectMeta: metav1.ObjectMeta{Name: name}}}
		}
	}()
	return ctrl.NewControllerManagedBy(mgr).
		Named("workflowinbox").
		Watches(&workflowv1alpha1.WorkflowInbox{}, all).
		Watches(&corev1.Namespace{}, all).
		WatchesRawSource(source.Channel(health, all)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r)
}

// inboxView is what one reconcile decided about one inbox.
type inboxView struct {
	obj      *workflowv1alpha1.WorkflowInbox
	ready    metav1.Condition
	schema   int
	serves   []string
	held     map[string]string // namespace -> why
	olderSel []string          // held because an older inbox selects them
	// badSelector: the selector does not parse.
	badSelector bool
	// contested: namespaces it is chosen for that newer inboxes select
	// too, with those inboxes.
	contested map[string][]string
}

// Reconcile connects, places and writes every inbox's status.
func (r *WorkflowInboxReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.moving == nil {
		r.moving, r.settling = map[string]time.Time{}, map[string]string{}
		r.recoveries, r.secretRead = map[string]int{}, map[string]secretRead{}
	}
	var list workflowv1alpha1.WorkflowInboxList
	if err := r.List(ctx, &list); err != nil {
		return ctrl.Result{}, fmt.Errorf("list WorkflowInboxes: %w", err)
	}
	inboxes := byAge(list.Items)
	views := map[string]*inboxView{}
	var errs []error
	for _, in := range inboxes {
		v := &inboxView{obj: in, held: map[string]string{}, contested: map[string][]string{}}
		views[in.Name] = v
		if in.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(in, InboxFinalizer) {
			patch := client.MergeFromWithOptions(in.DeepCopy(), client.MergeFromWithOptimisticLock{})
			controllerutil.AddFinalizer(in, InboxFinalizer)
			if err := r.Patch(ctx, in, patch); err != nil {
				errs = append(errs, fmt.Errorf("add finalizer to WorkflowInbox %s: %w", in.Name, err))
			}
		}
		v.ready, v.schema = r.connect(ctx, in)
		if _, err := metav1.LabelSelectorAsSelector(&in.Spec.NamespaceSelector); err != nil {
			v.badSelector = true
			v.ready = metav1.Condition{Type: workflowv1alpha1.ConditionInboxReady, Status: metav1.ConditionFalse,
				Reason: workflowv1alpha1.ReasonSelectorInvalid, ObservedGeneration: in.Generation,
				Message: truncate(fmt.Sprintf("namespaceSelector is invalid (%v): the inbox keeps the namespaces it serves and takes no other", err), 1024)}
		}
	}
	// Inboxes whose object is gone (their finalizer was removed).
	for _, name := range r.Set.connected() {
		if _, ok := views[name]; !ok {
			r.Set.disconnect(name)
		}
	}

	var nss corev1.NamespaceList
	if err := r.List(ctx, &nss); err != nil {
		return ctrl.Result{}, fmt.Errorf("list Namespaces: %w", err)
	}
	// Where each namespace is listed; a move that wrote the inbox it went
	// to but not yet the one it left lists it twice.
	listed := map[string][]string{}
	for _, in := range inboxes {
		for _, ns := range in.Status.Namespaces {
			listed[ns] = append(listed[ns], in.Name)
		}
	}
	again := time.Duration(0)
	for ns, to := range r.settling {
		_, targetExists := views[to]
		if at := listed[ns]; (len(at) == 1 && at[0] == to) || (len(at) == 0 && to == defaultInbox) ||
			(to != defaultInbox && !targetExists) {
			delete(r.settling, ns)
			delete(r.moving, ns)
			r.Set.setMoving(ns, false)
		} else {
			again = minPositive(again, 500*time.Millisecond)
		}
	}
	var moved []string
	exists := map[string]bool{}
	for i := range nss.Items {
		ns := &nss.Items[i]
		exists[ns.Name] = true
		want := defaultInbox
		for _, in := range inboxes {
			if !in.DeletionTimestamp.IsZero() || !r.chooses(views[in.Name], ns) {
				continue
			}
			if want == defaultInbox {
				want = in.Name
			} else {
				views[in.Name].olderSel = append(views[in.Name].olderSel, ns.Name)
				views[want].contested[ns.Name] = append(views[want].contested[ns.Name], in.Name)
			}
		}
		cur := defaultInbox
		switch at := listed[ns.Name]; {
		case len(at) == 1:
			cur = at[0]
		case len(at) > 1:
			// Half-written move: its checks were done; finish it towards
			// the inbox it chose, or keep the oldest listing.
			cur = at[0]
			if slices.Contains(at, want) {
				cur = want
			}
		}
		if to, ok := r.settling[ns.Name]; ok {
			r.serve(views, to, ns.Name)
			continue
		}
		if want == cur {
			r.serve(views, cur, ns.Name)
			r.stopMoving(ns.Name)
			continue
		}
		why, done := r.tryMove(ctx, cur, want, ns.Name)
		if !done {
			r.serve(views, cur, ns.Name)
			if want != defaultInbox {
				views[want].held[ns.Name] = why
			}
			again = minPositive(again, inboxHeldRecheck)
			if _, ok := r.moving[ns.Name]; ok {
				again = minPositive(again, inboxMoveSettle)
			}
			continue
		}
		r.serve(views, want, ns.Name)
		moved = append(moved, ns.Name)
		r.settling[ns.Name] = want
		again = minPositive(again, 500*time.Millisecond)
		if r.Recorder != nil && want != defaultInbox {
			r.Recorder.Eventf(views[want].obj, nil, corev1.EventTypeNormal, "NamespaceMoved", "Place",
				"namespace %s moved here from inbox %s", ns.Name, cur)
		} else if r.Recorder != nil && cur != defaultInbox {
			r.Recorder.Eventf(views[cur].obj, nil, corev1.EventTypeNormal, "NamespaceMoved", "Place",
				"namespace %s moved to inbox %s", ns.Name, want)
		}
		log.Info("Namespace moved between inboxes", "namespace", ns.Name, "from", cur, "to", want)
	}
	for ns := range r.moving {
		if !exists[ns] {
			delete(r.settling, ns)
			r.stopMoving(ns)
		}
	}

	// Statuses: the inboxes gaining namespaces first, so that a namespace
	// is never listed by none while it moves (listed twice, it waits).
	slices.SortStableFunc(inboxes, func(a, b *workflowv1alpha1.WorkflowInbox) int {
		return gains(views[b.Name]) - gains(views[a.Name])
	})
	gainFailed := false
	for _, in := range inboxes {
		v := views[in.Name]
		if gainFailed && loses(v) == 1 {
			continue // never leave a namespace listed by no inbox
		}
		if err := r.writeStatus(ctx, v); err != nil {
			errs = append(errs, err)
			gainFailed = gainFailed || gains(v) == 1
		}
	}
	if len(moved) > 0 && r.Wake != nil {
		r.Wake(ctx, moved)
	}
	r.wakeRecovered(ctx, views, listed)
	if err := r.finishDeletions(ctx, inboxes, views); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		if len(r.moving) > 0 || len(r.settling) > 0 {
			// Namespaces are waiting: look again soon, not at the
			// controller's backoff.
			log.Error(err, "Placing namespaces partly failed; retrying")
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: minPositive(again, inboxResyncPeriod)}, nil
}

// chooses reports whether the inbox takes ns: its selector matches, or,
// with an invalid selector, it serves ns already.
func (r *WorkflowInboxReconciler) chooses(v *inboxView, ns *corev1.Namespace) bool {
	if v.badSelector {
		return slices.Contains(v.obj.Status.Namespaces, ns.Name)
	}
	return selects(v.obj, ns.Labels)
}

// stopMoving lets namespace take new runs again where it is.
func (r *WorkflowInboxReconciler) stopMoving(namespace string) {
	if _, ok := r.moving[namespace]; ok {
		delete(r.moving, namespace)
		r.Set.setMoving(namespace, false)
	}
}

// loses is 1 when the view's status lists a namespace it no longer serves.
func loses(v *inboxView) int {
	for _, ns := range v.obj.Status.Namespaces {
		if !slices.Contains(v.serves, ns) {
			return 1
		}
	}
	return 0
}

// gains is 1 when the view serves a namespace its status does not list.
func gains(v *inboxView) int {
	for _, ns := range v.serves {
		if !slices.Contains(v.obj.Status.Namespaces, ns) {
			return 1
		}
	}
	return 0
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 || b < a {
		return b
	}
	return a
}

// serve records that inbox name serves ns.
func (r *WorkflowInboxReconciler) serve(views map[string]*inboxView, name, ns string) {
	if v := views[name]; v != nil {
		v.serves = append(v.serves, ns)
	}
}

// inboxCallTimeout bounds each database call of a placement.
const inboxCallTimeout = 5 * time.Second

// tryMove moves ns from cur to want when both inboxes answer, cur holds
// none of its unfinished runs and no WorkflowRun of it still shows an
// unfinished run. The first time it finds none, the namespace stops
// taking new passes (InboxSet answers NamespaceNotYetPlaced) for
// inboxMoveSettle; the second time it waits for the passes under way to
// end and holds off new ones (the namespace's fence), deletes the
// namespace's schedules in cur (so that cur fires none meanwhile), counts
// again and, finding none, deletes its registry entries in cur and reports
// done. Otherwise it says why the namespace stays.
func (r *WorkflowInboxReconciler) tryMove(ctx context.Context, cur, want, ns string) (string, bool) {
	hold := func(why string) (string, bool) {
		r.stopMoving(ns)
		return why, false
	}
	eng, ok := r.Set.Engine(cur)
	if up, _ := r.Set.Up(cur); !ok || !up {
		return hold(fmt.Sprintf("inbox %s, which serves it now, does not answer", cur))
	}
	if up, _ := r.Set.Up(want); !up {
		return hold(fmt.Sprintf("inbox %s is not connected or does not answer", want))
	}
	if why := r.unfinishedIn(ctx, eng, cur, ns); why != "" {
		return hold(why)
	}
	if why := r.runsNotShown(ctx, ns); why != "" {
		return hold(why)
	}
	since, ok := r.moving[ns]
	if !ok {
		r.moving[ns] = time.Now()
		r.Set.setMoving(ns, true)
		return fmt.Sprintf("moving from inbox %s", cur), false
	}
	if time.Since(since) < inboxMoveSettle {
		return fmt.Sprintf("moving from inbox %s", cur), false
	}
	unlock, ok := r.Set.fenceForMove(ns, inboxCallTimeout)
	if !ok {
		return hold("a look at one of its objects is still under way")
	}
	defer unlock()
	cctx, cancel := context.WithTimeout(ctx, inboxCallTimeout)
	defer cancel()
	if why := r.recordedNotShown(cctx, eng, cur, ns); why != "" {
		r.wakeLater(ns)
		return hold(why)
	}
	if _, err := eng.ForgetSchedules(cctx, ns); err != nil {
		r.wakeLater(ns)
		return hold(fmt.Sprintf("deleting its schedules from inbox %s failed", cur))
	}
	if why := r.unfinishedIn(ctx, eng, cur, ns); why != "" {
		// Its schedules go back to cur with their next look.
		r.wakeLater(ns)
		return hold(why)
	}
	var regs workflowv1alpha1.WorkflowRegistryList
	if err := r.List(ctx, &regs, client.InNamespace(ns)); err != nil {
		r.wakeLater(ns)
		return hold(fmt.Sprintf("listing its WorkflowRegistries failed: %v", err))
	}
	for _, reg := range regs.Items {
		entries, err := eng.ListRegistryEntriesByOwner(cctx, ns, reg.Name)
		if err == nil {
			for _, e := range entries {
				if _, err = eng.DeleteRegistryEntry(cctx, e.WorkflowName, ns, reg.Name); err != nil {
					break
				}
			}
		}
		if err != nil {
			r.wakeLater(ns)
			return hold(fmt.Sprintf("deleting its registry entries from inbox %s failed", cur))
		}
	}
	return "", true
}

// runsNotShown says why ns cannot move while one of its WorkflowRuns shows
// a run that has not finished: its run may have just finished in the inbox
// it leaves, and the object must show that before the namespace goes (in
// the new inbox, the object would find no run and record it again).
func (r *WorkflowInboxReconciler) runsNotShown(ctx context.Context, ns string) string {
	var runs workflowv1alpha1.WorkflowRunList
	if err := r.List(ctx, &runs, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Sprintf("listing its WorkflowRuns failed: %v", err)
	}
	n := 0
	for i := range runs.Items {
		if runs.Items[i].Status.RunID != "" && !runs.Items[i].Status.Phase.Finished() {
			n++
		}
	}
	if n > 0 {
		return fmt.Sprintf("%d of its WorkflowRuns show a run not finished yet", n)
	}
	return ""
}

// recordedNotShown reads the namespace's WorkflowRuns from the API server
// (not the cache), with no pass under way: one showing a run not finished,
// or one not finished that shows no run while cur holds one for it (a
// schedule's tick just fired, a run recorded a moment ago), keeps the
// namespace where it is until the object catches up; in the new inbox it
// would record its run again.
func (r *WorkflowInboxReconciler) recordedNotShown(ctx context.Context, eng interface {
	FindRunByIdempotencyKey(context.Context, string) (string, error)
}, cur, ns string) string {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var runs workflowv1alpha1.WorkflowRunList
	if err := reader.List(ctx, &runs, client.InNamespace(ns)); err != nil {
		return fmt.Sprintf("listing its WorkflowRuns failed: %v", err)
	}
	for i := range runs.Items {
		wfr := &runs.Items[i]
		if wfr.Status.Phase.Finished() || !wfr.DeletionTimestamp.IsZero() {
			continue
		}
		if wfr.Status.RunID != "" {
			return fmt.Sprintf("WorkflowRun %s shows a run not finished yet", wfr.Name)
		}
		id, err := eng.FindRunByIdempotencyKey(ctx, idempotencyKey(wfr))
		if err != nil && !errors.Is(err, engine.ErrNotFound) {
			return fmt.Sprintf("inbox %s, which serves it now, did not say whether WorkflowRun %s has a run", cur, wfr.Name)
		}
		if id != "" {
			return fmt.Sprintf("WorkflowRun %s does not show its run in inbox %s yet", wfr.Name, cur)
		}
	}
	return ""
}

// unfinishedIn says why ns cannot leave cur while cur holds unfinished
// runs of it.
func (r *WorkflowInboxReconciler) unfinishedIn(ctx context.Context, eng interface {
	UnfinishedRuns(context.Context, string, int) (int, error)
}, cur, ns string) string {
	cctx, cancel := context.WithTimeout(ctx, inboxCallTimeout)
	defer cancel()
	n, err := eng.UnfinishedRuns(cctx, ns, 1000)
	switch {
	case err != nil:
		return fmt.Sprintf("inbox %s, which serves it now, did not say how many of its runs are unfinished", cur)
	case n >= 2000:
		return fmt.Sprintf("inbox %s holds at least 2000 unfinished runs of it", cur)
	case n > 0:
		return fmt.Sprintf("inbox %s holds %d unfinished runs of it", cur, n)
	}
	return ""
}

// wakeLater asks for a look at every object of ns (after a move that was
// given up, its schedules are written back to the inbox it stays in).
func (r *WorkflowInboxReconciler) wakeLater(ns string) {
	if r.Wake != nil {
		r.pendingWakes = append(r.pendingWakes, ns)
	}
}

// connect reads the inbox's Secret and connects to its database; it
// returns the Ready condition and the schema version.
func (r *WorkflowInboxReconciler) connect(ctx context.Context, in *workflowv1alpha1.WorkflowInbox) (metav1.Condition, int) {
	cond := func(ok bool, reason, msg string) metav1.Condition {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		return metav1.Condition{Type: workflowv1alpha1.ConditionInboxReady, Status: st, Reason: reason,
			Message: truncate(msg, 1024), ObservedGeneration: in.Generation}
	}
	ref := in.Spec.SecretRef
	r.Set.mu.Lock()
	r.Set.tried[in.Name] = true
	r.Set.mu.Unlock()
	if last, ok := r.secretRead[in.Name]; ok && last.generation == in.Generation && time.Since(last.at) < inboxResyncPeriod {
		if last.failed != nil {
			// Not tried again before inboxResyncPeriod: a connection
			// attempt to a database that does not answer takes seconds.
			// (A connection it had may still serve: the failure is the
			// Secret's URL's, and stays said.)
			return *last.failed, in.Status.SchemaVersion
		}
		if _, connected := r.Set.Engine(in.Name); connected {
			return r.health(in, cond)
		}
	}
	url, err := InboxSecretURL(ctx, r.APIReader, in)
	switch {
	case errors.Is(err, errSecretNotFound):
		return cond(false, workflowv1alpha1.ReasonSecretNotFound,
			fmt.Sprintf("Secret %s/%s not found", ref.Namespace, ref.Name)), in.Status.SchemaVersion
	case errors.Is(err, errSecretKeyMissing):
		r.secretRead[in.Name] = secretRead{at: time.Now(), generation: in.Generation}
		return cond(false, workflowv1alpha1.ReasonSecretKeyMissing, err.Error()), in.Status.SchemaVersion
	case err != nil:
		return cond(false, workflowv1alpha1.ReasonSecretNotFound, err.Error()), in.Status.SchemaVersion
	}
	r.secretRead[in.Name] = secretRead{at: time.Now(), generation: in.Generation}
	_, err = r.Set.connect(ctx, in.Name, url, len(in.Status.Namespaces) > 0, in.Status.Database, func(ctx context.Context, p *pgxpool.Pool) (int, error) {
		v, err := r.Migrate(ctx, p)
		if err != nil {
			return 0, migrationError{err}
		}
		return v, nil
	})
	if err != nil {
		var me migrationError
		var taken databaseTakenError
		var changed databaseChangedError
		failed := cond(false, workflowv1alpha1.ReasonUnreachable, err.Error())
		switch {
		case errors.As(err, &me):
			failed = cond(false, workflowv1alpha1.ReasonMigrationFailed, err.Error())
		case errors.As(err, &taken):
			failed = cond(false, workflowv1alpha1.ReasonDatabaseTaken, capitalize(err.Error()))
		case errors.As(err, &changed):
			failed = cond(false, workflowv1alpha1.ReasonDatabaseChanged, capitalize(err.Error()))
		}
		if _, connected := r.Set.Engine(in.Name); !connected && failed.Reason == workflowv1alpha1.ReasonUnreachable {
			// Never connected (or not since this manager started): its
			// database is as down as one that stopped answering.
			r.Set.setUpMetric(in.Name, false)
		}
		r.secretRead[in.Name] = secretRead{at: time.Now(), generation: in.Generation, failed: &failed}
		return failed, in.Status.SchemaVersion
	}
	return r.health(in, cond)
}

// health is the Ready condition of a connected inbox, from its last ping.
func (r *WorkflowInboxReconciler) health(in *workflowv1alpha1.WorkflowInbox,
	cond func(bool, string, string) metav1.Condition) (metav1.Condition, int) {
	r.Set.mu.RLock()
	c := r.Set.conns[in.Name]
	r.Set.mu.RUnlock()
	if c == nil {
		return cond(false, workflowv1alpha1.ReasonUnreachable, "not connected"), in.Status.SchemaVersion
	}
	if up, cause := c.health(); !up {
		return cond(false, workflowv1alpha1.ReasonUnreachable, fmt.Sprintf("the database does not answer: %v", cause)), c.schema
	}
	return cond(true, workflowv1alpha1.ReasonConnected, fmt.Sprintf("connected; schema version %d", c.schema)), c.schema
}

// writeStatus writes what the reconcile decided about one inbox, and an
// Event when its readiness changed.
func (r *WorkflowInboxReconciler) writeStatus(ctx context.Context, v *inboxView) error {
	in := v.obj
	st := in.Status.DeepCopy()
	st.ObservedGeneration = in.Generation
	st.SchemaVersion = v.schema
	if id := r.Set.identity(in.Name); id != "" {
		st.Database = id
	}
	slices.Sort(v.serves)
	st.Namespaces = slices.Compact(v.serves)
	st.NamespaceCount = len(st.Namespaces)
	held := map[string]string{}
	for ns, why := range v.held {
		held[ns] = why
	}
	for _, ns := range v.olderSel {
		if _, ok := held[ns]; !ok && !slices.Contains(st.Namespaces, ns) {
			held[ns] = "an older inbox selects it too and keeps it"
		}
	}
	st.HeldNamespaces = nil
	for ns := range held {
		st.HeldNamespaces = append(st.HeldNamespaces, ns)
	}
	slices.Sort(st.HeldNamespaces)
	heldCond := metav1.Condition{Type: workflowv1alpha1.ConditionNamespacesHeld, Status: metav1.ConditionFalse,
		Reason: workflowv1alpha1.ReasonNoneHeld, Message: "every namespace it selects is served here", ObservedGeneration: in.Generation}
	if len(held) > 0 {
		reason := workflowv1alpha1.ReasonSelectedByOlderInbox
		var parts []string
		for _, ns := range st.HeldNamespaces {
			if _, ok := v.held[ns]; ok {
				reason = workflowv1alpha1.ReasonUnfinishedRuns
			}
			parts = append(parts, ns+": "+held[ns])
		}
		heldCond = metav1.Condition{Type: workflowv1alpha1.ConditionNamespacesHeld, Status: metav1.ConditionTrue,
			Reason: reason, Message: truncate("served by another inbox for now: "+strings.Join(parts, "; "), 4096), ObservedGeneration: in.Generation}
	}
	contested := metav1.Condition{Type: workflowv1alpha1.ConditionNamespacesContested, Status: metav1.ConditionFalse,
		Reason: workflowv1alpha1.ReasonNoneContested, Message: "no newer inbox selects a namespace it is chosen for", ObservedGeneration: in.Generation}
	if len(v.contested) > 0 {
		var parts []string
		for ns, by := range v.contested {
			parts = append(parts, fmt.Sprintf("%s (also selected by %s)", ns, strings.Join(by, ", ")))
		}
		slices.Sort(parts)
		contested = metav1.Condition{Type: workflowv1alpha1.ConditionNamespacesContested, Status: metav1.ConditionTrue,
			Reason: workflowv1alpha1.ReasonSelectedByNewerInbox, ObservedGeneration: in.Generation,
			Message: truncate("kept here, the older inbox: "+strings.Join(parts, "; "), 4096)}
	}
	before := meta.FindStatusCondition(in.Status.Conditions, workflowv1alpha1.ConditionInboxReady)
	meta.SetStatusCondition(&st.Conditions, v.ready)
	meta.SetStatusCondition(&st.Conditions, heldCond)
	meta.SetStatusCondition(&st.Conditions, contested)
	if equality.Semantic.DeepEqual(*st, in.Status) {
		return nil
	}
	if r.Recorder != nil && (before == nil || before.Status != v.ready.Status || before.Reason != v.ready.Reason) {
		typ := corev1.EventTypeNormal
		if v.ready.Status != metav1.ConditionTrue {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(in, nil, typ, v.ready.Reason, "Connect", "%s", v.ready.Message)
	}
	in.Status = *st
	if err := r.Status().Update(ctx, in); err != nil {
		return fmt.Errorf("write status of WorkflowInbox %s: %w", in.Name, err)
	}
	return nil
}

// wakeRecovered wakes the namespaces of every inbox whose database
// answered again since the last reconcile, so their objects catch up at
// once rather than at their next retry, and the namespaces of moves given
// up.
func (r *WorkflowInboxReconciler) wakeRecovered(ctx context.Context, views map[string]*inboxView, listed map[string][]string) {
	wake := r.pendingWakes
	r.pendingWakes = nil
	names := []string{defaultInbox}
	for n := range views {
		names = append(names, n)
	}
	for _, name := range names {
		n := r.Set.recovered(name)
		if n == r.recoveries[name] {
			continue
		}
		r.recoveries[name] = n
		if v := views[name]; v != nil {
			wake = append(wake, v.serves...)
			continue
		}
		var all corev1.NamespaceList
		if err := r.List(ctx, &all); err == nil {
			for _, ns := range all.Items {
				if len(listed[ns.Name]) == 0 {
					wake = append(wake, ns.Name)
				}
			}
		}
	}
	if r.Wake != nil && len(wake) > 0 {
		r.Wake(ctx, wake)
	}
}

// finishDeletions removes the finalizer of every WorkflowInbox being
// deleted that serves no namespace any more, and disconnects it.
func (r *WorkflowInboxReconciler) finishDeletions(ctx context.Context, inboxes []*workflowv1alpha1.WorkflowInbox, views map[string]*inboxView) error {
	for _, in := range inboxes {
		if in.DeletionTimestamp.IsZero() || len(views[in.Name].serves) > 0 || !controllerutil.ContainsFinalizer(in, InboxFinalizer) {
			continue
		}
		r.Set.disconnect(in.Name)
		patch := client.MergeFrom(in.DeepCopy())
		controllerutil.RemoveFinalizer(in, InboxFinalizer)
		if err := r.Patch(ctx, in, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("remove the finalizer of WorkflowInbox %s: %w", in.Name, err)
		}
	}
	return nil
}
