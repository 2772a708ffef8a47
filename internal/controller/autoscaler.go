package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// Autoscaler defaults.
const (
	DefaultAutoscaleInterval = 5 * time.Second
	DefaultAutoscaleDebounce = 100 * time.Millisecond
)

// Autoscaler scales the worker pools of every WorkflowRegistry by the queue
// depth of their type prefixes. It evaluates all pools with one inbox query,
// on a short interval and, debounced, whenever runs are inserted, so a pool
// at zero gets its first replica moments after its first run arrives. It
// writes replicas through the scale subresource. It is a manager Runnable
// (leader only).
type Autoscaler struct {
	Client   client.Client
	Engine   *engine.Engine
	Recorder recorder.EventRecorder
	Log      logr.Logger
	Metrics  *Metrics
	// Clock defaults to the real clock.
	Clock clock.PassiveClock
	// Interval between evaluations; DefaultAutoscaleInterval when zero.
	Interval time.Duration
	// Debounce after an insert notification; DefaultAutoscaleDebounce when zero.
	Debounce time.Duration
	// Namespace restricts scaling to one namespace; empty means all. Type
	// prefix ownership is decided over the registries of all namespaces.
	Namespace string
	// Serves, when set, restricts scaling to the namespaces it accepts
	// (those of one inbox, whose depth this autoscaler measures).
	Serves func(ctx context.Context, namespace string) bool
	// Down, optional, reports that the inbox's database does not answer:
	// pools keep their replicas and nothing is measured meanwhile.
	Down func() bool

	mu    sync.Mutex
	state map[string]*scaleState
	// gauged: the pools whose gauges this autoscaler set (their labels by
	// key), dropped when the pool goes.
	gauged map[string][3]string
}

// +kubebuilder:rbac:groups=apps,resources=deployments/scale;statefulsets/scale;replicasets/scale,verbs=get;update;patch
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch

// Start evaluates until ctx ends.
func (a *Autoscaler) Start(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	go func() {
		_ = a.Engine.Listen(ctx, engine.ListenConfig{
			Channels: []string{engine.ChannelRunCreated},
			OnNotify: func(engine.Notification) {
				select {
				case wake <- struct{}{}:
				default:
				}
			},
		})
	}()
	ticker := time.NewTicker(orDefault(a.Interval, DefaultAutoscaleInterval))
	defer ticker.Stop()
	for {
		if a.Down != nil && a.Down() {
			// Keep the replicas the pools have; measure again when it answers.
		} else if err := a.Evaluate(ctx); err != nil && ctx.Err() == nil {
			a.Log.Error(err, "Autoscaling evaluation failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-wake:
			// Let a burst of inserts land before measuring.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(orDefault(a.Debounce, DefaultAutoscaleDebounce)):
			}
		}
	}
}

// pool is one worker pool of one registry under evaluation.
type pool struct {
	reg    *workflowv1alpha1.WorkflowRegistry
	spec   workflowv1alpha1.WorkerPool
	policy poolPolicy
	key    string
	// conflicts are the pool's type prefixes owned by an older registry; a
	// pool with any is not scaled.
	conflicts []prefixConflict
}

func policyOf(w workflowv1alpha1.WorkerPool) poolPolicy {
	p := poolPolicy{Max: w.MaxReplicas, RunsPerReplica: DefaultRunsPerReplica,
		ScaleDownDelay: DefaultScaleDownDelay, ActivationRuns: DefaultActivationRuns}
	if w.MinReplicas != nil {
		p.Min = *w.MinReplicas
	}
	if w.RunsPerReplica != nil && *w.RunsPerReplica > 0 {
		p.RunsPerReplica = *w.RunsPerReplica
	}
	if w.ScaleDownDelay != nil {
		p.ScaleDownDelay = w.ScaleDownDelay.Duration
	}
	if w.ActivationRuns != nil {
		p.ActivationRuns = *w.ActivationRuns
	}
	return p
}

