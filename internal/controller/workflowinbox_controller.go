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
	// down: the inboxes last seen not answering.
	down map[string]bool
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
		r.moving, r.down, r.settling = map[string]time.Time{}, map[string]bool{}, map[string]string{}
	}
	var list workflowv1alpha1.WorkflowInboxList
	if err := r.List(ctx, &list); err != nil {
		return ctrl.Result{}, fmt.Errorf("list WorkflowInboxes: %w", err)
	}
	inboxes := byAge(list.Items)
	views := map[string]*inboxView{}
	for _, in := range inboxes {
		v := &inboxView{obj: in, held: map[string]string{}, contested: map[string][]string{}}
		views[in.Name] = v
		if in.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(in, InboxFinalizer) {
			patch := client.MergeFromWithOptions(in.DeepCopy(), client.MergeFromWithOptimisticLock{})
			controllerutil.AddFinalizer(in, InboxFinalizer)
			if err := r.Patch(ctx, in, patch); err != nil {
				return ctrl.Result{}, fmt.Errorf("add finalizer to WorkflowInbox %s: %w", in.Name, err)
			}
		}
		v.ready, v.schema = r.connect(ctx, in)
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
	served := map[string]string{}
	for _, in := range inboxes {
		for _, ns := range in.Status.Namespaces {
			if _, ok := served[ns]; !ok {
				served[ns] = in.Name
			}
		}
	}
	again := time.Duration(0)
	for ns, to := range r.settling {
		at := served[ns]
		if at == "" {
			at = defaultInbox
		}
		if at == to {
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
		cur := served[ns.Name]
		if cur == "" {
			cur = defaultInbox
		}
		want := defaultInbox
		for _, in := range inboxes {
			if !in.DeletionTimestamp.IsZero() || !selects(in, ns.Labels) {
				continue
			}
			if want == defaultInbox {
				want = in.Name
			} else {
				views[in.Name].olderSel = append(views[in.Name].olderSel, ns.Name)
				views[want].contested[ns.Name] = append(views[want].contested[ns.Name], in.Name)
			}
		}
		if _, ok := r.settling[ns.Name]; ok {
			// Just moved: placed where the cache will soon show it.
			r.serve(views, r.settling[ns.Name], ns.Name)
			continue
		}
		if want == cur {
			r.serve(views, cur, ns.Name)
			if _, ok := r.moving[ns.Name]; ok {
				delete(r.moving, ns.Name)
				r.Set.setMoving(ns.Name, false)
			}
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
			delete(r.moving, ns)
			delete(r.settling, ns)
			r.Set.setMoving(ns, false)
		}
	}

	// Statuses: the inboxes losing namespaces first, so that no namespace
	// is ever listed by two.
	slices.SortStableFunc(inboxes, func(a, b *workflowv1alpha1.WorkflowInbox) int {
		return loses(views[b.Name]) - loses(views[a.Name])
	})
	for _, in := range inboxes {
		if err := r.writeStatus(ctx, views[in.Name]); err != nil {
			return ctrl.Result{}, err
		}
	}
	for _, ns := range moved {
		// Still no new runs until the cache shows the move (see settling).
		for _, v := range views {
			if slices.Contains(v.serves, ns) {
				r.settling[ns] = v.obj.Name
			}
		}
		if _, ok := r.settling[ns]; !ok {
			r.settling[ns] = defaultInbox
		}
		again = minPositive(again, 500*time.Millisecond)
	}
	if len(moved) > 0 && r.Wake != nil {
		r.Wake(ctx, moved)
	}
	r.wakeRecovered(ctx, views, served)
	if err := r.finishDeletions(ctx, inboxes, views); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: minPositive(again, inboxResyncPeriod)}, nil
}

