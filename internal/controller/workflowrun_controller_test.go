package controller_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

var _ = Describe("WorkflowRun controller", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("mirrors a run into the inbox and reports its success", func() {
		wfr := newRun(ns, "echo", "test.echo.v1", map[string]any{"hello": "world"})
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		Eventually(phase(ns, "echo")).Should(Equal(workflowv1alpha1.PhaseSucceeded))

		got := getRun(ns, "echo")()
		Expect(got.Finalizers).To(ContainElement(controller.Finalizer))
		Expect(got.Status.RunID).NotTo(BeEmpty())
		Expect(got.Status.Attempt).To(BeEquivalentTo(1))
		Expect(got.Status.Attempts).To(Equal("1/3"))
		Expect(got.Status.LeasedBy).To(Equal("suite-worker"))
		Expect(got.Status.StartedAt).NotTo(BeNil())
		Expect(got.Status.FinishedAt).NotTo(BeNil())
		Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		Expect(string(got.Status.Result.Raw)).To(MatchJSON(`{"hello":"world"}`))
		Expect(condition(got.Status.Conditions, workflowv1alpha1.ConditionAccepted).Status).To(Equal(metav1.ConditionTrue))
		fin := condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished)
		Expect(fin.Status).To(Equal(metav1.ConditionTrue))
		Expect(fin.Reason).To(Equal("Succeeded"))

		run, err := eng.GetRun(ctx, got.Status.RunID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.Source).To(Equal(&engine.Source{Namespace: ns, Name: "echo", UID: string(got.UID)}))
		Expect(run.IdempotencyKey).To(Equal("k8s-uid:" + string(got.UID)))
		Eventually(func() []string { return lifecycleReasons(ns, "echo") }).Should(Equal([]string{"Succeeded"}))
	})

	It("reports retries, then success with the right attempt count", func() {
		wfr := newRun(ns, "flaky", "test.fail.v1", map[string]any{"failTimes": 2})
		wfr.Spec.RetryPolicy = &workflowv1alpha1.RetryPolicy{BaseDelay: &metav1.Duration{Duration: time.Second}}
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		// Between attempts the status shows the error and the next attempt time.
		Eventually(func(g Gomega) {
			got := getRun(ns, "flaky")()
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.Status.LastError).To(ContainSubstring("planned failure"))
		}).Should(Succeed())
		Eventually(phase(ns, "flaky")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		got := getRun(ns, "flaky")()
		Expect(got.Status.Attempt).To(BeEquivalentTo(3))
		Expect(got.Status.NextAttemptAt).To(BeNil())
		Eventually(func() []string { return lifecycleReasons(ns, "flaky") }).Should(Equal([]string{
			"Retrying", "Retrying", "Succeeded"}))
		var retrying string
		for _, e := range eventsFor(ns, "flaky") {
			if e.Reason == "Retrying" {
				retrying = e.Note
				break
			}
		}
		Expect(retrying).To(ContainSubstring("Attempt 1 failed: planned failure"))
		Expect(retrying).To(ContainSubstring("next attempt at"))
	})

	It("reports a run that fails for good", func() {
		wfr := newRun(ns, "doomed", "test.fail.v1", map[string]any{"failTimes": 5})
		wfr.Spec.MaxAttempts = int32p(2)
		wfr.Spec.RetryPolicy = &workflowv1alpha1.RetryPolicy{BaseDelay: &metav1.Duration{Duration: time.Second}}
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		Eventually(phase(ns, "doomed")).Should(Equal(workflowv1alpha1.PhaseFailed))
		got := getRun(ns, "doomed")()
		Expect(got.Status.Attempts).To(Equal("2/2"))
		fin := condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished)
		Expect(fin.Reason).To(Equal("Failed"))
		Expect(fin.Message).To(ContainSubstring("planned failure"))
		Eventually(func() []string { return lifecycleReasons(ns, "doomed") }).Should(Equal([]string{
			"Retrying", "Failed"}))
	})

	It("retries a failed run from where it stopped when spec.retries is raised, and refuses raises admission cannot allow", func() {
		wfr := newRun(ns, "again", "test.fail.v1", map[string]any{"failTimes": 2})
		wfr.Spec.MaxAttempts = int32p(2)
		wfr.Spec.RetryPolicy = &workflowv1alpha1.RetryPolicy{BaseDelay: &metav1.Duration{Duration: time.Second}}
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		// While it runs, a raise is refused at admission.
		Eventually(func() error {
			got := getRun(ns, "again")()
			if got.Status.Phase.Finished() {
				return nil
			}
			patch := client.MergeFrom(got.DeepCopy())
			got.Spec.Retries = 1
			err := k8sClient.Patch(ctx, got, patch)
			if err == nil {
				return StopTrying("a raise of spec.retries was admitted while the run was " + string(got.Status.Phase))
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.retries can be raised only when the run failed or was cancelled") {
				return StopTrying("unexpected error: " + err.Error())
			}
			return nil
		}).Should(Succeed())
		Eventually(phase(ns, "again")).Should(Equal(workflowv1alpha1.PhaseFailed))

		got := getRun(ns, "again")()
		patch := client.MergeFrom(got.DeepCopy())
		got.Spec.Retries = 2
		err := k8sClient.Patch(ctx, got, patch)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "raising spec.retries by two: %v", err)
		Expect(err.Error()).To(ContainSubstring("spec.retries can only be raised, by one at a time"))

		got = getRun(ns, "again")()
		patch = client.MergeFrom(got.DeepCopy())
		got.Spec.Retries = 1
		Expect(k8sClient.Patch(ctx, got, patch)).To(Succeed())
		Eventually(phase(ns, "again")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		got = getRun(ns, "again")()
		Expect(got.Status.Retries).To(BeEquivalentTo(1))
		Expect(got.Status.Attempt).To(BeEquivalentTo(3))
		Expect(got.Status.Attempts).To(Equal("3/4"))
		Expect(condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished).Reason).To(Equal("Succeeded"))
		Eventually(func() []string { return eventReasons(ns, "again") }).Should(ContainElement(workflowv1alpha1.ReasonRetried))
		trail, err := eng.ListEventsAfter(ctx, got.Status.RunID, 0)
		Expect(err).NotTo(HaveOccurred())
		var by []string
		for _, e := range trail {
			if e.Type == engine.EventRetried && strings.Contains(string(e.Data), "retry_run") {
				by = append(by, string(e.Data))
			}
		}
		Expect(by).To(HaveLen(1))
		Expect(by[0]).To(ContainSubstring("spec.retries of WorkflowRun " + ns + "/again"))

		// Succeeded: no further raise is admitted.
		got = getRun(ns, "again")()
		patch = client.MergeFrom(got.DeepCopy())
		got.Spec.Retries = 2
		err = k8sClient.Patch(ctx, got, patch)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "raising spec.retries of a succeeded run: %v", err)
		Expect(err.Error()).To(ContainSubstring("status.phase is Succeeded"))
	})

	It("refuses to retry a run cancelled through spec.cancel", func() {
		Expect(k8sClient.Create(ctx, newRun(ns, "stopped", "test.sleep.v1", nil))).To(Succeed())
		Eventually(phase(ns, "stopped")).Should(Equal(workflowv1alpha1.PhaseRunning))
		wfr := getRun(ns, "stopped")()
		patch := client.MergeFrom(wfr.DeepCopy())
		wfr.Spec.Cancel = true
		Expect(k8sClient.Patch(ctx, wfr, patch)).To(Succeed())
		Eventually(phase(ns, "stopped")).Should(Equal(workflowv1alpha1.PhaseCancelled))
		wfr = getRun(ns, "stopped")()
		patch = client.MergeFrom(wfr.DeepCopy())
		wfr.Spec.Retries = 1
		err := k8sClient.Patch(ctx, wfr, patch)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("cancelled through spec.cancel"))
	})

	It("cancels through spec.cancel and stops the worker", func() {
		Expect(k8sClient.Create(ctx, newRun(ns, "long", "test.sleep.v1", nil))).To(Succeed())
		Eventually(phase(ns, "long")).Should(Equal(workflowv1alpha1.PhaseRunning))
		wfr := getRun(ns, "long")()
		patch := client.MergeFrom(wfr.DeepCopy())
		wfr.Spec.Cancel = true
		Expect(k8sClient.Patch(ctx, wfr, patch)).To(Succeed())
		Eventually(phase(ns, "long")).Should(Equal(workflowv1alpha1.PhaseCancelled))
		got := getRun(ns, "long")()
		Expect(condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished).Reason).To(Equal("Cancelled"))
		Expect(condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished).Message).To(Equal(
			"cancelled by spec.cancel of WorkflowRun " + ns + "/long while attempt 1 ran on worker suite-worker"))
		// It was seen running: its start was told.
		Eventually(func() []string { return eventReasons(ns, "long") }).Should(Equal([]string{
			"Started", "Cancelled"}))
		// The worker let go: no heartbeat extends the lease any more.
		Consistently(func() engine.Status {
			run, _ := eng.GetRun(ctx, got.Status.RunID)
			return run.Status
		}, 2*time.Second).Should(Equal(engine.StatusCancelled))
	})

	It("cancels an unfinished run when its object is deleted, and keeps the inbox row", func() {
		Expect(k8sClient.Create(ctx, newRun(ns, "doomed-by-delete", "test.sleep.v1", nil))).To(Succeed())
		Eventually(phase(ns, "doomed-by-delete")).Should(Equal(workflowv1alpha1.PhaseRunning))
		runID := getRun(ns, "doomed-by-delete")().Status.RunID
		Expect(k8sClient.Delete(ctx, getRun(ns, "doomed-by-delete")())).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "doomed-by-delete"}, &workflowv1alpha1.WorkflowRun{}))
		}).Should(BeTrue())
		run, err := eng.GetRun(ctx, runID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.Status).To(Equal(engine.StatusCancelled))
		// The trail says who cancelled it.
		evs, err := eng.ListEvents(ctx, runID)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(evs[len(evs)-1].Data)).To(And(
			ContainSubstring(`"reason": "requested"`),
			ContainSubstring(`"by": "deletion of WorkflowRun `+ns+`/doomed-by-delete"`)))
	})

	It("deletes a finished object after ttlSecondsAfterFinished, keeping the inbox row and trail", func() {
		wfr := newRun(ns, "short-lived", "test.echo.v1", nil)
		wfr.Spec.TTLSecondsAfterFinished = int32p(1)
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		// The object may be gone a second after it finished: find its run
		// through the source recorded in the inbox.
		var runID string
		Eventually(func() error {
			return pool.QueryRow(ctx, `select id from workflow.workflow_run
				where source_namespace = $1 and source_name = 'short-lived'`, ns).Scan(&runID)
		}).Should(Succeed())
		Eventually(getRun(ns, "short-lived"), 10*time.Second).Should(BeNil())
		run, err := eng.GetRun(ctx, runID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.Status).To(Equal(engine.StatusSucceeded))
		evs, err := eng.ListEvents(ctx, runID)
		Expect(err).NotTo(HaveOccurred())
		Expect(evs).NotTo(BeEmpty())
	})

	It("gives two namespaces with the same idempotencyKey two different runs, and one namespace one", func() {
		other := newNamespace()
		for _, n := range []string{ns, other} {
			wfr := newRun(n, "a", "test.echo.v1", map[string]any{"ns": n})
			wfr.Spec.IdempotencyKey = "shared-key"
			Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		}
		// The twin shares the run only with the same type and payload (Issue
		// 10, item 1).
		twin := newRun(ns, "b", "test.echo.v1", map[string]any{"ns": ns})
		twin.Spec.IdempotencyKey = "shared-key"
		Expect(k8sClient.Create(ctx, twin)).To(Succeed())
		for _, k := range []client.ObjectKey{{Namespace: ns, Name: "a"}, {Namespace: other, Name: "a"}, {Namespace: ns, Name: "b"}} {
			Eventually(phase(k.Namespace, k.Name)).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		}
		a, b, o := getRun(ns, "a")(), getRun(ns, "b")(), getRun(other, "a")()
		Expect(a.Status.RunID).NotTo(Equal(o.Status.RunID))
		Expect(a.Status.RunID).To(Equal(b.Status.RunID))
		Expect(string(o.Status.Result.Raw)).To(MatchJSON(`{"ns":"` + other + `"}`))
	})

	It("leaves a disabled type pending with a condition saying why", func() {
		reg := &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gate"},
			Spec: workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
				{Name: "test.echo.v7", Runtime: workflowv1alpha1.RuntimeGo, Enabled: new(bool)},
			}},
		}
		Expect(k8sClient.Create(ctx, reg)).To(Succeed())
		Eventually(func() error { _, err := eng.GetRegistryEntry(ctx, ns, "test.echo.v7"); return err }).Should(Succeed())
		Expect(k8sClient.Create(ctx, newRun(ns, "gated", "test.echo.v7", nil))).To(Succeed())
		Eventually(func(g Gomega) {
			got := getRun(ns, "gated")()
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhasePending))
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionBlocked)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(ContainSubstring("test.echo.v7 is disabled in WorkflowRegistry " + ns + "/gate"))
		}).Should(Succeed())
		Consistently(phase(ns, "gated"), time.Second).Should(Equal(workflowv1alpha1.PhasePending))
	})

	It("omits a result above the status limit with a condition saying so", func() {
		Expect(k8sClient.Create(ctx, newRun(ns, "big", "test.big.v1", nil))).To(Succeed())
		Eventually(phase(ns, "big")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		got := getRun(ns, "big")()
		Expect(got.Status.Result).To(BeNil())
		c := condition(got.Status.Conditions, workflowv1alpha1.ConditionResultTruncated)
		Expect(c).NotTo(BeNil())
		Expect(c.Message).To(ContainSubstring("above the 16384"))
	})

	It("never inserts twice when a second manager instance reconciles the same objects", func() {
		for i := range 10 {
			Expect(k8sClient.Create(ctx, newRun(ns, "dup-"+string(rune('a'+i)), "test.echo.v1", nil))).To(Succeed())
		}
		// A second reconciler, as a restarted or competing manager would run,
		// reconciles every object from scratch (empty status).
		second := &controller.WorkflowRunReconciler{Client: k8sClient, Inbox: eng, Recorder: discardRecorder{}}
		for i := range 10 {
			name := "dup-" + string(rune('a'+i))
			var wfr workflowv1alpha1.WorkflowRun
			Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &wfr)).To(Succeed())
			_, err := second.Reconcile(ctx, reconcileRequest(ns, name))
			Expect(err).NotTo(HaveOccurred())
		}
		for i := range 10 {
			Eventually(phase(ns, "dup-"+string(rune('a'+i)))).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		}
		var n int
		Expect(pool.QueryRow(ctx, "select count(*) from workflow.workflow_run where source_namespace = $1", ns).Scan(&n)).To(Succeed())
		Expect(n).To(Equal(10))
	})

	// The finalizer was patched without optimistic
	// locking, so a finalizer another party added or removed meanwhile was
	// undone by the merge patch (which writes the whole list). The patch now
	// carries the resourceVersion; a conflict requeues, without an error.
	It("adds and removes its finalizer with optimistic locking, requeueing on a conflict", func() {
		const other = "example.com/other"
		// raceOnce changes the object behind the reconciler's back just
		// before its first patch.
		raceOnce := func(change func(*workflowv1alpha1.WorkflowRun)) interceptor.Funcs {
			raced := false
			return interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if !raced {
					raced = true
					var cur workflowv1alpha1.WorkflowRun
					Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), &cur)).To(Succeed())
					change(&cur)
					Expect(c.Update(ctx, &cur)).To(Succeed())
				}
				return c.Patch(ctx, obj, patch, opts...)
			}}
		}

		// Adding: another party adds its finalizer meanwhile.
		fresh := newRun(ns, "fresh", manualType(), nil)
		fresh.UID = types.UID("uid-" + randomSuffix())
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(fresh).
			WithStatusSubresource(&workflowv1alpha1.WorkflowRun{}).
			WithInterceptorFuncs(raceOnce(func(w *workflowv1alpha1.WorkflowRun) { controllerutil.AddFinalizer(w, other) })).Build()
		r := &controller.WorkflowRunReconciler{Client: c, Inbox: eng, Recorder: discardRecorder{}}
		res, err := r.Reconcile(ctx, reconcileRequest(ns, "fresh"))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeNumerically(">", 0), "a conflict is looked at again")
		var got workflowv1alpha1.WorkflowRun
		Expect(c.Get(ctx, client.ObjectKeyFromObject(fresh), &got)).To(Succeed())
		Expect(got.Finalizers).To(Equal([]string{other}))
		_, err = r.Reconcile(ctx, reconcileRequest(ns, "fresh"))
		Expect(err).NotTo(HaveOccurred())
		Expect(c.Get(ctx, client.ObjectKeyFromObject(fresh), &got)).To(Succeed())
		Expect(got.Finalizers).To(ConsistOf(other, controller.Finalizer))

		// Removing: another party removes its finalizer meanwhile.
		gone := newRun(ns, "gone", manualType(), nil)
		gone.UID = types.UID("uid-" + randomSuffix())
		gone.Finalizers = []string{controller.Finalizer, other}
		now := metav1.Now()
		gone.DeletionTimestamp = &now
		c = fake.NewClientBuilder().WithScheme(scheme).WithObjects(gone).
			WithStatusSubresource(&workflowv1alpha1.WorkflowRun{}).
			WithInterceptorFuncs(raceOnce(func(w *workflowv1alpha1.WorkflowRun) { controllerutil.RemoveFinalizer(w, other) })).Build()
		r = &controller.WorkflowRunReconciler{Client: c, Inbox: eng, Recorder: discardRecorder{}}
		res, err = r.Reconcile(ctx, reconcileRequest(ns, "gone"))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeNumerically(">", 0), "a conflict is looked at again")
		Expect(c.Get(ctx, client.ObjectKeyFromObject(gone), &got)).To(Succeed())
		Expect(got.Finalizers).To(Equal([]string{controller.Finalizer}))
		_, err = r.Reconcile(ctx, reconcileRequest(ns, "gone"))
		Expect(err).NotTo(HaveOccurred())
		Expect(apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(gone), &got))).To(BeTrue())
	})
})