// Evaluate measures every pool's queue with one query and scales each pool.
func (a *Autoscaler) Evaluate(ctx context.Context) error {
	if a.state == nil {
		a.state = map[string]*scaleState{}
	}
	if a.Clock == nil {
		a.Clock = clock.RealClock{}
	}
	// Prefix ownership is cluster-wide, whatever namespace this scales.
	var regs workflowv1alpha1.WorkflowRegistryList
	if err := a.Client.List(ctx, &regs); err != nil {
		return fmt.Errorf("list WorkflowRegistries: %w", err)
	}
	conflicts := prefixOwnership(regs.Items)
	var pools, blocked []pool
	var queries []engine.PoolQuery
	for i := range regs.Items {
		reg := &regs.Items[i]
		if !reg.DeletionTimestamp.IsZero() || (a.Namespace != "" && reg.Namespace != a.Namespace) ||
			(a.Serves != nil && !a.Serves(ctx, reg.Namespace)) {
			continue
		}
		for _, w := range reg.Spec.Workers {
			p := pool{reg: reg, spec: w, policy: policyOf(w),
				key:       reg.Namespace + "/" + reg.Name + "/" + w.ScaleTargetRef.Name,
				conflicts: conflicts[reg.Namespace+"/"+reg.Name][w.ScaleTargetRef.Name]}
			if len(p.conflicts) > 0 {
				blocked = append(blocked, p)
				continue
			}
			pools = append(pools, p)
			queries = append(queries, engine.PoolQuery{TypePrefixes: w.TypePrefixes, Runtime: string(w.Runtime),
				Cap: p.policy.countCap(), Namespace: reg.Namespace})
		}
	}
	a.forgetGone(pools)
	if len(pools)+len(blocked) == 0 {
		return nil
	}
	var depths []engine.QueueDepth
	if len(queries) > 0 {
		var err error
		if depths, err = a.Engine.QueueDepths(ctx, queries); err != nil {
			return err
		}
	}
	statuses := map[*workflowv1alpha1.WorkflowRegistry][]workflowv1alpha1.WorkerPoolStatus{}
	for i, p := range pools {
		st := a.scalePool(ctx, p, depths[i])
		statuses[p.reg] = append(statuses[p.reg], st)
	}
	for _, p := range blocked {
		statuses[p.reg] = append(statuses[p.reg], a.blockedPool(p))
	}
	for reg, st := range statuses {
		// Report pools in spec order.
		order := map[string]int{}
		for i, w := range reg.Spec.Workers {
			order[w.ScaleTargetRef.Name] = i
		}
		slices.SortStableFunc(st, func(x, y workflowv1alpha1.WorkerPoolStatus) int { return order[x.Name] - order[y.Name] })
	}
	for reg, st := range statuses {
		if err := a.writeStatus(ctx, reg, st); err != nil && ctx.Err() == nil {
			a.Log.Error(err, "Writing worker pool status failed", "workflowregistry", client.ObjectKeyFromObject(reg))
		}
	}
	return nil
}