// loses is 1 when the view serves fewer namespaces than its status lists.
func loses(v *inboxView) int {
	for _, ns := range v.obj.Status.Namespaces {
		if !slices.Contains(v.serves, ns) {
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

// tryMove moves ns from cur to want when cur holds none of its unfinished
// runs. The first time it finds none, the namespace stops taking new runs
// (InboxSet answers NamespaceNotYetPlaced) and tryMove waits
// inboxMoveSettle, so that a run recorded meanwhile is counted; the second
// time, it forgets the namespace's schedules in cur and reports done.
// Otherwise it says why the namespace stays.
func (r *WorkflowInboxReconciler) tryMove(ctx context.Context, cur, want, ns string) (string, bool) {
	eng, ok := r.Set.Engine(cur)
	if !ok {
		delete(r.moving, ns)
		r.Set.setMoving(ns, false)
		return fmt.Sprintf("inbox %s, which serves it now, is not connected", cur), false
	}
	n, err := eng.UnfinishedRuns(ctx, ns)
	if err != nil {
		delete(r.moving, ns)
		r.Set.setMoving(ns, false)
		return fmt.Sprintf("inbox %s, which serves it now, does not answer", cur), false
	}
	if n > 0 {
		delete(r.moving, ns)
		r.Set.setMoving(ns, false)
		return fmt.Sprintf("inbox %s holds %d unfinished runs of it", cur, n), false
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
	if _, err := eng.ForgetSchedules(ctx, ns); err != nil {
		return fmt.Sprintf("forgetting its schedules in inbox %s failed", cur), false
	}
	var regs workflowv1alpha1.WorkflowRegistryList
	if err := r.List(ctx, &regs, client.InNamespace(ns)); err != nil {
		return fmt.Sprintf("listing its WorkflowRegistries failed: %v", err), false
	}
	for _, reg := range regs.Items {
		entries, err := eng.ListRegistryEntriesByOwner(ctx, ns, reg.Name)
		if err != nil {
			return fmt.Sprintf("forgetting its registry entries in inbox %s failed", cur), false
		}
		for _, e := range entries {
			if _, err := eng.DeleteRegistryEntry(ctx, e.WorkflowName, ns, reg.Name); err != nil {
				return fmt.Sprintf("forgetting its registry entries in inbox %s failed", cur), false
			}
		}
	}
	return "", true
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
	key := ref.Key
	if key == "" {
		key = "url"
	}
	var sec corev1.Secret
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &sec)
	if err != nil {
		reason := workflowv1alpha1.ReasonSecretNotFound
		msg := fmt.Sprintf("Secret %s/%s: %v", ref.Namespace, ref.Name, err)
		if apierrors.IsNotFound(err) {
			msg = fmt.Sprintf("Secret %s/%s not found", ref.Namespace, ref.Name)
		}
		return cond(false, reason, msg), in.Status.SchemaVersion
	}
	url := strings.TrimSpace(string(sec.Data[key]))
	if url == "" {
		return cond(false, workflowv1alpha1.ReasonSecretKeyMissing,
			fmt.Sprintf("Secret %s/%s has no key %q (or it is empty)", ref.Namespace, ref.Name, key)), in.Status.SchemaVersion
	}
	c, err := r.Set.connect(ctx, in.Name, url, func(ctx context.Context, p *pgxpool.Pool) (int, error) {
		v, err := r.Migrate(ctx, p)
		if err != nil {
			return 0, migrationError{err}
		}
		return v, nil
	})
	if err != nil {
		var me migrationError
		if errors.As(err, &me) {
			return cond(false, workflowv1alpha1.ReasonMigrationFailed, err.Error()), in.Status.SchemaVersion
		}
		return cond(false, workflowv1alpha1.ReasonUnreachable, err.Error()), in.Status.SchemaVersion
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

// wakeRecovered wakes the namespaces of every inbox whose database answers
// again, so their objects catch up at once rather than at their next
// retry.
func (r *WorkflowInboxReconciler) wakeRecovered(ctx context.Context, views map[string]*inboxView, served map[string]string) {
	names := []string{defaultInbox}
	for n := range views {
		names = append(names, n)
	}
	for _, name := range names {
		up, _ := r.Set.Up(name)
		if !up {
			r.down[name] = true
			continue
		}
		if !r.down[name] {
			continue
		}
		delete(r.down, name)
		var nss []string
		if v := views[name]; v != nil {
			nss = v.serves
		} else {
			var all corev1.NamespaceList
			if err := r.List(ctx, &all); err == nil {
				for _, ns := range all.Items {
					if served[ns.Name] == "" {
						nss = append(nss, ns.Name)
					}
				}
			}
		}
		if r.Wake != nil && len(nss) > 0 {
			r.Wake(ctx, nss)
		}
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
