package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// A cancel says how it came; spec.cancel on a finished run is refused or
// reported.
var _ = Describe("WorkflowRun cancellation", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("says how a run was cancelled: by spec.cancel, by plain SQL, by a client", func() {
		for _, name := range []string{"by-spec", "by-sql", "by-client"} {
			Expect(k8sClient.Create(ctx, newRun(ns, name, "nobody.cancel.v1", nil))).To(Succeed())
		}
		for _, name := range []string{"by-spec", "by-sql", "by-client"} {
			Eventually(acceptedCondition(ns, name)).ShouldNot(BeNil())
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