// forgetGone drops the scale-down memory of pools that no longer exist.
func (a *Autoscaler) forgetGone(pools []pool) {
	live := map[string]bool{}
	for _, p := range pools {
		live[p.key] = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.state {
		if !live[k] {
			delete(a.state, k)
		}
	}
	for k, l := range a.gauged {
		if !live[k] {
			// A pool removed (or whose namespace another inbox serves now)
			// leaves no gauge frozen at its last value.
			delete(a.gauged, k)
			if a.Metrics != nil {
				for _, g := range []*prometheus.GaugeVec{a.Metrics.PoolRunnable, a.Metrics.PoolDesiredReplicas,
					a.Metrics.PoolMaxReplicas, a.Metrics.PoolReplicas} {
					g.DeleteLabelValues(l[0], l[1], l[2])
				}
			}
		}
	}
}

func (a *Autoscaler) stateOf(key string) *scaleState {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.state[key]
	if st == nil {
		st = &scaleState{}
		a.state[key] = st
	}
	return st
}

// previous returns the pool's last reported status, if any.
func previous(reg *workflowv1alpha1.WorkflowRegistry, name string) workflowv1alpha1.WorkerPoolStatus {
	for _, s := range reg.Status.Workers {
		if s.Name == name {
			return *s.DeepCopy()
		}
	}
	return workflowv1alpha1.WorkerPoolStatus{Name: name}
}

// scalePool computes and applies one pool's replica count and returns its
// status.
func (a *Autoscaler) scalePool(ctx context.Context, p pool, d engine.QueueDepth) workflowv1alpha1.WorkerPoolStatus {
	ref := p.spec.ScaleTargetRef
	st := previous(p.reg, ref.Name)
	st.Runnable, st.Leased = int32(min(d.Runnable, 1<<31-1)), int32(min(d.Leased, 1<<31-1))
	gen := p.reg.Generation
	setReady := func(status metav1.ConditionStatus, reason, msg string) {
		setCondition(&st.Conditions, metav1.Condition{Type: workflowv1alpha1.ConditionReady, Status: status,
			Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	if a.Metrics != nil {
		a.Metrics.PoolRunnable.WithLabelValues(p.reg.Namespace, p.reg.Name, ref.Name).Set(float64(d.Runnable))
		a.mu.Lock()
		if a.gauged == nil {
			a.gauged = map[string][3]string{}
		}
		a.gauged[p.key] = [3]string{p.reg.Namespace, p.reg.Name, ref.Name}
		a.mu.Unlock()
	}

	target, scale, err := a.getScale(ctx, p.reg.Namespace, ref)
	if err != nil {
		reason, msg := workflowv1alpha1.ReasonNotScalable, fmt.Sprintf("%s %s cannot be scaled: %v", ref.Kind, ref.Name, err)
		if apierrors.IsNotFound(err) {
			reason, msg = workflowv1alpha1.ReasonTargetNotFound, fmt.Sprintf("%s %s/%s does not exist", ref.Kind, p.reg.Namespace, ref.Name)
		}
		setReady(metav1.ConditionFalse, reason, msg)
		st.DesiredReplicas, st.Replicas = 0, 0
		return st
	}
	current := scale.Spec.Replicas
	st.Replicas = current
	desired := p.policy.desiredReplicas(current, d.Runnable, d.Leased)
	st.DesiredReplicas = desired
	if a.Metrics != nil {
		a.Metrics.PoolDesiredReplicas.WithLabelValues(p.reg.Namespace, p.reg.Name, ref.Name).Set(float64(desired))
		a.Metrics.PoolMaxReplicas.WithLabelValues(p.reg.Namespace, p.reg.Name, ref.Name).Set(float64(p.policy.Max))
		a.Metrics.PoolReplicas.WithLabelValues(p.reg.Namespace, p.reg.Name, ref.Name).Set(float64(current))
	}
	if hpa, err := a.conflictingHPA(ctx, p.reg.Namespace, ref); err != nil {
		setReady(metav1.ConditionUnknown, workflowv1alpha1.ReasonHPAConflict, "could not check for HorizontalPodAutoscalers: "+err.Error())
		return st
	} else if hpa != "" {
		setReady(metav1.ConditionFalse, workflowv1alpha1.ReasonHPAConflict, fmt.Sprintf(
			"HorizontalPodAutoscaler %s also scales %s %s; the pool leaves its replicas alone until one of the two is removed",
			hpa, ref.Kind, ref.Name))
		return st
	}

	next, change := p.policy.decide(a.stateOf(p.key), a.Clock.Now(), current, desired)
	if change {
		scale.Spec.Replicas = next
		if err := a.updateScale(ctx, target, scale); err != nil {
			setReady(metav1.ConditionFalse, workflowv1alpha1.ReasonNotScalable, fmt.Sprintf("scaling %s %s failed: %v", ref.Kind, ref.Name, err))
			return st
		}
		reason := fmt.Sprintf("%s runnable and %s leased runs, %d per replica",
			atLeast(d.Runnable, p.policy.countCap()), atLeast(d.Leased, p.policy.countCap()), p.policy.RunsPerReplica)
		now := metav1.NewTime(a.Clock.Now())
		st.Replicas, st.LastScaleTime, st.LastScaleReason = next, &now, reason
		a.Recorder.Eventf(p.reg, nil, corev1.EventTypeNormal, workflowv1alpha1.ReasonScaled, "Scale",
			"scaled %s from %d to %d: %s runnable runs", ref.Name, current, next, atLeast(d.Runnable, p.policy.countCap()))
		a.Log.Info("Scaled worker pool", "workflowregistry", client.ObjectKeyFromObject(p.reg),
			"target", ref.Name, "from", current, "to", next, "runnable", d.Runnable, "leased", d.Leased)
	}
	msg := fmt.Sprintf("%s %s has %d replica(s), %d desired", ref.Kind, ref.Name, st.Replicas, desired)
	if c := p.policy.countCap(); d.Runnable >= c || d.Leased >= c {
		msg += fmt.Sprintf("; the queue holds at least %d runs, as many as the pool can use (counted no further)", c)
	}
	if st.Replicas > desired {
		msg += fmt.Sprintf("; scaling down after the desired count stays lower for %s", p.policy.ScaleDownDelay)
	}
	setReady(metav1.ConditionTrue, workflowv1alpha1.ReasonScaling, msg)
	return st
}

// blockedPool reports a pool whose prefixes overlap ones owned by another
// registry. Its target is neither read nor scaled.
func (a *Autoscaler) blockedPool(p pool) workflowv1alpha1.WorkerPoolStatus {
	st := previous(p.reg, p.spec.ScaleTargetRef.Name)
	st.Runnable, st.Leased, st.DesiredReplicas = 0, 0, 0
	if a.Metrics != nil {
		// Not measured: drop the gauges rather than leave stale values.
		a.Metrics.PoolRunnable.DeleteLabelValues(p.reg.Namespace, p.reg.Name, p.spec.ScaleTargetRef.Name)
		a.Metrics.PoolDesiredReplicas.DeleteLabelValues(p.reg.Namespace, p.reg.Name, p.spec.ScaleTargetRef.Name)
		a.Metrics.PoolMaxReplicas.DeleteLabelValues(p.reg.Namespace, p.reg.Name, p.spec.ScaleTargetRef.Name)
		a.Metrics.PoolReplicas.DeleteLabelValues(p.reg.Namespace, p.reg.Name, p.spec.ScaleTargetRef.Name)
	}
	msg := prefixConflictMessage(p.conflicts)
	if prev := meta.FindStatusCondition(st.Conditions, workflowv1alpha1.ConditionReady); prev == nil || prev.Reason != workflowv1alpha1.ReasonPrefixConflict {
		c := p.conflicts[0]
		a.Recorder.Eventf(p.reg, nil, corev1.EventTypeWarning, workflowv1alpha1.ReasonPrefixConflict, "Scale",
			"%s is not scaled: type prefix %q overlaps a prefix owned by WorkflowRegistry %s (%d conflicting prefix(es))",
			p.spec.ScaleTargetRef.Name, c.Prefix, c.Owner, len(p.conflicts))
	}
	setCondition(&st.Conditions, metav1.Condition{Type: workflowv1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: workflowv1alpha1.ReasonPrefixConflict, Message: msg, ObservedGeneration: p.reg.Generation})
	return st
}

// getScale reads the target's scale subresource. The target is handled as
// unstructured, so any kind that serves /scale works.
func (a *Autoscaler) getScale(ctx context.Context, ns string, ref workflowv1alpha1.ScaleTargetRef) (client.Object, *autoscalingv1.Scale, error) {
	gv, err := schema.ParseGroupVersion(orString(ref.APIVersion, "apps/v1"))
	if err != nil {
		return nil, nil, fmt.Errorf("apiVersion %q: %w", ref.APIVersion, err)
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gv.WithKind(orString(ref.Kind, "Deployment")))
	obj.SetNamespace(ns)
	obj.SetName(ref.Name)
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(autoscalingv1.SchemeGroupVersion.WithKind("Scale"))
	if err := a.Client.SubResource("scale").Get(ctx, obj, u); err != nil {
		return nil, nil, err
	}
	scale := &autoscalingv1.Scale{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, scale); err != nil {
		return nil, nil, fmt.Errorf("read scale: %w", err)
	}
	return obj, scale, nil
}

// updateScale writes the target's replica count through /scale.
func (a *Autoscaler) updateScale(ctx context.Context, target client.Object, scale *autoscalingv1.Scale) error {
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(scale)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: raw}
	u.SetGroupVersionKind(autoscalingv1.SchemeGroupVersion.WithKind("Scale"))
	return a.Client.SubResource("scale").Update(ctx, target, client.WithSubResourceBody(u))
}

func orString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// conflictingHPA names an HPA that scales the same target, or "".
func (a *Autoscaler) conflictingHPA(ctx context.Context, ns string, ref workflowv1alpha1.ScaleTargetRef) (string, error) {
	var hpas autoscalingv2.HorizontalPodAutoscalerList
	if err := a.Client.List(ctx, &hpas, client.InNamespace(ns)); err != nil {
		if meta.IsNoMatchError(err) {
			return "", nil
		}
		return "", err
	}
	for _, h := range hpas.Items {
		t := h.Spec.ScaleTargetRef
		if t.Name == ref.Name && t.Kind == orString(ref.Kind, "Deployment") {
			return h.Name, nil
		}
	}
	return "", nil
}

// writeStatus records the pools' status on the registry when it changed.
func (a *Autoscaler) writeStatus(ctx context.Context, reg *workflowv1alpha1.WorkflowRegistry, pools []workflowv1alpha1.WorkerPoolStatus) error {
	if equality.Semantic.DeepEqual(reg.Status.Workers, pools) {
		return nil
	}
	before := reg.DeepCopy()
	reg.Status.Workers = pools
	return client.IgnoreNotFound(a.Client.Status().Patch(ctx, reg, client.MergeFrom(before)))
}

// atLeast renders a count bounded by limit: "n", or "n or more" when it
// reached the bound.
func atLeast(n, limit int64) string {
	if n >= limit {
		return fmt.Sprintf("%d or more", n)
	}
	return fmt.Sprintf("%d", n)
}
