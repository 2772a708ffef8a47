package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workflowv1alpha1 "github.com/simple-workflow/simple-workflow/api/v1alpha1"
)

// A deduplicated object says so and follows the shared run promptly.
var _ = Describe("WorkflowRun deduplication", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	finishByHand := func(runID string) {
		_, err := pool.Exec(ctx, `update workflow.workflow_run set status = 'succeeded', result = '{"by":"hand"}',
			finished_at = now(), updated_at = now() where id = $1`, runID)
		Expect(err).NotTo(HaveOccurred())
	}

	It("says a second object was deduplicated onto the first one's run, and follows it as promptly", func() {
		first := newRun(ns, "first", "nobody.dedup.v1", map[string]any{"order": 7})
		first.Spec.IdempotencyKey = "order-7"
		Expect(k8sClient.Create(ctx, first)).To(Succeed())
		Eventually(acceptedCondition(ns, "first")).Should(HaveField("Reason", workflowv1alpha1.ReasonMirrored))
		runID := getRun(ns, "first")().Status.RunID

		second := newRun(ns, "second", "nobody.dedup.v1", map[string]any{"order": 7})
		second.Spec.IdempotencyKey = "order-7"
		Expect(k8sClient.Create(ctx, second)).To(Succeed())
		Eventually(func(g Gomega) {
			c := acceptedCondition(ns, "second")()
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
		Expect(acceptedCondition(ns, "third")()).To(HaveField("Reason", workflowv1alpha1.ReasonDeduplicated))
		Expect(string(getRun(ns, "third")().Status.Result.Raw)).To(MatchJSON(`{"by":"hand"}`))
	})
})
