package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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

var _ = Describe("WorkflowRun hardening", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// A payload the database refuses (a string holding
	// \u0000) passed admission and was retried forever. It now ends with
	// Accepted=False, reason InvalidInput, one Warning Event, and no error
	// for the work queue to retry.
	It("reports a payload the database refuses as InvalidInput, without retrying", func() {
		wfr := newRun(ns, "nul", "test.echo.v1", nil)
		wfr.Spec.Payload = &apiextensionsv1.JSON{Raw: []byte(`{"note":"a\u0000b"}`)}
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		Eventually(func(g Gomega) {
			got := getRun(ns, "nul")()
			g.Expect(got).NotTo(BeNil())
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionAccepted)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonInvalidInput))
			g.Expect(c.Message).To(ContainSubstring("the inbox refused the run"))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ns, "nul", workflowv1alpha1.ReasonInvalidInput) }).Should(HaveLen(1))
		Expect(getRun(ns, "nul")().Status.RunID).To(BeEmpty())

		// Reconciling again is no error: nothing for the queue to retry.
		second := &controller.WorkflowRunReconciler{Client: k8sClient, Inbox: eng, Recorder: discardRecorder{}}
		res, err := second.Reconcile(ctx, reconcileRequest(ns, "nul"))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeZero())
		Consistently(func() []string { return eventNotes(ns, "nul", workflowv1alpha1.ReasonInvalidInput) }, 2*time.Second).Should(HaveLen(1))
		Expect(getRun(ns, "nul")().Status.Phase).To(BeEmpty())
	})

	// What CEL can check is refused before the
	// object exists.
	It("refuses an idempotencyKey holding \\u0000 at admission", func() {
		wfr := newRun(ns, "nul-key", "test.echo.v1", nil)
		wfr.Spec.IdempotencyKey = "a\x00b"
		err := k8sClient.Create(ctx, wfr)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("idempotencyKey"))
	})

	// A WorkflowRun whose idempotency key is held by a run
	// with another type or payload (or of another namespace) is not adopted:
	// Accepted=False, reason IdempotencyConflict, nothing of the other run in
	// the message, and nothing retried.
	It("refuses to adopt a run of the same key with another payload or type", func() {
		first := newRun(ns, "first", "test.echo.v1", map[string]any{"amount": 1})
		first.Spec.IdempotencyKey = "order-7"
		Expect(k8sClient.Create(ctx, first)).To(Succeed())
		Eventually(phase(ns, "first")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		firstRunID := getRun(ns, "first")().Status.RunID

		for name, typ := range map[string]string{"other-payload": "test.echo.v1", "other-type": "test.fail.v1"} {
			wfr := newRun(ns, name, typ, map[string]any{"amount": 1000})
			if name == "other-type" {
				wfr.Spec.Payload = payload(map[string]any{"amount": 1})
			}
			wfr.Spec.IdempotencyKey = "order-7"
			Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
			Eventually(func(g Gomega) {
				got := getRun(ns, name)()
				g.Expect(got).NotTo(BeNil())
				c := condition(got.Status.Conditions, workflowv1alpha1.ConditionAccepted)
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonIdempotencyConflict))
				g.Expect(c.Message).To(ContainSubstring(`spec.idempotencyKey "order-7" is already held`))
				g.Expect(c.Message).NotTo(ContainSubstring(firstRunID))
				g.Expect(c.Message).NotTo(ContainSubstring("first"))
				g.Expect(got.Status.RunID).To(BeEmpty())
				g.Expect(got.Status.Result).To(BeNil())
			}).Should(Succeed())
			Eventually(func() []string { return eventNotes(ns, name, workflowv1alpha1.ReasonIdempotencyConflict) }).Should(HaveLen(1))
			second := &controller.WorkflowRunReconciler{Client: k8sClient, Inbox: eng, Recorder: discardRecorder{}}
			res, err := second.Reconcile(ctx, reconcileRequest(ns, name))
			Expect(err).NotTo(HaveOccurred())
			Expect(res.RequeueAfter).To(BeZero())
		}
		var n int
		Expect(pool.QueryRow(ctx, "select count(*) from workflow.workflow_run where source_namespace = $1", ns).Scan(&n)).To(Succeed())
		Expect(n).To(Equal(1))
	})

	// status.runID is writable by whoever may patch the
	// status. Pointed at another namespace's run, it is neither read, nor
	// cancelled (by spec.cancel or on deletion): the mismatch is reported and
	// the object's own run is found again through its idempotency key.
	It("never acts on a run of another namespace that status.runID was pointed at", func() {
		typ := manualType()
		other := newNamespace()
		Expect(k8sClient.Create(ctx, newRun(other, "victim", typ, map[string]any{"secret": "s3"}))).To(Succeed())
		victimRunID := runIDOf(other, "victim")
		Expect(k8sClient.Create(ctx, newRun(ns, "thief", typ, nil))).To(Succeed())
		ownRunID := runIDOf(ns, "thief")

		pointAtVictim := func() {
			Eventually(func() error {
				cur := getRun(ns, "thief")()
				patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
				cur.Status.RunID = victimRunID
				return k8sClient.Status().Patch(ctx, cur, patch)
			}).Should(Succeed())
		}
		pointAtVictim()
		cur := getRun(ns, "thief")()
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Spec.Cancel = true
		Expect(k8sClient.Patch(ctx, cur, patch)).To(Succeed())

		Eventually(phase(ns, "thief")).Should(Equal(workflowv1alpha1.PhaseCancelled))
		got := getRun(ns, "thief")()
		Expect(got.Status.RunID).To(Equal(ownRunID))
		Expect(got.Status.Result).To(BeNil())
		Eventually(func() []string { return eventNotes(ns, "thief", workflowv1alpha1.ReasonRunIDMismatch) }).ShouldNot(BeEmpty())
		run, err := eng.GetRun(ctx, victimRunID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.Status).To(Equal(engine.StatusPending))

		// Deleting the object cancels only its own run.
		pointAtVictim()
		Expect(k8sClient.Delete(ctx, getRun(ns, "thief")())).To(Succeed())
		Eventually(getRun(ns, "thief")).Should(BeNil())
		run, err = eng.GetRun(ctx, victimRunID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.Status).To(Equal(engine.StatusPending))
		Expect(phase(other, "victim")()).To(Equal(workflowv1alpha1.PhasePending))
	})

	// A status.runID that is not even a run id (the
	// database refuses it as input) is a mismatch too, not an error retried
	// forever.
	It("finds its run again when status.runID is not a run id", func() {
		typ := manualType()
		Expect(k8sClient.Create(ctx, newRun(ns, "garbled", typ, nil))).To(Succeed())
		ownRunID := runIDOf(ns, "garbled")
		Eventually(func() error {
			cur := getRun(ns, "garbled")()
			patch := client.MergeFromWithOptions(cur.DeepCopy(), client.MergeFromWithOptimisticLock{})
			cur.Status.RunID = "not-a-run-id"
			return k8sClient.Status().Patch(ctx, cur, patch)
		}).Should(Succeed())
		second := &controller.WorkflowRunReconciler{Client: k8sClient, Inbox: eng, Recorder: discardRecorder{}}
		_, err := second.Reconcile(ctx, reconcileRequest(ns, "garbled"))
		Expect(err).NotTo(HaveOccurred())
		Expect(getRun(ns, "garbled")().Status.RunID).To(Equal(ownRunID))
	})

	// After retention deleted a finished run, its
	// WorkflowRun errored on every reconcile. It is now left as it is.
	It("leaves a finished WorkflowRun alone once retention removed its run", func() {
		Expect(k8sClient.Create(ctx, newRun(ns, "old", "test.echo.v1", map[string]any{"x": 1}))).To(Succeed())
		Eventually(phase(ns, "old")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		runID := getRun(ns, "old")().Status.RunID
		_, err := pool.Exec(ctx, "delete from workflow.workflow_run where id = $1", runID)
		Expect(err).NotTo(HaveOccurred())

		second := &controller.WorkflowRunReconciler{Client: k8sClient, Inbox: eng, Recorder: discardRecorder{}}
		for range 2 {
			res, err := second.Reconcile(ctx, reconcileRequest(ns, "old"))
			Expect(err).NotTo(HaveOccurred())
			Expect(res.RequeueAfter).To(BeZero())
		}
		got := getRun(ns, "old")()
		Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhaseSucceeded))
		Expect(got.Status.RunID).To(Equal(runID))
		Expect(string(got.Status.Result.Raw)).To(MatchJSON(`{"x":1}`))
		var n int
		Expect(pool.QueryRow(ctx, "select count(*) from workflow.workflow_run where source_namespace = $1", ns).Scan(&n)).To(Succeed())
		Expect(n).To(BeZero())
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
