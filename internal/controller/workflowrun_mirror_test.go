package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
	"github.com/simple-workflow/simple-workflow/internal/engine"
)

// What the mirror records in the inbox for a WorkflowRun, and which run it
// acts on: the input the database refuses, a key held by another run, a
// status.runID that does not name the object's own run, a run retention
// removed.
var _ = Describe("WorkflowRun mirror into the inbox", func() {
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

	It("gives the run spec.deadline and reports the run that exceeds it", func() {
		typ := manualType()
		wfr := newRun(ns, "late", typ, nil)
		wfr.Spec.Deadline = &metav1.Duration{Duration: 2 * time.Second}
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		runID := runIDOf(ns, "late")
		run, err := eng.GetRun(ctx, runID)
		Expect(err).NotTo(HaveOccurred())
		Expect(run.DeadlineAt).NotTo(BeNil())
		Expect(*run.DeadlineAt).To(BeTemporally("~", run.CreatedAt.Add(2*time.Second), 10*time.Millisecond))
		Eventually(func() *metav1.Time { return getRun(ns, "late")().Status.DeadlineAt }).ShouldNot(BeNil())
		Eventually(phase(ns, "late"), 15*time.Second).Should(Equal(workflowv1alpha1.PhaseFailed))
		got := getRun(ns, "late")()
		Expect(got.Status.LastError).To(Equal("deadline exceeded"))
		Eventually(func() []string { return eventReasons(ns, "late") }).Should(Equal([]string{"Failed"}))
		Expect(eventNotes(ns, "late", "Failed")).To(ConsistOf(
			MatchRegexp(`^Failed for good: deadline exceeded at \S+Z while waiting for a worker$`)))
	})
})
