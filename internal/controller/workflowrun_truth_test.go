package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
	"github.com/simple-workflow/simple-workflow/internal/controller"
)

// Statuses that tell the truth: a deduplicated
// object says so and follows the shared run promptly; a run nothing declared
// serves says so; a retry shows when it comes; a cancel says how it came;
// spec.cancel on a finished run is refused or reported.
var _ = Describe("WorkflowRun statuses that tell the truth", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	accepted := func(name string) func() *metav1.Condition {
		return func() *metav1.Condition {
			if got := getRun(ns, name)(); got != nil {
				return condition(got.Status.Conditions, workflowv1alpha1.ConditionAccepted)
			}
			return nil
		}
	}
	finishByHand := func(runID string) {
		_, err := pool.Exec(ctx, `update workflow.workflow_run set status = 'succeeded', result = '{"by":"hand"}',
			finished_at = now(), updated_at = now() where id = $1`, runID)
		Expect(err).NotTo(HaveOccurred())
	}

	It("says a second object was deduplicated onto the first one's run, and follows it as promptly", func() {
		first := newRun(ns, "first", "nobody.dedup.v1", map[string]any{"order": 7})
		first.Spec.IdempotencyKey = "order-7"
		Expect(k8sClient.Create(ctx, first)).To(Succeed())
		Eventually(accepted("first")).Should(HaveField("Reason", workflowv1alpha1.ReasonMirrored))
		runID := getRun(ns, "first")().Status.RunID

		second := newRun(ns, "second", "nobody.dedup.v1", map[string]any{"order": 7})
		second.Spec.IdempotencyKey = "order-7"
		Expect(k8sClient.Create(ctx, second)).To(Succeed())
		Eventually(func(g Gomega) {
			c := accepted("second")()
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonDeduplicated))
			g.Expect(c.Message).To(ContainSubstring("deduplicated onto run " + runID + " (created by WorkflowRun " + ns + "/first)"))
			g.Expect(getRun(ns, "second")().Status.RunID).To(Equal(runID))
		}).Should(Succeed())

		// The run changes in the inbox. Its notification names the first
		// object; the second follows within the same moment, well before
		// the suite's 5 s resync would bring it.
		finishByHand(runID)
		Eventually(phase(ns, "first"), 2*time.Second, 20*time.Millisecond).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		Eventually(phase(ns, "second"), 2*time.Second, 20*time.Millisecond).Should(Equal(workflowv1alpha1.PhaseSucceeded))

		// A third object with the key of a finished run shows it at once,
		// says whose it is, and follows nothing any more.
		third := newRun(ns, "third", "nobody.dedup.v1", map[string]any{"order": 7})
		third.Spec.IdempotencyKey = "order-7"
		Expect(k8sClient.Create(ctx, third)).To(Succeed())
		Eventually(phase(ns, "third"), 3*time.Second, 20*time.Millisecond).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		Expect(accepted("third")()).To(HaveField("Reason", workflowv1alpha1.ReasonDeduplicated))
		Expect(string(getRun(ns, "third")().Status.Result.Raw)).To(MatchJSON(`{"by":"hand"}`))
	})

	It("says when nothing declared serves a run's type, and what does once something is", func() {
		Expect(k8sClient.Create(ctx, newRun(ns, "lonely", "nobody.lonely.v1", nil))).To(Succeed())
		Eventually(func(g Gomega) {
			got := getRun(ns, "lonely")()
			g.Expect(got).NotTo(BeNil())
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionUnserved)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonNoWorker))
			g.Expect(c.Message).To(HavePrefix("no WorkflowRegistry declares workflow type nobody.lonely.v1"))
		}).Should(Succeed())

		// Declared, without a worker pool: not unserved, and said how.
		reg := &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lonely-reg"},
			Spec: workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
				{Name: "nobody.lonely.v1", Runtime: workflowv1alpha1.RuntimePython},
			}},
		}
		Expect(k8sClient.Create(ctx, reg)).To(Succeed())
		Eventually(func(g Gomega) {
			c := condition(getRun(ns, "lonely")().Status.Conditions, workflowv1alpha1.ConditionUnserved)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonRegistered))
			g.Expect(c.Message).To(ContainSubstring("registered (runtime python) by WorkflowRegistry " + ns + "/lonely-reg"))
		}).Should(Succeed())

		// A pool of another runtime does not serve it; one of its runtime
		// does.
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(reg), reg)).To(Succeed())
		reg.Spec.Workers = []workflowv1alpha1.WorkerPool{
			// Prefixes are owned cluster-wide: each spec uses its own.
			{ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{Name: "go-workers"}, Runtime: workflowv1alpha1.RuntimeGo,
				TypePrefixes: []string{"nobody.lonely."}, MaxReplicas: 1},
			{ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{Name: "py-workers"}, Runtime: workflowv1alpha1.RuntimePython,
				TypePrefixes: []string{"nobody.lonely.v"}, MaxReplicas: 1},
		}
		Expect(k8sClient.Update(ctx, reg)).To(Succeed())
		Eventually(func(g Gomega) {
			c := condition(getRun(ns, "lonely")().Status.Conditions, workflowv1alpha1.ConditionUnserved)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonWorkerPool))
			g.Expect(c.Message).To(Equal("worker pool py-workers (WorkflowRegistry " + ns + "/lonely-reg) serves workflow type nobody.lonely.v1"))
		}).Should(Succeed())

		// Once the run no longer waits for a worker, the question is moot.
		_, err := pool.Exec(ctx, "update workflow.workflow_run set status = 'cancelled' where type = 'nobody.lonely.v1'")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() *metav1.Condition {
			return condition(getRun(ns, "lonely")().Status.Conditions, workflowv1alpha1.ConditionUnserved)
		}).Should(BeNil())
	})

	// strandedPool declares, in namespace regNS, one worker pool for
	// prefix whose target does not exist, and has the autoscaler report it.
	strandedPool := func(regNS, regName, target, prefix string) {
		reg := &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: regNS, Name: regName},
			Spec: workflowv1alpha1.WorkflowRegistrySpec{Workers: []workflowv1alpha1.WorkerPool{
				{ScaleTargetRef: workflowv1alpha1.ScaleTargetRef{Name: target}, Runtime: workflowv1alpha1.RuntimeGo,
					TypePrefixes: []string{prefix}, MaxReplicas: 3},
			}},
		}
		Expect(k8sClient.Create(ctx, reg)).To(Succeed())
		scaler := &controller.Autoscaler{Client: k8sClient, Engine: eng, Recorder: discardRecorder{},
			Log: ctrl.Log.WithName("autoscaler"), Namespace: regNS}
		Eventually(func(g Gomega) {
			g.Expect(scaler.Evaluate(ctx)).To(Succeed())
			var got workflowv1alpha1.WorkflowRegistry
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(reg), &got)).To(Succeed())
			g.Expect(got.Status.Workers).NotTo(BeEmpty())
		}).Should(Succeed())
	}
	unserved := func(name string) func() *metav1.Condition {
		return func() *metav1.Condition {
			return condition(getRun(ns, name)().Status.Conditions, workflowv1alpha1.ConditionUnserved)
		}
	}

	It("says when the only worker pool covering a run's type cannot be scaled", func() {
		Expect(k8sClient.Create(ctx, newRun(ns, "stranded", "nobody.stranded.v1", nil))).To(Succeed())
		strandedPool(ns, "stranded-reg", "no-such-deployment", "nobody.stranded.")
		Eventually(unserved("stranded")).Should(And(
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", workflowv1alpha1.ReasonWorkerPoolNotReady),
			HaveField("Message", And(
				HavePrefix("workflow type nobody.stranded.v1 is covered only by worker pool no-such-deployment (WorkflowRegistry "+ns+"/stranded-reg), which cannot be scaled"),
				ContainSubstring("does not exist")))))
	})

	It("names another namespace's registry but not its pool's target or errors", func() {
		// Only the type's namespace's pools serve a run: the other
		// namespace shares the type, and the run asks for it there.
		other := newNamespace()
		Expect(k8sClient.Create(ctx, &workflowv1alpha1.WorkflowRegistry{
			ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "their-types"},
			Spec: workflowv1alpha1.WorkflowRegistrySpec{Workflows: []workflowv1alpha1.WorkflowDefinition{
				{Name: "nobody.foreign.v1", Runtime: workflowv1alpha1.RuntimeGo, SharedWith: []string{ns}}}},
		})).To(Succeed())
		Eventually(func() error { _, err := eng.GetRegistryEntry(ctx, other, "nobody.foreign.v1"); return err }).Should(Succeed())
		foreign := newRun(ns, "foreign", "nobody.foreign.v1", nil)
		foreign.Spec.TypeNamespace = other
		Expect(k8sClient.Create(ctx, foreign)).To(Succeed())
		strandedPool(other, "their-reg", "their-secret-deployment", "nobody.foreign.")
		Eventually(unserved("foreign")).Should(And(
			HaveField("Reason", workflowv1alpha1.ReasonWorkerPoolNotReady),
			HaveField("Message", And(
				ContainSubstring("a worker pool of WorkflowRegistry "+other+"/their-reg"),
				Not(ContainSubstring("their-secret-deployment")),
				Not(ContainSubstring("does not exist"))))))
	})

	It("shows a waiting retry as Retrying with its next attempt time", func() {
		wfr := newRun(ns, "flaky", "test.fail.v1", map[string]any{"FailTimes": 1})
		wfr.Spec.RetryPolicy = &workflowv1alpha1.RetryPolicy{BaseDelay: &metav1.Duration{Duration: time.Hour}}
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		Eventually(func(g Gomega) {
			got := getRun(ns, "flaky")()
			g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhaseRetrying))
			g.Expect(got.Status.NextAttemptAt).NotTo(BeNil())
			g.Expect(got.Status.NextAttemptAt.Time).To(BeTemporally("~", time.Now().Add(time.Hour), 10*time.Minute))
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished)
			g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonRetrying))
			g.Expect(c.Message).To(HavePrefix("attempt 1 of 3 failed: planned failure on attempt 1; next attempt at " +
				got.Status.NextAttemptAt.UTC().Format(time.RFC3339)))
		}).Should(Succeed())
		out, err := kubectl("get", "wfr", "flaky", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`(?m)^NAME\s+TYPE\s+PHASE\s+ATTEMPTS\s+STEPS\s+AGE\s+PROGRESS\s+NEXT-ATTEMPT$`))
		next := getRun(ns, "flaky")().Status.NextAttemptAt.UTC().Format(time.RFC3339)
		Expect(out).To(MatchRegexp(`(?m)^flaky\s+test\.fail\.v1\s+Retrying\s+1/3\s+.*` + next + `$`))
	})

	It("says how a run was cancelled: by spec.cancel, by plain SQL, by a client", func() {
		for _, name := range []string{"by-spec", "by-sql", "by-client"} {
			Expect(k8sClient.Create(ctx, newRun(ns, name, "nobody.cancel.v1", nil))).To(Succeed())
		}
		for _, name := range []string{"by-spec", "by-sql", "by-client"} {
			Eventually(accepted(name)).ShouldNot(BeNil())
		}
		wfr := getRun(ns, "by-spec")()
		p := client.MergeFrom(wfr.DeepCopy())
		wfr.Spec.Cancel = true
		Expect(k8sClient.Patch(ctx, wfr, p)).To(Succeed())
		_, err := pool.Exec(ctx, "update workflow.workflow_run set status = 'cancelled' where id = $1", getRun(ns, "by-sql")().Status.RunID)
		Expect(err).NotTo(HaveOccurred())
		_, err = sdk.Cancel(ctx, getRun(ns, "by-client")().Status.RunID)
		Expect(err).NotTo(HaveOccurred())

		want := map[string]string{
			"by-spec":   "cancelled by spec.cancel of WorkflowRun " + ns + "/by-spec while waiting for a worker",
			"by-sql":    "cancelled by a plain SQL UPDATE of its inbox row while waiting for a worker",
			"by-client": "cancelled through workflow.cancel_run (an SDK client's Cancel, say) while waiting for a worker",
		}
		for name, msg := range want {
			Eventually(func(g Gomega) {
				got := getRun(ns, name)()
				g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhaseCancelled))
				g.Expect(condition(got.Status.Conditions, workflowv1alpha1.ConditionFinished).Message).To(Equal(msg))
			}).Should(Succeed(), name)
			Eventually(func() []string { return eventNotes(ns, name, workflowv1alpha1.ReasonCancelled) }).Should(
				ConsistOf(Equal(capitalizeFirst(msg))), name)
		}
		c := condition(getRun(ns, "by-spec")().Status.Conditions, workflowv1alpha1.ConditionCancelRequested)
		Expect(c).NotTo(BeNil())
		Expect(c.Status).To(Equal(metav1.ConditionTrue))

		// The message stays once said, through later looks at the run.
		Consistently(func() string {
			return condition(getRun(ns, "by-sql")().Status.Conditions, workflowv1alpha1.ConditionFinished).Message
		}, 6*time.Second, 500*time.Millisecond).Should(Equal(want["by-sql"]))
	})

	It("refuses spec.cancel on a finished run at admission, and reports one that slipped through", func() {
		wfr := newRun(ns, "done", "test.echo.v1", map[string]any{"x": 1})
		wfr.Spec.IdempotencyKey = "done-key"
		Expect(k8sClient.Create(ctx, wfr)).To(Succeed())
		Eventually(phase(ns, "done")).Should(Equal(workflowv1alpha1.PhaseSucceeded))
		wfr = getRun(ns, "done")()
		p := client.MergeFrom(wfr.DeepCopy())
		wfr.Spec.Cancel = true
		err := k8sClient.Patch(ctx, wfr, p)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.cancel cannot be set: the run already finished (status.phase is Succeeded)"))

		// An object created with cancel set, deduplicated onto the finished
		// run: admission cannot know; the status and an Event say that
		// nothing was cancelled.
		late := newRun(ns, "late", "test.echo.v1", map[string]any{"x": 1})
		late.Spec.IdempotencyKey = "done-key"
		late.Spec.Cancel = true
		Expect(k8sClient.Create(ctx, late)).To(Succeed())
		Eventually(func(g Gomega) {
			got := getRun(ns, "late")()
			g.Expect(got.Status.Phase).To(Equal(workflowv1alpha1.PhaseSucceeded))
			c := condition(got.Status.Conditions, workflowv1alpha1.ConditionCancelRequested)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(workflowv1alpha1.ReasonRunFinished))
			g.Expect(c.Message).To(Equal("nothing was cancelled: spec.cancel was set after the run had already succeeded"))
		}).Should(Succeed())
		Eventually(func() []string { return eventNotes(ns, "late", workflowv1alpha1.ReasonCancelIgnored) }).Should(
			ConsistOf("Nothing was cancelled: spec.cancel was set after the run had already succeeded"))
	})
})

func capitalizeFirst(s string) string {
	if s == "" {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
